#!/usr/bin/env python3
"""bench/run.py — runs uslab's benchmark programs under each allocator and prints
Markdown tables (uslab bench). Allocators: uslab, jemalloc, glibc, plus mimalloc and
tcmalloc when their Debian packages are installed. Each allocator runs the same
program in its own process, in alternating order over --rounds rounds; the table
shows the median over rounds of each run's median (and the minimum), in TSC cycles
per operation, with ratios of uslab to each competitor.

usage: run.py --build DIR [micro] [--rounds N] [--json FILE] [--sizes S,S,...]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

MULTIARCH = "x86_64-linux-gnu"
PEERS = {
    "jemalloc": f"/usr/lib/{MULTIARCH}/libjemalloc.so.2",
    "glibc": "",
    "mimalloc": f"/usr/lib/{MULTIARCH}/libmimalloc.so.2",
    "tcmalloc": f"/usr/lib/{MULTIARCH}/libtcmalloc_minimal.so.4",
}


def run_micro(exe, lib, n, reps, sizes):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if lib:
        env["LD_PRELOAD"] = lib
    out = subprocess.run([exe, str(n), str(reps)] + [str(s) for s in sizes], env=env,
                         check=True, capture_output=True, text=True).stdout
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("names", nargs="*", default=["micro"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--sizes", default="8,16,32,64,128,256,512,1024,2048,4096,8192,16384")
    ap.add_argument("--json")
    args = ap.parse_args()
    for name in args.names:
        if name != "micro":
            sys.exit(f"uslab bench: unknown benchmark '{name}' (available: micro)")

    allocs = {"uslab": os.path.join(args.build, "libuslab.so")}
    for name, lib in PEERS.items():
        if not lib or os.path.exists(lib):
            allocs[name] = lib
    exe = os.path.join(args.build, "bench", "micro")
    sizes = [int(s) for s in args.sizes.split(",")]

    # results[alloc][(test, size)] = list of per-run (min, median)
    results = {a: {} for a in allocs}
    order = list(allocs)
    for r in range(args.rounds):
        for a in (order if r % 2 == 0 else order[::-1]):
            print(f"  round {r + 1}/{args.rounds}: {a}", file=sys.stderr)
            for row in run_micro(exe, allocs[a], args.n, args.reps, sizes):
                results[a].setdefault((row["test"], row["size"]), []).append(
                    (row["cycles_min"], row["cycles_median"], row["ns_median"]))

    peers = [a for a in allocs if a != "uslab"]
    print(f"Machine: {machine()}")
    print(f"Command: tools/uslab bench micro --rounds {args.rounds} (N = {args.n}, "
          f"{args.reps} repetitions per run)\n")
    for test in ("N x alloc", "N x free", "alloc/free pair"):
        print(f"### {test} — cycles per operation, median (min)\n")
        head = "| size | " + " | ".join(allocs) + " | " + " | ".join(f"uslab/{p}" for p in peers) + " |"
        print(head)
        print("|" + "---|" * (1 + len(allocs) + len(peers)))
        for size in sizes:
            med = {}
            cells = []
            for a in allocs:
                runs = results[a][(test, size)]
                med[a] = statistics.median(m for _, m, _ in runs)
                cells.append(f"{med[a]:.1f} ({min(x for x, _, _ in runs):.1f})")
            ratios = [f"{med['uslab'] / med[p]:.2f}" for p in peers]
            print(f"| {size} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({a: {f"{t}/{s}": v for (t, s), v in res.items()} for a, res in results.items()},
                      f, indent=1)


if __name__ == "__main__":
    main()
