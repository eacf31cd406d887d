#!/usr/bin/env python3
"""bench/run.py — uslab bench: runs uslab's benchmark programs under each allocator and
prints Markdown tables. Allocators: uslab, jemalloc, glibc, plus mimalloc and
tcmalloc when their Debian packages are installed. Each allocator runs the same
program in its own process, in alternating order over --rounds rounds.

Benchmarks (default: all):
  micro         seed-style table: TSC cycles per operation by size, median over
                rounds of each run's median (and the minimum), ratios of uslab
  threads       cross-thread producer/consumer and larson-style workloads:
                operations per second and peak RSS by thread count
  falseshare    private small objects written in a loop by every thread: seconds
  mem           1000 live threads, each with a burst of 1000 small objects: peak RSS
  bulk          the kernel bulk-API seed table: cycles per object of n allocs + n
                frees, single calls vs uslab_alloc_bulk / uslab_cache_alloc_bulk
  concurrent    the seed concurrent test: every CPU does N x alloc then N x free
                at once, average cycles per phase by size (warm pass; cold as ratios)
  requests      a server that goes quiet between requests: a working set held, then
                after each pause (1 ms, 30 ms, 1 s) a request of 2000 allocations of
                16 B - 2 KiB, written and freed: median request time, and uslab with
                decay_ms=100000 (its caches never decaying meanwhile)
  firstuse      start-up of a multi-threaded program: one thread per CPU makes the
                process's first use of 40 size classes at once (200 objects of
                each), then frees another thread's: cycles per allocation and per
                free, median of 9 processes per round
  instructions  instructions per malloc+free pair (valgrind callgrind, which has no
                rseq: the per-thread fallback for uslab)
  rss           memory return: a 256 MB peak of small objects freed, and a
                fragmentation workload (phases of size mixes, random survivors; again
                with a move to the other CPU before phase 2), each followed by 3 s of
                light activity; RSS sampled every 10 ms; uslab
                (default and with background_thread), jemalloc and glibc, decay 1 s
  idle          memory kept after a peak by a program that goes quiet: a 1 GB peak of
                small objects freed, then no call at all (30 s), large calls only, or
                small calls only (15 s); redis-server after FLUSHALL ASYNC of 1 M keys;
                RSS over time, time until back within max(10%, 2 MiB) of the level
                before the peak, the allocator's threads' CPU time and wake-ups;
                every allocator with its defaults, and jemalloc's background threads
  apps          real programs from Debian's packages on generated workloads (bench/apps.py:
                sqlite3, python3, perl, lua, g++, git, ghostscript, z3, rocksdb's db_bench,
                redis-server with redis-benchmark), output checked against glibc's run:
                wall time and peak RSS, ratios, geometric means, a chart
  suite         the standard allocator benchmarks (mimalloc-bench's larson, rptest, sh6bench,
                sh8bench, xmalloc-test, mstress, mleak, cache-scratch/thrash, glibc-simple/
                thread, alloc-test, malloc-large, cfrac, espresso, barnes) from the built
                checkout --suite DIR names (bench/suite.py); the same table as apps, and
                with apps, the geometric means over both
  security      mimalloc-bench's bench/security programs (overflows, use after free,
                double and invalid frees) from the same checkout: which each allocator
                catches, and uslab with guard_sample=1 and its debugging options
  bigblocks     the page-fault storm: 300 times a block of 5 … 25 MiB allocated,
                every page written, freed; wall/user/sys seconds and minor faults
                against glibc
  startup       start-up cost: 500 runs of /bin/true and of python3 -c pass with each
                allocator preloaded (the launcher itself is not), and with an empty
                library preloaded (the floor), interleaved run by run; median wall time
                of a run, against glibc and against the empty library
  thp           a 256 MiB heap of 64-byte objects walked in a random cycle: ns per
                step (TLB misses), peak RSS and AnonHugePages, uslab with and
                without transparent huge pages; and a 256 MiB heap of 16-64 KiB
                objects that churns for 8 s (hugechurn): ns per random read, huge
                pages and RSS at the end
  drift         object sizes that drift (16 B to 8 KiB and back), the first 64 bytes of
                each written or all: peak RSS, huge pages, RSS after 12 s idle, against
                uslab with thp=false and the peers
  prof          the heap profiler's cost: uslab and jemalloc without and with
                profiling at a 512 KiB mean, on malloc/free pairs by size and two
                threaded workloads; instructions per pair under callgrind
  rust          Rust workloads (serde_json, BTreeMap/HashMap churn, a channel
                pipeline, regex; bench/rust/) built with uslab's crate, the mimalloc
                crate, tikv-jemallocator and Rust's default: median time and peak RSS,
                uslab against the best crate; RSS after a 600 MB burst (bench/rust_crates.py)
  numa          cross-node producer/consumer: one pair of xthread, producer and
                consumer pinned to CPUs of two NUMA nodes (on a machine with one
                node, uslab also runs with hwloc's synthetic 2 nodes)
  deferred      the kfree_rcu seed test: loops x objects allocated then handed to a
                deferred free: uslab's blocks, a per-object callback baseline in the
                same process, liburcu's call_rcu under jemalloc; ns per object, batches,
                peak RSS; without and with a reader thread

With --plot DIR, PNG charts (matplotlib) of what ran: cycles per operation by size,
per-object cost by bulk size, throughput and peak RSS by workload, peak RSS of the
1000-thread test, per-phase cycles of the concurrent test.

--vs NAME=PATH (repeatable) adds an allocator built outside Debian's packages (mimalloc
v3, snmalloc, Google's tcmalloc: the README says how to build them), preloaded from PATH
with the environment it needs (launch.allocator_env: one that registers rseq itself
gets glibc.pthread.rseq=0); a name of the installed peers takes PATH instead.

usage: run.py --build DIR [NAME...] [--rounds N] [--json FILE] [--plot DIR]
              [--sizes S,S,...] [--suite MIMALLOC_BENCH_DIR] [--vs NAME=PATH]...

The families live in their own modules: speed.py (micro, bulk, concurrent, firstuse,
startup, instructions, prof), threaded.py (threads, falseshare, mem, numa, deferred),
memory.py (rss, idle, bigblocks, thp), programs.py (apps, suite); what they share in
common.py, the measured launch of one command in launch.py, the charts in plot.py.
"""
import argparse
import contextlib
import datetime
import io
import json
import os
import subprocess
import sys

