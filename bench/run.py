#!/usr/bin/env python3
"""bench/run.py — runs uslab's benchmark programs under each allocator and prints
Markdown tables (uslab bench). Allocators: uslab, jemalloc, glibc, plus mimalloc and
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
  bigblocks     the page-fault storm: 300 times a block of 5 … 25 MiB allocated,
                every page written, freed; wall/user/sys seconds and minor faults
                against glibc
  startup       start-up cost: 500 runs of /bin/true and of python3 -c pass with each
                allocator preloaded (the launcher itself is not), and with an empty
                library preloaded (the floor), interleaved run by run; median wall time
                of a run, against glibc and against the empty library
  thp           a 256 MiB heap of 64-byte objects walked in a random cycle: ns per
                step (TLB misses), peak RSS and AnonHugePages, uslab with and
                without transparent huge pages
  prof          the heap profiler's cost: uslab and jemalloc without and with
                profiling at a 512 KiB mean, on malloc/free pairs by size and two
                threaded workloads; instructions per pair under callgrind
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

usage: run.py --build DIR [NAME...] [--rounds N] [--json FILE] [--plot DIR]
              [--sizes S,S,...] [--suite MIMALLOC_BENCH_DIR]
"""
import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MULTIARCH = "x86_64-linux-gnu"
PEERS = {
    "jemalloc": f"/usr/lib/{MULTIARCH}/libjemalloc.so.2",
    "glibc": "",
    "mimalloc": f"/usr/lib/{MULTIARCH}/libmimalloc.so.2",
    "tcmalloc": f"/usr/lib/{MULTIARCH}/libtcmalloc_minimal.so.4",
}


def preload_env(lib, extra_env=None):
    """This process's environment with lib preloaded ("" = none: glibc) and extra_env."""
    env = dict(os.environ)
    env.update(extra_env or {})
    env.pop("LD_PRELOAD", None)
    if lib:
        env["LD_PRELOAD"] = lib
    return env


def run_json(cmd, lib, extra_env=None):
    """Runs cmd with lib preloaded ("" = glibc); returns its JSON output lines."""
    env = preload_env(lib, extra_env)
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}"


def alternate(allocs, rounds, fn):
    """Calls fn(alloc, lib) for every allocator, rounds times, alternating the order."""
    order = list(allocs)
    for r in range(rounds):
        for a in (order if r % 2 == 0 else order[::-1]):
            print(f"  round {r + 1}/{rounds}: {a}", file=sys.stderr)
            fn(a, allocs[a])


