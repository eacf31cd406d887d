"""bench/threaded.py — the multi-threaded families of uslab bench, on bench/threads:
threads (cross-thread producer/consumer and larson-style throughput by thread count),
falseshare, mem (1000 live threads), numa (a producer/consumer pair across two NUMA
nodes) and deferred (the deferred-free API against liburcu). Each
bench_NAME(args, allocs, out) prints its Markdown table and stores its raw results in
out[NAME]."""
import os
import statistics

from common import alternate, run_json

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
            cells = [f"{med[a]['ops_per_sec'] / 1e6:.1f} M/s, "
                     f"{med[a]['peak_rss_kib'] / 1024:.1f} MiB" for a in allocs]
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


def thread_counts():
    """The thread counts the threads and falseshare tables run: 2, 4, 8, 16 and twice
    the CPUs, up to twice the CPUs."""
    cpus = os.cpu_count() or 1
    return cpus, sorted({2, 4, 8, 16, 2 * cpus} & set(range(2, 2 * cpus + 1)))


def bench_threads(args, allocs, out):
    cpus, counts = thread_counts()
    cases = []
    for t in counts:
        if t <= cpus:  # spinning producers and consumers need a CPU each
            cases.append((f"xthread {t} threads", ["xthread", str(t), "1"]))
        cases.append((f"larson {t} threads", ["larson", str(t), "1"]))
    bench_workloads(args, allocs, out, "threads", cases)


def bench_falseshare(args, allocs, out):
    cpus, counts = thread_counts()
    cases = [(f"falseshare {t} threads", ["falseshare", str(t), "2000000"])
             for t in counts if t <= cpus] or [("falseshare 2 threads",
                                                ["falseshare", "2", "2000000"])]
    bench_workloads(args, allocs, out, "falseshare", cases)


def bench_mem(args, allocs, out):
    bench_workloads(args, allocs, out, "mem",
                    [("1000 threads x 1000 objects", ["mem", "1000", "1000"])])
