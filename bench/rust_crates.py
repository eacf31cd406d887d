"""bench/rust_crates.py — uslab bench rust: Rust workloads (bench/rust/src/main.rs: serde_json,
BTreeMap and HashMap churn, a pipeline of threads over channels, regex) built once per
global allocator crate — uslab (rust/uslab), mimalloc (the mimalloc crate),
tikv-jemallocator, and Rust's default (glibc's malloc) — and run in alternating order
over --rounds rounds: median wall time and peak RSS (wait4's), ratios of uslab to the
best of the two crates, geometric means; then `peak`, the memory a process keeps after
a 600 MB burst while it goes on with light work: RSS 1 s and 12 s after it."""
import os
import statistics
import subprocess
import sys
import tempfile

import launch
from common import geomean

CRATES = ("uslab", "mimalloc", "jemalloc", "system")
LABEL = {"uslab": "uslab", "mimalloc": "mimalloc crate", "jemalloc": "tikv-jemallocator",
         "system": "default (glibc)"}
TIMED = ("json", "maps", "channels", "regex")


def build(args):
    """The program once per crate, in the build folder; {crate: path}."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rust")
    exes = {}
    for c in CRATES:
        target = os.path.join(args.build, "bench-rust", c)
        print(f"  building the Rust workloads with {LABEL[c]}", file=sys.stderr)
        subprocess.run(["cargo", "build", "--release", "--locked", "--quiet", "--features", c,
                        "--target-dir", target], cwd=src, check=True)
        exes[c] = os.path.join(target, "release", "uslab-bench-rust")
    return exes


def run(spawn, tmp, exe, workload):
    """(wall seconds, peak RSS MiB, stdout) of one run, through bench/spawn (whose few
    pages, not this Python's, are what the child's peak RSS starts from)."""
    r, status, _, stdout = launch.run_once(spawn, [exe, workload], None, [], tmp, os.devnull,
                                           keep_stdout=True)
    if status != 0:
        raise RuntimeError(f"{exe} {workload}: exit status {status}")
    return r["wall_s"], r["peak_rss_mib"], stdout.decode()


def bench_rust(args, allocs, out):
    exes = build(args)
    spawn = os.path.join(args.build, "bench", "spawn")
    tmp = tempfile.mkdtemp()
    rounds = args.rounds
    times, rss, sums = {}, {}, {}
    for r in range(rounds):
        order = CRATES if r % 2 == 0 else CRATES[::-1]
        for c in order:
            print(f"  round {r + 1}/{rounds}: {LABEL[c]}", file=sys.stderr)
            for w in TIMED:
                t, m, o = run(spawn, tmp, exes[c], w)
                times.setdefault((w, c), []).append(t)
                rss.setdefault((w, c), []).append(m)
                sums.setdefault(w, set()).add(o.strip())
    print("Command: `tools/uslab bench rust` (bench/rust/src/main.rs, release builds; "
          f"medians of {rounds} alternating runs)\n")
    print("| workload | " + " | ".join(f"{LABEL[c]} s / MiB" for c in CRATES) +
          " | uslab / best crate: time, RSS |")
    print("|" + "---|" * (2 + len(CRATES)))
    med = {k: (statistics.median(times[k]), statistics.median(rss[k])) for k in times}
    ratios_t, ratios_m = [], []
    for w in TIMED:
        cells = [f"{med[(w, c)][0]:.3f} / {med[(w, c)][1]:.1f}" for c in CRATES]
        best_t = min(med[(w, c)][0] for c in ("mimalloc", "jemalloc"))
        best_m = min(med[(w, c)][1] for c in ("mimalloc", "jemalloc"))
        rt, rm = med[(w, "uslab")][0] / best_t, med[(w, "uslab")][1] / best_m
        ratios_t.append(rt)
        ratios_m.append(rm)
        print(f"| {w} | " + " | ".join(cells) + f" | {rt:.2f}, {rm:.2f} |")
    means = []
    for c in CRATES:
        gt = geomean(med[(w, c)][0] for w in TIMED)
        gm = geomean(med[(w, c)][1] for w in TIMED)
        means.append(f"{gt:.3f} / {gm:.1f}")
    print("| geometric mean | " + " | ".join(means) +
          f" | {geomean(ratios_t):.2f}, {geomean(ratios_m):.2f} |")
    print()
    for w in TIMED:
        if len(sums[w]) != 1:
            print(f"Flagged: {w} printed different checksums under different crates")

    peak = {}
    for r in range(max(1, rounds // 2)):
        for c in (CRATES if r % 2 == 0 else CRATES[::-1]):
            print(f"  peak, round {r + 1}: {LABEL[c]}", file=sys.stderr)
            _, m, o = run(spawn, tmp, exes[c], "peak")
            line = next(l for l in o.splitlines() if l.startswith("rss_after_peak_mib"))
            at1, at12 = (float(x) for x in line.split()[1:3])
            peak.setdefault(c, []).append((m, at1, at12))
    print("After a 600 MB burst of small objects, freed, with light work going on "
          f"(`peak`; medians of {max(1, rounds // 2)} runs):\n")
    print("| crate | peak RSS MiB | RSS 1 s after | RSS 12 s after |")
    print("|---|---|---|---|")
    for c in CRATES:
        rows = peak[c]
        print(f"| {LABEL[c]} | " + " | ".join(
            f"{statistics.median(x[i] for x in rows):.1f}" for i in range(3)) + " |")
    print()
    out["rust"] = {f"{w}/{c}": {"wall_s": times[(w, c)], "peak_rss_mib": rss[(w, c)]}
                   for (w, c) in times}
    out["rust_peak"] = peak