import memory
import programs
import rust_crates
import speed
import threaded
from common import allocators, machine

class Tee(io.StringIO):
    """Keeps what is printed while passing it on (a benchmark's table for --record)."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def write(self, text):
        self.out.write(text)
        return super().write(text)


def commit():
    """The source tree's commit (with "+changes" when it has uncommitted ones)."""
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    git = ["git", "-C", src]
    try:
        rev = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+changes" if dirty else "")


# Every benchmark, in the order a run without names takes them.
BENCHMARKS = {
    "micro": speed.bench_micro,
    "threads": threaded.bench_threads,
    "falseshare": threaded.bench_falseshare,
    "mem": threaded.bench_mem,
    "bulk": speed.bench_bulk,
    "concurrent": speed.bench_concurrent,
    "requests": speed.bench_requests,
    "firstuse": speed.bench_firstuse,
    "instructions": speed.bench_instructions,
    "deferred": threaded.bench_deferred,
    "rss": memory.bench_rss,
    "idle": memory.bench_idle,
    "apps": programs.bench_apps,
    "suite": programs.bench_suite,
    "security": programs.bench_security,
    "bigblocks": memory.bench_bigblocks,
    "startup": speed.bench_startup,
    "numa": threaded.bench_numa,
    "thp": memory.bench_thp,
    "drift": memory.bench_drift,
    "prof": speed.bench_prof,
    "rust": rust_crates.bench_rust,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--sizes", default="8,16,32,64,128,256,512,1024,2048,4096,8192,16384")
    ap.add_argument("--json")
    ap.add_argument("--plot", metavar="DIR")
    ap.add_argument("--suite", metavar="DIR", help="a built mimalloc-bench checkout (bench suite)")
    ap.add_argument("--vs", metavar="NAME=PATH", action="append", default=[],
                    help="also compare the allocator built at PATH, as NAME (repeatable)")
    ap.add_argument("--record", metavar="RESULTS_MD",
                    help="write the tables into RESULTS_MD (bench/record.py)")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)  # programs run in folders of their own
    names = args.names or list(BENCHMARKS)
    for name in names:
        if name not in BENCHMARKS:
            sys.exit(f"uslab bench: unknown benchmark '{name}' "
                     f"(available: {', '.join(BENCHMARKS)})")

    allocs = allocators(args.build, args.vs)
    out = {"machine": machine(), "tables": {},
           "meta": {"date": datetime.date.today().isoformat(), "commit": commit(),
                    "cpus": os.cpu_count() or 1}}
    print(f"Machine: {machine()}\n")
    medians = {}  # (program, alloc) -> median (time, RSS) of apps and suite
    programs_run = set()  # the geometric means over both follow the second, either order
    for name in names:
        print(f"## {name}\n")
        with contextlib.redirect_stdout(Tee(sys.stdout)) as table:
            result = BENCHMARKS[name](args, allocs, out)
            if name in ("apps", "suite"):
                medians.update(result)
                programs_run.add(name)
            if programs_run == {"apps", "suite"} and name in programs_run and medians:
                # The targets for real programs are over both sets together.
                listed = sorted({n for n, _ in medians})
                print(f"Geometric means over the {len(listed)} programs of apps and suite, / "
                      "jemalloc (time / RSS): " + ", ".join(
                          f"{a} {m}"
                          for a, m in zip(allocs, programs.jemalloc_means(medians, listed,
                                                                          allocs))))
                print()
        out["tables"][name] = table.getvalue()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.plot:
        from plot import plot
        for path in plot(out, args.plot):
            print(f"Chart: {path}")
    if args.record:
        from record import record
        moved = record(args.record, out, set(BENCHMARKS))
        print(f"Recorded in {args.record}: {', '.join(names)} ({moved} earlier section(s) "
              "moved to bench/history/)")


if __name__ == "__main__":
    main()