def bench_micro(args, allocs, out):
    exe = os.path.join(args.build, "bench", "micro")
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {a: {} for a in allocs}  # [alloc][(test, size)] = [(min, median, ns)]

    def one(a, lib):
        cmd = [exe, str(args.n), str(args.reps)] + [str(s) for s in sizes]
        for row in run_json(cmd, lib):
            results[a].setdefault((row["test"], row["size"]), []).append(
                (row["cycles_min"], row["cycles_median"], row["ns_median"]))

    alternate(allocs, args.rounds, one)
    peers = [a for a in allocs if a != "uslab"]
    print(f"Command: tools/uslab bench micro --rounds {args.rounds} (N = {args.n}, "
          f"{args.reps} repetitions per run)\n")
    for test in ("N x alloc", "N x free", "alloc/free pair"):
        print(f"### {test} — cycles per operation, median (min)\n")
        print("| size | " + " | ".join(allocs) + " | " +
              " | ".join(f"uslab/{p}" for p in peers) + " |")
        print("|" + "---|" * (1 + len(allocs) + len(peers)))
        for size in sizes:
            med, cells = {}, []
            for a in allocs:
                runs = results[a][(test, size)]
                med[a] = statistics.median(m for _, m, _ in runs)
                cells.append(f"{med[a]:.1f} ({min(x for x, _, _ in runs):.1f})")
            ratios = [f"{med['uslab'] / med[p]:.2f}" for p in peers]
            print(f"| {size} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
        print()
    out["micro"] = {a: {f"{t}/{s}": v for (t, s), v in res.items()} for a, res in results.items()}


def bench_workloads(args, allocs, out, name, cases):
    """cases: list of (label, argv for bench/threads); prints ops/s, seconds, peak RSS."""
    exe = os.path.join(args.build, "bench", "threads")
    results = {a: {} for a in allocs}

    def one(a, lib):
        for label, argv in cases:
            results[a].setdefault(label, []).extend(run_json([exe] + argv, lib))

    alternate(allocs, args.rounds, one)
    print(f"Command: tools/uslab bench {name} --rounds {args.rounds}\n")
    print("| workload | " + " | ".join(allocs) + " | uslab/jemalloc |")
    print("|" + "---|" * (2 + len(allocs)))
    for label, argv in cases:
        med = {}
        for a in allocs:
            runs = results[a][label]
            med[a] = {k: statistics.median(r[k] for r in runs)
                      for k in ("ops_per_sec", "seconds", "peak_rss_kib")}
        if name == "threads":
            cells = [f"{med[a]['ops_per_sec'] / 1e6:.1f} M/s, {med[a]['peak_rss_kib'] / 1024:.1f} MiB"
                     for a in allocs]
            ratio = (f"{med['uslab']['ops_per_sec'] / med['jemalloc']['ops_per_sec']:.2f}× ops, "
                     f"{med['uslab']['peak_rss_kib'] / med['jemalloc']['peak_rss_kib']:.2f}× RSS")
        elif name == "falseshare":
            cells = [f"{med[a]['seconds']:.3f} s" for a in allocs]
            ratio = f"{med['uslab']['seconds'] / med['jemalloc']['seconds']:.2f}× time"
        else:
            cells = [f"{med[a]['peak_rss_kib'] / 1024:.1f} MiB" for a in allocs]
            ratio = f"{med['uslab']['peak_rss_kib'] / med['jemalloc']['peak_rss_kib']:.2f}× RSS"
        print(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    print()
    out[name] = results


def bench_bulk(args, allocs, out):
    exe = os.path.join(args.build, "bench", "bulk")
    peers = {a: allocs[a] for a in ("uslab", "jemalloc") if a in allocs}
    results = {}  # (alloc, test, bulk) -> [median per run]

    def one(a, lib):
        for row in run_json([exe, "21"], lib):
            results.setdefault((a, row["test"], row["bulk"]), []).append(row["cycles_median"])

    alternate(peers, args.rounds, one)
    med = {k: statistics.median(v) for k, v in results.items()}
    bulks = sorted({b for (_, _, b) in results})
    print(f"Command: tools/uslab bench bulk --rounds {args.rounds} (64-byte objects; per bulk "
          "size, 4096 objects allocated in bulks of n then freed; median over rounds of "
          "each run's median of 21)\n")
    print("| n | uslab single | uslab bulk | uslab cache bulk | jemalloc single | "
          "bulk / uslab single | bulk / jemalloc single | improvement |")
    print("|---|---|---|---|---|---|---|---|")
    for b in bulks:
        us, ub = med[("uslab", "single", b)], med[("uslab", "bulk", b)]
        uc, js = med[("uslab", "cache-bulk", b)], med[("jemalloc", "single", b)]
        best = min(ub, uc)
        print(f"| {b} | {us:.1f} | {ub:.1f} | {uc:.1f} | {js:.1f} | {best / us:.2f} | "
              f"{best / js:.2f} | {100 * (1 - best / us):.0f}% |")
    print()
    out["bulk"] = {f"{a}/{t}/{b}": v for (a, t, b), v in results.items()}


def bench_concurrent(args, allocs, out):
    exe = os.path.join(args.build, "bench", "threads")
    cpus = os.cpu_count() or 1
    peers = {a: allocs[a] for a in ("uslab", "jemalloc") if a in allocs}
    results = {}

    def one(a, lib):
        for row in run_json([exe, "concurrent", str(cpus), "10000"], lib):
            for phase in ("alloc", "free"):
                key = (a, row.get("pass", "warm"), phase, row["size"])
                results.setdefault(key, []).append(row[f"{phase}_cycles"])

    alternate(peers, args.rounds, one)
    med = {k: statistics.median(v) for k, v in results.items()}
    sizes = sorted({k[3] for k in results})
    print(f"Command: tools/uslab bench concurrent --rounds {args.rounds} ({cpus} threads, one "
          "pinned per CPU, N = 10000; average TSC cycles per operation of the warm pass, the "
          "second over the sizes in each process; the cold pass, the process's first use of "
          "each size, as ratios)\n")
    print("| size | uslab alloc | jemalloc alloc | ratio | uslab free | jemalloc free | ratio "
          "| cold alloc ratio | cold free ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        r = {(p, ph): med[("uslab", p, ph, size)] / med[("jemalloc", p, ph, size)]
             for p in ("warm", "cold") for ph in ("alloc", "free")}
        ua, ja = med[("uslab", "warm", "alloc", size)], med[("jemalloc", "warm", "alloc", size)]
        uf, jf = med[("uslab", "warm", "free", size)], med[("jemalloc", "warm", "free", size)]
        print(f"| {size} | {ua:.1f} | {ja:.1f} | {r['warm', 'alloc']:.2f} | {uf:.1f} | {jf:.1f} "
              f"| {r['warm', 'free']:.2f} | {r['cold', 'alloc']:.2f} | {r['cold', 'free']:.2f} |")
    print()
    # Warm rows keep the keys of earlier runs (allocator/phase/size); cold ones add /cold.
    out["concurrent"] = {f"{a}/{ph}/{s}" + ("/cold" if p == "cold" else ""): v
                         for (a, p, ph, s), v in results.items()}


def bench_firstuse(args, allocs, out):
    exe = os.path.join(args.build, "bench", "threads")
    cpus = os.cpu_count() or 1
    results = {}  # (alloc, phase) -> [cycles per operation, one per process]

    def one(a, lib):
        for _ in range(9):  # a first use happens once per process
            for row in run_json([exe, "firstuse", str(cpus), "200"], lib):
                for phase in ("alloc", "free"):
                    results.setdefault((a, phase), []).append(row[f"{phase}_cycles"])

    alternate(allocs, args.rounds, one)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"Command: tools/uslab bench firstuse --rounds {args.rounds} ({cpus} threads, one "
          "pinned per CPU, each the process's first use of 40 size classes of 16 … 3799 "
          "bytes at once, 200 objects of each, then frees the next thread's; average TSC "
          f"cycles per operation, median of {9 * args.rounds} processes)\n")
    print("| allocator | alloc | free | alloc / jemalloc | free / jemalloc |")
    print("|---|---|---|---|---|")
    for a in allocs:
        print(f"| {a} | {med[a, 'alloc']:.1f} | {med[a, 'free']:.1f} | "
              f"{med[a, 'alloc'] / med['jemalloc', 'alloc']:.2f} | "
              f"{med[a, 'free'] / med['jemalloc', 'free']:.2f} |")
    print()
    out["firstuse"] = {f"{a}/{ph}": v for (a, ph), v in results.items()}


def numa_pair():
    """Two CPUs on different NUMA nodes (producer, consumer), the node count, and the
    environment that makes uslab see them on two nodes when the machine has one."""
    nodes = {}
    base = "/sys/devices/system/node"
    for d in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if d.startswith("node") and d[4:].isdigit():
            with open(os.path.join(base, d, "cpulist")) as f:
                text = f.read().strip()
            cpus = []
            for part in filter(None, text.split(",")):
                lo, _, hi = part.partition("-")
                cpus += range(int(lo), int(hi or lo) + 1)
            if cpus:
                nodes[int(d[4:])] = cpus
    if len(nodes) >= 2:
        a, b = sorted(nodes)[:2]
        return nodes[a][0], nodes[b][0], len(nodes), {}
    cpus = os.cpu_count() or 1
    half = max(cpus // 2, 1)
    synthetic = {"HWLOC_SYNTHETIC": f"numa:2 pu:{half}", "USLAB_CONF": "topology=hwloc"}
    return 0, min(half, cpus - 1), len(nodes) or 1, synthetic


def bench_numa(args, allocs, out):
    exe = os.path.join(args.build, "bench", "threads")
    pcpu, ccpu, nnodes, synthetic = numa_pair()
    peers = dict(allocs)
    if synthetic:  # one real node: uslab's remote-node path runs on hwloc's made-up nodes
        peers["uslab (2 synthetic nodes)"] = allocs["uslab"]
    results = {}

    def one(a, lib):
        env = synthetic if a.startswith("uslab (") else None
        results.setdefault(a, []).extend(
            run_json([exe, "xnode", str(pcpu), str(ccpu), "1"], lib, env))

    alternate(peers, args.rounds, one)
    where = (f"CPUs {pcpu} and {ccpu} on two of the {nnodes} NUMA nodes" if not synthetic else
             f"CPUs {pcpu} and {ccpu}; the machine has one NUMA node, so the row marked synthetic "
             f"runs uslab with {synthetic['HWLOC_SYNTHETIC']!r} (its remote-node frees, "
             "buffered and flushed) while the memory stays on the one real node")
    print(f"Command: tools/uslab bench numa --rounds {args.rounds} (one producer/consumer pair "
          f"for 1 s, {where})\n")
    print("| allocator | M operations/s | peak RSS | vs jemalloc |")
    print("|---|---|---|---|")
    jem = statistics.median(r["ops_per_sec"] for r in results["jemalloc"])
    for a, runs in results.items():
        ops = statistics.median(r["ops_per_sec"] for r in runs)
        rss = statistics.median(r["peak_rss_kib"] for r in runs)
        print(f"| {a} | {ops / 1e6:.1f} | {rss / 1024:.1f} MiB | {ops / jem:.2f}× ops |")
    print()
    out["numa"] = results


def bench_thp(args, allocs, out):
    exe = os.path.join(args.build, "bench", "tlb")
    peers = dict(allocs)
    peers["uslab thp=false"] = allocs["uslab"]
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        mode = f.read().strip()
    results = {}

    def one(a, lib):
        env = {"USLAB_CONF": "thp=false"} if a == "uslab thp=false" else None
        results.setdefault(a, []).extend(run_json([exe, str(4 << 20), str(20 << 20)], lib, env))

    alternate(peers, args.rounds, one)
    print(f"Command: tools/uslab bench thp --rounds {args.rounds} (4M objects of 64 bytes, 256 "
          f"MiB, linked in a random cycle and followed 20M times; THP setting: {mode})\n")
    print("| allocator | ns per step | setup s | peak RSS | AnonHugePages | vs jemalloc |")
    print("|---|---|---|---|---|---|")
    med = {a: {k: statistics.median(r[k] for r in runs)
               for k in ("ns_per_step", "setup_s", "peak_rss_kib", "anon_huge_kib")}
           for a, runs in results.items()}
    for a, m in med.items():
        print(f"| {a} | {m['ns_per_step']:.1f} | {m['setup_s']:.2f} | "
              f"{m['peak_rss_kib'] / 1024:.0f} MiB | {m['anon_huge_kib'] / 1024:.0f} MiB | "
              f"{m['ns_per_step'] / med['jemalloc']['ns_per_step']:.2f}× time |")
    print()
    out["thp"] = results


def bench_deferred(args, allocs, out):
    exe = os.path.join(args.build, "bench", "deferred")
    urcu = os.path.join(args.build, "bench", "deferred_urcu")
    loops, objects = 5000, 1000
    variants = [("uslab blocks", exe, "blocks", allocs["uslab"]),
                ("per-object baseline", exe, "perobject", allocs["uslab"])]
    if os.path.exists(urcu) and "jemalloc" in allocs:
        variants.append(("liburcu call_rcu + jemalloc", urcu, "urcu", allocs["jemalloc"]))
    results = {}  # (variant, size, readers) -> [rows]
    cases = [(0, 0), (64, 0), (0, 1)]  # (size: 0 = varied 16…512, reader threads)

    def one(name, spec):
        exe_path, mode, lib = spec
        for size, readers in cases:
            for row in run_json([exe_path, mode, str(loops), str(objects), str(size),
                                 str(readers)], lib):
                results.setdefault((name, size, readers), []).append(row)

    alternate({v[0]: v[1:] for v in variants}, args.rounds, one)
    print(f"Command: tools/uslab bench deferred --rounds {args.rounds} ({loops} loops x "
          f"{objects} objects: allocate them, hand each to a deferred free; the time includes "
          "waiting until all are freed; medians over rounds)\n")
    print("| sizes | reader threads | variant | ns per object | batches | peak RSS (KiB) | "
          "time / uslab blocks | RSS / uslab blocks |")
    print("|---|---|---|---|---|---|---|---|")
    for size, readers in cases:
        base = results.get(("uslab blocks", size, readers))
        if not base:
            continue
        bns = statistics.median(r["ns_per_object"] for r in base)
        brss = statistics.median(r["peak_rss_kib"] for r in base)
        for name, *_ in variants:
            rows = results.get((name, size, readers), [])
            if not rows:
                continue
            ns = statistics.median(r["ns_per_object"] for r in rows)
            rss = statistics.median(r["peak_rss_kib"] for r in rows)
            # liburcu does not tell how it batched its callbacks.
            batches = ("—" if name.startswith("liburcu")
                       else f'{statistics.median(r["batches"] for r in rows):.0f}')
            label = "16…512" if size == 0 else str(size)
            print(f"| {label} | {readers} | {name} | {ns:.1f} | {batches} | {rss:.0f} | "
                  f"{ns / bns:.2f} | {rss / brss:.2f} |")
    print()
    out["deferred"] = {f"{n}/{s}/{r}": v for (n, s, r), v in results.items()}


def bench_startup(args, allocs, out):
    exe = os.path.join(args.build, "bench", "startup")
    cmds = [("/bin/true", ["/bin/true"]), ("python3 -c pass", [sys.executable, "-c", "pass"])]
    runs = 500
    # The floor: an empty library preloaded (what ld.so charges for any LD_PRELOAD).
    runs_of = dict(allocs, **{"empty library": os.path.join(args.build, "bench",
                                                            "libpreload_floor.so")})
    names = list(runs_of)
    results = {}  # (cmd, alloc) -> [median per round]
    # The launcher interleaves the libraries run by run (bench/startup.c): start-up
    # differences of a few percent drown in the VM's phases when each library gets a
    # block of runs of its own.
    for r in range(args.rounds):
        print(f"  round {r + 1}/{args.rounds}", file=sys.stderr)
        for label, argv in cmds:
            rows = run_json([exe, str(runs), ",".join(runs_of[a] for a in names)] + argv, "")
            for a, row in zip(names, rows):
                results.setdefault((label, a), []).append(row["median_us"])
    print(f"Command: tools/uslab bench startup --rounds {args.rounds} ({runs} runs of each "
          "command per round with each library, interleaved run by run; median over rounds "
          "of each round's median wall time of a run, µs; \"empty library\" preloads a "
          "library with nothing in it)\n")
    print("| command | " + " | ".join(runs_of) + " | uslab/glibc | uslab/empty library |")
    print("|" + "---|" * (3 + len(runs_of)))
    for label, _ in cmds:
        med = {a: statistics.median(results[(label, a)]) for a in runs_of}
        print(f"| {label} | " + " | ".join(f"{med[a]:.0f}" for a in runs_of) +
              f" | {med['uslab'] / med['glibc']:.3f} | "
              f"{med['uslab'] / med['empty library']:.3f} |")
    print()
    out["startup"] = {f"{c}/{a}": v for (c, a), v in results.items()}


# bench/rss's workloads: frag-move moves to the other CPU before phase 2, as the
# scheduler moves a program (per-CPU heaps must not strand what one CPU freed).
RSS_WORKLOADS = {"peak": ["peak"], "frag": ["frag"], "frag-move": ["frag", "move"]}


def bench_rss(args, allocs, out):
    exe = os.path.join(args.build, "bench", "rss")
    idle_ms = 3000
    configs = [("uslab", allocs["uslab"], {"USLAB_CONF": "decay_ms=1000"}),
               ("uslab background_thread", allocs["uslab"],
                {"USLAB_CONF": "decay_ms=1000,background_thread=true"})]
    if "jemalloc" in allocs:
        configs.append(("jemalloc", allocs["jemalloc"],
                        {"MALLOC_CONF": "dirty_decay_ms:1000,muzzy_decay_ms:0"}))
    configs.append(("glibc", "", {}))
    results = {}  # (config, workload) -> [rows]

    def one(name, spec):
        lib, extra = spec
        env = preload_env(lib, extra)
        for workload, argv in RSS_WORKLOADS.items():
            text = subprocess.run([exe, argv[0], str(idle_ms)] + argv[1:], env=env, check=True,
                                  capture_output=True, text=True).stdout
            results.setdefault((name, workload), []).append(json.loads(text))

    alternate({c[0]: c[1:] for c in configs}, args.rounds, one)
    print(f"Command: tools/uslab bench rss --rounds {args.rounds} (decay 1 s for uslab and "
          f"jemalloc: USLAB_CONF=decay_ms=1000, MALLOC_CONF=dirty_decay_ms:1000,muzzy_decay_ms:0; "
          f"{idle_ms} ms of light activity after the frees; medians over rounds; \"back\" is the "
          "time after the frees until RSS came within max(10%, 2 MiB) of the level before "
          "the peak, — when it did not)\n")
    print("| workload | allocator | RSS before (MiB) | peak RSS (MiB) | RSS at the end (MiB) | "
          "end − before (MiB) | back within (ms) | peak / jemalloc | end / jemalloc |")
    print("|---|---|---|---|---|---|---|---|---|")
    for workload in RSS_WORKLOADS:
        jem = results.get(("jemalloc", workload))
        jpeak = statistics.median(r["peak_kib"] for r in jem) if jem else None
        jend = statistics.median(r["end_kib"] for r in jem) if jem else None
        for name, *_ in configs:
            rows = results[(name, workload)]
            before = statistics.median(r["before_kib"] for r in rows)
            peak = statistics.median(r["peak_kib"] for r in rows)
            end = statistics.median(r["end_kib"] for r in rows)
            backs = [r["back_ms"] for r in rows]
            back = "—" if min(backs) < 0 else f"{statistics.median(backs):.0f}"
            ratios = (f"{peak / jpeak:.2f} | {end / jend:.2f}" if jem else "— | —")
            print(f"| {workload} | {name} | {before / 1024:.1f} | {peak / 1024:.1f} | "
                  f"{end / 1024:.1f} | {(end - before) / 1024:.1f} | {back} | {ratios} |")
    print()
    out["rss"] = {f"{n}/{w}": rows for (n, w), rows in results.items()}


IDLE_PEAK_MB = 1024
IDLE_CASES = {  # workload: (idle.c mode or "redis", idle ms)
    "no calls": ("none", 30000),
    "large calls only": ("large", 15000),
    "small calls only": ("small", 15000),
    "redis-server": ("redis", 15000),
}


def idle_configs(allocs):
    """Every allocator with its defaults, and jemalloc with its background threads."""
    configs = [(a, lib, {}) for a, lib in allocs.items()]
    if "jemalloc" in allocs:
        configs.insert(2, ("jemalloc background_thread", allocs["jemalloc"],
                           {"MALLOC_CONF": "background_thread:true"}))
    return configs


def redis_idle(lib, extra, idle_ms):
    """redis-server (Debian's, linked with jemalloc) with lib preloaded: 1 M keys, then
    FLUSHALL ASYNC (its lazyfree thread frees them; no purge call follows), then idle
    with nothing to do; RSS of the server every 100 ms. None where redis cannot run."""
    import socket
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        return None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = preload_env(lib, extra)
    work = tempfile.mkdtemp()
    server = subprocess.Popen(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", work, "--enable-debug-command", "yes",
                               "--logfile", os.path.join(work, "log")], env=env)
    cli = ["redis-cli", "-p", port]

    def rss():
        with open(f"/proc/{server.pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
    try:
        for _ in range(100):
            if subprocess.run(cli + ["ping"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        before = rss()
        subprocess.run(cli + ["debug", "populate", "1000000", "key", "100"], check=True,
                       capture_output=True)
        peak = rss()
        subprocess.run(cli + ["flushall", "async"], check=True, capture_output=True)
        t0 = time.monotonic()
        samples, back = [], -1
        allowed = before + max(before // 10, 2048)
        while (t := time.monotonic() - t0) * 1000 < idle_ms:
            kib = rss()
            samples.append([int(t * 1000), kib])
            if back < 0 and kib <= allowed:
                back = int(t * 1000)
            time.sleep(0.1)
        return {"mode": "redis", "before_kib": before, "peak_kib": peak, "end_kib": rss(),
                "back_ms": back, "threads_cpu_ms": None, "threads_switches_last_10s": None,
                "samples": samples}
    finally:
        subprocess.run(cli + ["shutdown", "nosave"], capture_output=True)
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


def bench_idle(args, allocs, out):
    exe = os.path.join(args.build, "bench", "idle")
    configs = idle_configs(allocs)
    results = {}  # (config, workload) -> [rows]

    def one(name, spec):
        lib, extra = spec
        env = preload_env(lib, extra)
        for workload, (mode, idle_ms) in IDLE_CASES.items():
            if mode == "redis":
                # glibc cannot be put under redis-server: it links jemalloc itself.
                row = redis_idle(lib, extra, idle_ms) if lib else None
            else:
                text = subprocess.run([exe, mode, str(IDLE_PEAK_MB), str(idle_ms)], env=env,
                                      check=True, capture_output=True, text=True).stdout
                row = json.loads(text)
            if row:
                results.setdefault((name, workload), []).append(row)

    alternate({c[0]: c[1:] for c in configs}, args.rounds, one)
    print(f"Command: tools/uslab bench idle --rounds {args.rounds} (every allocator with its "
          f"defaults, and jemalloc with MALLOC_CONF=background_thread:true; a {IDLE_PEAK_MB} MB "
          "peak of 16-512 B objects freed by a single-threaded program, then no call at all for "
          "30 s, or a 100 KB malloc/free every 500 ms, or 100 malloc(64)/free every 500 ms, for "
          "15 s; redis-server with 1 M keys, FLUSHALL ASYNC, then idle for 15 s; medians over "
          "rounds; \"back\" is the time after the frees until RSS came within max(10%, 2 MiB) "
          "of the level before the peak, — when it did not; the allocator's threads' CPU time "
          "and context switches (wake-ups) in the last 10 s of the run)\n")
    print("| workload | allocator | RSS before (MiB) | peak RSS (MiB) | RSS at the end (MiB) | "
          "end − before (MiB) | back within (ms) | end / jemalloc | allocator threads: CPU ms, "
          "wake-ups in the last 10 s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for workload in IDLE_CASES:
        jem = results.get(("jemalloc", workload))
        jend = statistics.median(r["end_kib"] for r in jem) if jem else None
        for name, *_ in configs:
            rows = results.get((name, workload))
            if not rows:
                print(f"| {workload} | {name} | — | — | — | — | — | — | — |")
                continue
            med = {k: statistics.median(r[k] for r in rows)
                   for k in ("before_kib", "peak_kib", "end_kib")}
            backs = [r["back_ms"] for r in rows]
            back = "—" if min(backs) < 0 else f"{statistics.median(backs):.0f}"
            ratio = f"{med['end_kib'] / jend:.2f}" if jend else "—"
            threads = "—"
            if rows[0]["threads_cpu_ms"] is not None:
                threads = (f"{statistics.median(r['threads_cpu_ms'] for r in rows):.0f}, "
                           f"{statistics.median(r['threads_switches_last_10s'] for r in rows):.0f}")
            print(f"| {workload} | {name} | {med['before_kib'] / 1024:.1f} | "
                  f"{med['peak_kib'] / 1024:.1f} | {med['end_kib'] / 1024:.1f} | "
                  f"{(med['end_kib'] - med['before_kib']) / 1024:.1f} | {back} | {ratio} | "
                  f"{threads} |")
    print()
    out["idle"] = {f"{n}/{w}": rows for (n, w), rows in results.items()}


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def compare_programs(args, allocs, out, key, programs, run, command):
    """Runs every program (objects with .name, .compare, .check) under every allocator,
    alternating: run(program, alloc, lib, bindings_dir) -> (measures with wall_s and
    peak_rss_mib, exit status, stdout digest, stdout, why not served or None). Warm-ups
    first: the reference output (glibc's, or the first allocator's that served the
    program) and which allocators served it. Prints the table of medians, the ratios to
    jemalloc and to the best of jemalloc/mimalloc/tcmalloc, the geometric means; returns
    {(program, alloc): (time, RSS)} medians."""
    results = {}      # (program, allocator) -> [run]
    flagged = []      # (program, allocator, why)
    not_served = {}   # (program, allocator) -> why
    reference = {}    # program -> stdout digest of the reference allocator
    work = tempfile.mkdtemp()
    for p in programs:
        order = (["glibc"] if "glibc" in allocs else []) + [a for a in allocs if a != "glibc"]
        for a in order:
            ld = tempfile.mkdtemp(dir=work)
            _, status, digest, _, why = run(p, a, allocs[a], ld)
            if why:
                not_served[(p.name, a)] = why
            elif p.name not in reference and status == 0:
                reference[p.name] = digest
    shutil.rmtree(work, ignore_errors=True)

    def one(a, lib):
        for p in programs:
            if (p.name, a) in not_served:
                continue
            r, status, digest, stdout, _ = run(p, a, lib, None)
            why = None
            if status != 0:
                why = f"exit status {status}"
            elif p.compare and digest != reference.get(p.name):
                why = "output differs from the reference run"
            elif p.check and not p.check(stdout):
                why = "its own check failed"
            if why:
                flagged.append((p.name, a, why))
            else:
                results.setdefault((p.name, a), []).append(r)

    alternate(allocs, args.rounds, one)
    names = list(allocs)
    peers = [p for p in ("jemalloc", "mimalloc", "tcmalloc") if p in allocs]
    print(f"Command: {command}\n")
    print("| program | " + " | ".join(f"{a} s / MiB" for a in names) +
          " | uslab/jemalloc time, RSS | uslab / best peer: time, RSS |")
    print("|" + "---|" * (3 + len(names)))
    med = {}
    for p in programs:
        cells = []
        for a in names:
            rows = results.get((p.name, a))
            if rows:
                med[(p.name, a)] = (statistics.median(r["wall_s"] for r in rows),
                                    statistics.median(r["peak_rss_mib"] for r in rows))
                cells.append(f"{med[(p.name, a)][0]:.3f} / {med[(p.name, a)][1]:.1f}")
            else:
                cells.append("—")
        u, j = med.get((p.name, "uslab")), med.get((p.name, "jemalloc"))
        vs_j = f"{u[0] / j[0]:.2f}, {u[1] / j[1]:.2f}" if u and j else "—"
        best = [med[(p.name, q)] for q in peers if (p.name, q) in med]
        vs_best = (f"{u[0] / min(t for t, _ in best):.2f}, {u[1] / min(m for _, m in best):.2f}"
                   if u and best else "—")
        print(f"| {p.name} | " + " | ".join(cells) + f" | {vs_j} | {vs_best} |")
    print("| geometric mean, / jemalloc (time / RSS) | " +
          " | ".join(jemalloc_means(med, [p.name for p in programs], names)) + " | | |")
    print()
    for (n, a), why in not_served.items():
        print(f"Not served: {a} under {n}: {why}")
    for n, a, why in flagged:
        print(f"Flagged: {a} under {n}: {why} (left out)")
    out[key] = {f"{n}/{a}": rows for (n, a), rows in results.items()}
    return med


def not_served_why(lib, bindings):
    """Why lib did not serve a run whose LD_DEBUG=bindings files are in `bindings`
    (None when it did, or when the run was not a warm-up that logged them)."""
    import ab
    return ab.served(lib, ab.malloc_bindings(bindings)) if bindings else None


def jemalloc_means(med, programs, names):
    """Per allocator, "time / RSS" geometric means of its ratios to jemalloc over the
    programs both served."""
    means = []
    for a in names:
        both = [n for n in programs if (n, a) in med and (n, "jemalloc") in med]
        t = geomean(med[(n, a)][0] / med[(n, "jemalloc")][0] for n in both)
        m = geomean(med[(n, a)][1] / med[(n, "jemalloc")][1] for n in both)
        means.append(f"{t:.2f} / {m:.2f}" if t else "—")
    return means


def bench_apps(args, allocs, out):
    """Real programs (bench/apps.py) under every allocator: wall time and peak RSS."""
    import ab
    import apps
    spawn = os.path.join(args.build, "bench", "spawn")
    present = [a for a in apps.APPS if shutil.which(a.binary)]
    for a in apps.APPS:
        if a not in present:
            print(f"Skipped: {a.name} ({a.binary} is not installed: apt-get install {a.package})\n")
    work = tempfile.mkdtemp()
    dirs = {}
    for i, app in enumerate(present):
        dirs[app.name] = os.path.join(work, f"app{i}")
        os.makedirs(dirs[app.name])
        if app.prepare:
            app.prepare(dirs[app.name])

    def run(app, a, lib, bindings):
        d = dirs[app.name]
        if app.server:
            wall, hwm, ok = apps.redis_run(lib, d)
            why = "redis-server links jemalloc: glibc's malloc is not its" if not lib else None
            return {"wall_s": wall, "peak_rss_mib": hwm / 1024}, 0 if ok else 1, None, b"", why
        stdin = os.path.join(d, app.stdin) if app.stdin else os.devnull
        r, status, digest, stdout = ab.run_once(spawn, app.cmd, lib, [], work, stdin, bindings,
                                                cwd=d, command_env=app.env, keep_stdout=True)
        return r, status, digest, stdout, not_served_why(lib, bindings)

    med = compare_programs(
        args, allocs, out, "apps", present, run,
        f"tools/uslab bench apps --rounds {args.rounds} (each program's output checked against "
        "glibc's run; medians over rounds; time is wall seconds, RSS the peak in MiB; — where "
        "the allocator did not serve the program or its runs failed)")
    shutil.rmtree(work, ignore_errors=True)
    return med


def bench_suite(args, allocs, out):
    """mimalloc-bench's programs from the checkout --suite names (bench/suite.py)."""
    import ab
    import suite
    if not args.suite:
        print("Skipped: point --suite at a built checkout of github.com/daanx/mimalloc-bench "
              "(cmake -S bench -B out/bench && cmake --build out/bench)\n")
        return {}
    checkout, bins, why = suite.locate(args.suite)
    if why:
        sys.exit(f"uslab bench suite: {why}")
    spawn = os.path.join(args.build, "bench", "spawn")
    cpus = os.cpu_count() or 1
    present = [p for p in suite.PROGRAMS if os.access(os.path.join(bins, p.binary), os.X_OK)]
    for p in suite.PROGRAMS:
        if p not in present:
            print(f"Skipped: {p.name} ({p.binary} is not built in {bins})\n")
    work = tempfile.mkdtemp()

    def run(p, a, lib, bindings):
        stdin = os.path.join(checkout, p.stdin) if p.stdin else os.devnull
        r, status, digest, stdout = ab.run_once(spawn, suite.command(p, checkout, bins, cpus),
                                                lib, [], work, stdin, bindings, cwd=bins,
                                                keep_stdout=True)
        own = p.time(stdout.decode(errors="replace")) if p.time else None
        if own is not None:
            r["wall_s"] = own  # without it, p.check flags the run
        return r, status, digest, stdout, not_served_why(lib, bindings)

    med = compare_programs(
        args, allocs, out, "suite", present, run,
        f"tools/uslab bench suite --suite DIR --rounds {args.rounds} (mimalloc-bench's programs "
        f"with bench.sh's arguments for {cpus} CPUs; time in seconds: wall time, or for larson, "
        "rptest, xmalloc-test and glibc-thread the relative time bench.sh derives from their "
        "throughput; RSS the peak in MiB; medians over rounds; deterministic outputs checked "
        "against glibc's run)")
    shutil.rmtree(work, ignore_errors=True)
    return med


def bench_bigblocks(args, allocs, out):
    exe = os.path.join(args.build, "bench", "bigblocks")
    iterations = 300
    results = {}

    def one(a, lib):
        for row in run_json([exe, str(iterations)], lib):
            results.setdefault(a, []).append(row)

    alternate(allocs, args.rounds, one)
    print(f"Command: tools/uslab bench bigblocks --rounds {args.rounds} ({iterations} blocks of "
          "5 … 25 MiB, every page written, then freed; medians over rounds)\n")
    print("| allocator | wall s | user s | sys s | minor faults | faults / glibc | wall / glibc |")
    print("|---|---|---|---|---|---|---|")
    med = {a: {k: statistics.median(r[k] for r in rows)
               for k in ("wall_s", "user_s", "sys_s", "minflt")} for a, rows in results.items()}
    g = med.get("glibc")
    for a, m in med.items():
        ratios = (f"{m['minflt'] / g['minflt']:.2f} | {m['wall_s'] / g['wall_s']:.2f}" if g
                  else "— | —")
        print(f"| {a} | {m['wall_s']:.3f} | {m['user_s']:.3f} | {m['sys_s']:.3f} | "
              f"{m['minflt']:.0f} | {ratios} |")
    print()
    out["bigblocks"] = results


def bench_instructions(args, allocs, out):
    if not shutil.which("valgrind"):
        print("valgrind is not installed: instruction counts skipped\n")
        return
    exe = os.path.join(args.build, "bench", "micro")
    pairs = 1000000
    print(f"Command: tools/uslab bench instructions ({pairs} pairs of malloc(64)/free under "
          "valgrind --tool=callgrind, counting inside malloc and free)\n")
    print("| allocator | instructions per pair |")
    print("|---|---|")
    out["instructions"] = {}
    for a, lib in allocs.items():
        with tempfile.TemporaryDirectory() as tmp:
            cg = os.path.join(tmp, "cg.out")
            env = dict(os.environ)
            env.pop("LD_PRELOAD", None)
            if lib:
                env["LD_PRELOAD"] = lib
            subprocess.run(["valgrind", "-q", "--tool=callgrind", f"--callgrind-out-file={cg}",
                            "--toggle-collect=malloc", "--toggle-collect=free",
                            "--toggle-collect=__libc_malloc", "--toggle-collect=__libc_free",
                            exe, "pairs", str(pairs), "64"],
                           env=env, check=True, capture_output=True)
            with open(cg) as f:
                total = next(int(l.split()[1]) for l in f if l.startswith("totals:"))
        out["instructions"][a] = total / pairs
        note = " (per-thread fallback: no rseq under valgrind)" if a == "uslab" else ""
        print(f"| {a} | {total / pairs:.1f}{note} |")
    print()


def bench_prof(args, allocs, out):
    """The heap profiler's cost: uslab and jemalloc (Debian's is built with its
    profiler), each without and with profiling at the same mean rate (512 KiB), on
    malloc/free pairs (bench/micro) and two threaded workloads (bench/threads)."""
    micro = os.path.join(args.build, "bench", "micro")
    threads = os.path.join(args.build, "bench", "threads")
    configs = {"uslab": (allocs["uslab"], {}),
               "uslab prof": (allocs["uslab"], {"USLAB_CONF": "prof=true,prof_final=false"})}
    if "jemalloc" in allocs:
        configs["jemalloc"] = (allocs["jemalloc"], {})
        configs["jemalloc prof"] = (allocs["jemalloc"], {"MALLOC_CONF": "prof:true,prof_final:false"})
    sizes = [16, 64, 256, 1024, 4096, 65536]
    cases = [("larson 2 threads", ["larson", "2", "1"]), ("xthread 2 threads", ["xthread", "2", "1"])]
    pairs = {c: {} for c in configs}    # [config][size] = [cycles median per run]
    work = {c: {} for c in configs}     # [config][case] = [ops/s per run]

    def one(c, _):
        lib, env = configs[c]
        cmd = [micro, str(args.n), str(args.reps)] + [str(s) for s in sizes]
        for row in run_json(cmd, lib, env):
            if row["test"] == "alloc/free pair":
                pairs[c].setdefault(row["size"], []).append(row["cycles_median"])
        for label, argv in cases:
            for row in run_json([threads] + argv, lib, env):
                work[c].setdefault(label, []).append(row["ops_per_sec"])

    alternate({c: None for c in configs}, args.rounds, one)
    print(f"Command: tools/uslab bench prof --rounds {args.rounds} (prof=true / prof:true at "
          f"the default 512 KiB mean; medians over rounds; ratio: with profiling / without)\n")
    names = list(configs)
    bases = [n for n in names if not n.endswith(" prof")]
    print("| workload | " + " | ".join(names) + " | " +
          " | ".join(f"{b} prof / {b}" for b in bases) + " |")
    print("|" + "---|" * (1 + len(names) + len(bases)))
    result = {}
    for size in sizes:
        med = {c: statistics.median(pairs[c][size]) for c in names}
        result[f"pair {size}"] = med
        print(f"| malloc+free {size} B, cycles | " + " | ".join(f"{med[c]:.1f}" for c in names) + " | " +
              " | ".join(f"{med[b + ' prof'] / med[b]:.3f}" for b in bases) + " |")
    for label, _ in cases:
        med = {c: statistics.median(work[c][label]) for c in names}
        result[label] = med
        # Time per operation: the inverse of throughput, so that > 1 is a cost here too.
        print(f"| {label}, M ops/s | " + " | ".join(f"{med[c] / 1e6:.2f}" for c in names) + " | " +
              " | ".join(f"{med[b] / med[b + ' prof']:.3f}" for b in bases) + " |")
    print()
    if shutil.which("valgrind"):
        # Exact counts, where the cycles above are noisy at the percent level.
        print("Instructions per malloc+free pair inside malloc and free under callgrind "
              "(per-thread fallback: valgrind has no rseq), 1,000,000 pairs:\n")
        print("| size | uslab | uslab prof | ratio |")
        print("|---|---|---|---|")
        for size in (64, 256, 1024, 4096):
            counts = {}
            for c in ("uslab", "uslab prof"):
                lib, env = configs[c]
                with tempfile.TemporaryDirectory() as tmp:
                    cg = os.path.join(tmp, "cg.out")
                    subprocess.run(["valgrind", "-q", "--tool=callgrind", f"--callgrind-out-file={cg}",
                                    "--toggle-collect=malloc", "--toggle-collect=free", micro, "pairs",
                                    "1000000", str(size)], env=preload_env(lib, env), check=True,
                                   capture_output=True)
                    with open(cg) as f:
                        counts[c] = next(int(l.split()[1]) for l in f if l.startswith("totals:")) / 1e6
                result[f"instructions {c} {size}"] = counts[c]
            print(f"| {size} B | {counts['uslab']:.2f} | {counts['uslab prof']:.2f} | "
                  f"{counts['uslab prof'] / counts['uslab']:.3f} |")
        print()
    out["prof"] = result


def plot(out, directory):
    """PNG charts of the results in `out` into directory; returns the files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(directory, exist_ok=True)
    files = []

    def save(fig, name):
        path = os.path.join(directory, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)

    if "rss" in out:
        fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
        for ax, workload in zip(axes, ("peak", "frag")):
            for key, rows in out["rss"].items():
                name, w = key.rsplit("/", 1)
                if w != workload:
                    continue
                run = sorted(rows, key=lambda r: r["end_kib"])[len(rows) // 2]  # the median run
                ax.plot([t / 1000 for t, _ in run["samples"]],
                        [kib / 1024 for _, kib in run["samples"]], label=name)
            ax.set_xlabel("seconds")
            ax.set_ylabel("RSS (MiB)")
            ax.set_title({"peak": "256 MB peak, freed, then light activity",
                          "frag": "fragmentation phases, freed, then light activity"}[workload])
            ax.grid(True, alpha=0.3)
            ax.legend()
        save(fig, "rss.png")

    if "apps" in out:
        fig, axes = plt.subplots(1, 2, figsize=(15, 5.5))
        res = out["apps"]
        programs = sorted({k.rsplit("/", 1)[0] for k in res})
        allocators = [a for a in ("uslab", "mimalloc", "tcmalloc", "glibc")
                      if any(k.endswith("/" + a) for k in res)]
        width = 0.8 / max(1, len(allocators))
        for ax, (measure, label) in zip(axes, (("wall_s", "time"), ("peak_rss_mib", "peak RSS"))):
            for i, a in enumerate(allocators):
                vals = []
                for p in programs:
                    mine, jem = res.get(f"{p}/{a}"), res.get(f"{p}/jemalloc")
                    vals.append(statistics.median(r[measure] for r in mine) /
                                statistics.median(r[measure] for r in jem) if mine and jem else 0)
                ax.bar([j + i * width for j in range(len(programs))], vals, width, label=a)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(programs))])
            ax.set_xticklabels([p.split(" ")[0] for p in programs], rotation=30)
            ax.set_ylabel(f"{label} / jemalloc's")
            ax.set_title(f"real programs: {label} relative to jemalloc (lower is better)")
            ax.legend(fontsize=8)
        save(fig, "apps.png")

    if "idle" in out:
        fig, axes = plt.subplots(2, 2, figsize=(14, 9))
        for ax, workload in zip(axes.flat, IDLE_CASES):
            for key, rows in out["idle"].items():
                name, w = key.rsplit("/", 1)
                if w != workload:
                    continue
                run = sorted(rows, key=lambda r: r["end_kib"])[len(rows) // 2]  # the median run
                ax.plot([t / 1000 for t, _ in run["samples"]],
                        [kib / 1024 for _, kib in run["samples"]], label=name)
            ax.set_xlabel("seconds after the frees")
            ax.set_ylabel("RSS (MiB)")
            ax.set_yscale("log")
            ax.set_title(workload if workload == "redis-server" else
                         f"{IDLE_PEAK_MB} MB peak freed, then {workload}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        save(fig, "idle.png")

    if "micro" in out:
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
        for ax, test in zip(axes, ("N x alloc", "N x free", "alloc/free pair")):
            for alloc, res in out["micro"].items():
                pts = sorted((int(k.split("/")[-1]), statistics.median(m for _, m, _ in v))
                             for k, v in res.items() if k.rsplit("/", 1)[0] == test)
                ax.plot([s for s, _ in pts], [c for _, c in pts], marker="o", label=alloc)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("cycles per operation (median)")
            ax.set_title(test)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend()
        save(fig, "micro.png")
    if "bulk" in out:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        series = {}
        for key, v in out["bulk"].items():
            alloc, test, n = key.split("/")
            series.setdefault(f"{alloc} {test}", []).append((int(n), statistics.median(v)))
        for label, pts in sorted(series.items()):
            pts.sort()
            ax.plot([n for n, _ in pts], [c for _, c in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("objects per bulk call")
        ax.set_ylabel("cycles per object (alloc + free)")
        ax.set_title("bulk alloc + free of 64-byte objects")
        ax.grid(True, alpha=0.3)
        ax.legend()
        save(fig, "bulk.png")
    for name, measure, unit, scale in (("threads", "ops_per_sec", "M operations/s", 1e-6),
                                       ("mem", "peak_rss_kib", "peak RSS (MiB)", 1 / 1024)):
        if name not in out:
            continue
        res = out[name]
        allocs = list(res)
        labels = list(res[allocs[0]])
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels) * len(allocs) / 3), 4.5))
        width = 0.8 / len(allocs)
        for i, alloc in enumerate(allocs):
            vals = [statistics.median(r[measure] for r in res[alloc][l]) * scale for l in labels]
            ax.bar([j + i * width for j in range(len(labels))], vals, width, label=alloc)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))])
        ax.set_xticklabels(labels, rotation=15)
        ax.set_ylabel(unit)
        ax.set_title(name)
        ax.legend()
        save(fig, f"{name}.png")
    if "concurrent" in out:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        for ax, phase in zip(axes, ("alloc", "free")):
            for alloc in ("uslab", "jemalloc"):
                pts = sorted((int(k.split("/")[2]), statistics.median(v))
                             for k, v in out["concurrent"].items()
                             if k.startswith(f"{alloc}/{phase}/") and k.count("/") == 2)
                ax.plot([s for s, _ in pts], [c for _, c in pts], marker="o", label=alloc)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("cycles per operation")
            ax.set_title(f"every CPU at once: N x {phase}")
            ax.grid(True, alpha=0.3)
            ax.legend()
        save(fig, "concurrent.png")
    return files


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
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)  # programs run in folders of their own
    known = ["micro", "threads", "falseshare", "mem", "bulk", "concurrent", "firstuse",
             "instructions", "deferred", "rss", "idle", "apps", "suite", "bigblocks", "startup",
             "numa", "thp", "prof"]
    names = args.names or known
    for name in names:
        if name not in known:
            sys.exit(f"uslab bench: unknown benchmark '{name}' (available: {', '.join(known)})")

    allocs = {"uslab": os.path.join(args.build, "libuslab.so")}
    for name, lib in PEERS.items():
        if not lib or os.path.exists(lib):
            allocs[name] = lib
    cpus = os.cpu_count() or 1
    counts = sorted({2, 4, 8, 16, 2 * cpus} & set(range(2, 2 * cpus + 1)))
    out = {"machine": machine()}
    print(f"Machine: {machine()}\n")
    programs = {}  # (program, alloc) -> median (time, RSS) of apps and suite
    for name in names:
        print(f"## {name}\n")
        if name == "micro":
            bench_micro(args, allocs, out)
        elif name == "prof":
            bench_prof(args, allocs, out)
        elif name == "threads":
            cases = []
            for t in counts:
                if t <= cpus:  # spinning producers and consumers need a CPU each
                    cases.append((f"xthread {t} threads", ["xthread", str(t), "1"]))
                cases.append((f"larson {t} threads", ["larson", str(t), "1"]))
            bench_workloads(args, allocs, out, name, cases)
        elif name == "falseshare":
            cases = [(f"falseshare {t} threads", ["falseshare", str(t), "2000000"])
                     for t in counts if t <= cpus] or [("falseshare 2 threads",
                                                        ["falseshare", "2", "2000000"])]
            bench_workloads(args, allocs, out, name, cases)
        elif name == "mem":
            bench_workloads(args, allocs, out, name,
                            [("1000 threads x 1000 objects", ["mem", "1000", "1000"])])
        elif name == "bulk":
            bench_bulk(args, allocs, out)
        elif name == "concurrent":
            bench_concurrent(args, allocs, out)
        elif name == "firstuse":
            bench_firstuse(args, allocs, out)
        elif name == "deferred":
            bench_deferred(args, allocs, out)
        elif name == "rss":
            bench_rss(args, allocs, out)
        elif name == "idle":
            bench_idle(args, allocs, out)
        elif name == "apps":
            programs.update(bench_apps(args, allocs, out))
        elif name == "suite":
            programs.update(bench_suite(args, allocs, out))
        elif name == "bigblocks":
            bench_bigblocks(args, allocs, out)
        elif name == "startup":
            bench_startup(args, allocs, out)
        elif name == "numa":
            bench_numa(args, allocs, out)
        elif name == "thp":
            bench_thp(args, allocs, out)
        else:
            bench_instructions(args, allocs, out)
    if {"apps", "suite"} <= set(names) and programs:
        # The issue-24 targets are over both sets together.
        listed = sorted({n for n, _ in programs})
        print(f"Geometric means over the {len(listed)} programs of apps and suite, / jemalloc "
              "(time / RSS): " + ", ".join(
                  f"{a} {m}" for a, m in zip(allocs, jemalloc_means(programs, listed, allocs))))
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.plot:
        for path in plot(out, args.plot):
            print(f"Chart: {path}")


if __name__ == "__main__":
    main()
