"""bench/speed.py — the single-thread and per-CPU speed families of uslab bench:
micro (cycles per operation by size), bulk (the bulk API), concurrent (every CPU
allocates then frees at once), requests (a request's time after a pause), firstuse (every CPU's first use of 40 classes),
startup (a preloaded /bin/true and python3), instructions (callgrind) and prof (the
heap profiler's cost). Each bench_NAME(args, allocs, out) prints its Markdown table
and stores its raw results in out[NAME]."""
import os
import shutil
import statistics
import sys

from common import alternate, callgrind_instructions, run_json

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
          f"{args.reps} repetitions per run; N x alloc writes one byte of each object)\n")
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


def bench_requests(args, allocs, out):
    """Median request time after pauses of 1 ms, 30 ms and 1 s (bench/requests.c), every
    allocator with its defaults and uslab with decay_ms=100000 (its caches never
    decaying during the pause: what the decay tick costs), median over rounds."""
    exe = os.path.join(args.build, "bench", "requests")
    runs = dict(allocs)
    runs["uslab decay_ms=100000"] = allocs["uslab"]
    results = {}  # [(alloc, pause)] = [median µs per round]

    def one(a, lib):
        env = {"USLAB_CONF": "decay_ms=100000"} if a.startswith("uslab decay") else None
        for row in run_json([exe], lib, env):
            results.setdefault((a, row["pause_ms"]), []).append(row["median_us"])

    alternate(runs, args.rounds, one)
    peers = [a for a in allocs if a != "uslab"]
    pauses = sorted({p for _, p in results})
    print(f"Command: tools/uslab bench requests --rounds {args.rounds} (a working set of 20000 "
          "objects held; after each pause a request of 2000 allocations of 16 B - 2 KiB, every "
          "byte written, then freed; median request time in µs, median over rounds)\n")
    print("| pause | " + " | ".join(runs) + " | uslab / fastest peer |")
    print("|" + "---|" * (len(runs) + 2))
    for pause in pauses:
        med = {a: statistics.median(results[(a, pause)]) for a in runs}
        best = min(peers, key=lambda a: med[a])
        cells = " | ".join(f"{med[a]:.0f}" for a in runs)
        print(f"| {pause} ms | {cells} | {med['uslab'] / med[best]:.2f} ({best}) |")
    print()
    out["requests"] = {f"{a}/{p}": v for (a, p), v in results.items()}


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
        total = callgrind_instructions([exe, "pairs", str(pairs), "64"], lib,
                                       ("malloc", "free", "__libc_malloc", "__libc_free"))
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
        configs["jemalloc prof"] = (allocs["jemalloc"],
                                    {"MALLOC_CONF": "prof:true,prof_final:false"})
    sizes = [16, 64, 256, 1024, 4096, 65536]
    cases = [("larson 2 threads", ["larson", "2", "1"]),
             ("xthread 2 threads", ["xthread", "2", "1"])]
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
        print(f"| malloc+free {size} B, cycles | " + " | ".join(f"{med[c]:.1f}" for c in names) +
              " | " +
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
                counts[c] = callgrind_instructions([micro, "pairs", "1000000", str(size)], lib,
                                                   ("malloc", "free"), env) / 1e6
                result[f"instructions {c} {size}"] = counts[c]
            print(f"| {size} B | {counts['uslab']:.2f} | {counts['uslab prof']:.2f} | "
                  f"{counts['uslab prof'] / counts['uslab']:.3f} |")
        print()
    out["prof"] = result
