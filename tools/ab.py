#!/usr/bin/env python3
"""tools/ab.py — A/B runs of one command under uslab and other allocators (uslab ab).

Runs CMD under each allocator, one warm-up run each, then RUNS measured runs per
allocator, alternating the order run by run. Each run goes through bench/spawn
(wall, user and sys seconds, peak RSS and minor page faults of the command itself,
from wait4's rusage) and, where `perf stat` can count them on this machine,
hardware counters (cycles, instructions, cache misses). Prints one table: median and
min-max of each measure, and the ratio of uslab's median to the first competitor's.

Every run gets the same standard input: --input FILE, or, when ab's own standard
input is not a terminal, what it holds (read once, replayed to each run), else
/dev/null (a run that read the shared stdin would leave nothing for the next ones).

A run that exits non-zero, or whose standard output differs from the first
allocator's warm-up run, is flagged and left out of the medians, and no ratio is
printed. When the output already differs between runs under one allocator, the
program is taken to print run-dependent output and the comparison is switched off
(with a note). Each allocator's warm-up runs with LD_DEBUG=bindings: where `malloc`
is not bound to that allocator in every object of the run (a static binary, a
program with its own allocator), the table says so and gives no ratio against it.
A program that brings its own allocator also gets a warning up front.

usage: ab.py --spawn PATH --lib ALLOC=PATH... [-n RUNS] [--input FILE] [--json FILE] -- CMD...
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

# The measuring code is bench's (bench/launch.py), shared with uslab bench.
# bench/launch.py: beside this file once installed, in bench/ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from launch import bundled_allocator, malloc_bindings, perf_events, run_once, served  # noqa: E402


def main():
    ap = argparse.ArgumentParser(prog="uslab ab")
    ap.add_argument("--spawn", required=True, help="the bench/spawn launcher")
    ap.add_argument("--lib", action="append", required=True, help="NAME=PATH ('' for glibc)")
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--input", help="the standard input of every run")
    ap.add_argument("--json")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        sys.exit("usage: uslab ab [-n RUNS] [--vs ALLOCATOR]... [--json FILE] -- CMD...")
    allocs = dict(spec.split("=", 1) for spec in args.lib)
    names = list(allocs)
    why = bundled_allocator(cmd[0])
    if why:
        print(f"uslab ab: warning: {why}; the comparison may not measure what it seems",
              file=sys.stderr)
    events = perf_events()
    runs = {a: [] for a in names}
    flagged = []
    compare = True
    not_served = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.input:
            stdin_path = args.input
        elif not sys.stdin.isatty():
            stdin_path = os.path.join(tmp, "stdin")
            with open(stdin_path, "wb") as f:
                shutil.copyfileobj(sys.stdin.buffer, f)
        else:
            stdin_path = os.devnull
        reference = {}
        for a in names:  # warm-up, with the dynamic linker's bindings
            print(f"uslab ab: warm-up: {a}", file=sys.stderr)
            ld = tempfile.mkdtemp(dir=tmp)
            _, status, digest = run_once(args.spawn, cmd, allocs[a], events, tmp, stdin_path, ld)
            reference[a] = digest
            why = served(allocs[a], malloc_bindings(ld))
            if why:
                not_served[a] = why
        ref = reference[names[0]]
        total = args.n * len(names)
        done = 0
        for i in range(args.n):
            for a in (names if i % 2 == 0 else names[::-1]):
                done += 1
                print(f"uslab ab: [{done}/{total}] {a}", file=sys.stderr)
                run, status, digest = run_once(args.spawn, cmd, allocs[a], events, tmp, stdin_path)
                run.update(allocator=a, round=i, status=status)
                if compare and a == names[0] and digest != ref:
                    compare = False  # one allocator, two outputs: run-dependent output
                problem = None
                if status != 0:
                    problem = f"exit status {status}"
                elif compare and digest != ref and a != names[0]:
                    problem = "output differs from the first allocator's"
                if problem:
                    run["flag"] = problem
                    flagged.append(run)
                else:
                    runs[a].append(run)
    measures = ["wall_s", "user_s", "sys_s", "peak_rss_mib", "minor_faults"] + events
    peer = names[1] if len(names) > 1 else None
    # Ratios only between runs that measured what they seem to: the same output, and
    # each allocator serving the program's malloc.
    differ = any(r["flag"].startswith("output differs") for r in flagged)
    ratios = peer and not differ and names[0] not in not_served and peer not in not_served
    print(f"Command: {' '.join(cmd)}\nRuns: {args.n} per allocator after one warm-up, "
          f"alternating\n")
    print("| measure | " + " | ".join(f"{a} median (min-max)" for a in names) +
          (f" | {names[0]}/{peer} |" if peer else " |"))
    print("|" + "---|" * (1 + len(names) + (1 if peer else 0)))
    for m in measures:
        cells, med = [], {}
        for a in names:
            v = [r[m] for r in runs[a] if m in r]
            if not v:
                cells.append("—")
                continue
            med[a] = statistics.median(v)
            fmt = "{:.3f}" if m.endswith("_s") else "{:.1f}" if m == "peak_rss_mib" else "{:.0f}"
            cells.append(f"{fmt.format(med[a])} ({fmt.format(min(v))}-{fmt.format(max(v))})")
        ratio = ""
        if peer:
            ratio = f" | {med[names[0]] / med[peer]:.2f}" if ratios and med.get(peer) else " | —"
        print(f"| {m} | " + " | ".join(cells) + ratio + " |")
    print()
    if not events:
        print("Note: perf cannot count hardware events on this machine (cycles, "
              "instructions, cache misses left out).")
    if not compare:
        print("Note: the output differs between runs under one allocator; outputs were "
              "not compared.")
    for a, why in not_served.items():
        print(f"Not served: {a} did not serve this run's allocations ({why}); no ratio against it.")
    if differ:
        print("Not compared: runs differ in output (flagged below); no ratios.")
    for r in flagged:
        print(f"Flagged: {r['allocator']} run {r['round'] + 1}: {r['flag']} (left out)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": cmd, "runs": [r for a in names for r in runs[a]] + flagged},
                      f, indent=1)
    return 1 if (flagged and all(not runs[a] for a in names)) or names[0] in not_served else 0


if __name__ == "__main__":
    sys.exit(main())
