"""bench/programs.py — whole programs under every allocator, for uslab bench: apps
(real programs from Debian's packages, defined in bench/apps.py) and suite
(mimalloc-bench's programs, bench/suite.py). Each program runs through bench/spawn
(bench/launch.py), its output checked against a reference run; the table gives wall
time and peak RSS, the ratios to jemalloc and to the best peer, and geometric means."""
import os
import shutil
import statistics
import sys
import tempfile

import launch
from common import alternate, geomean, peers_of, preload_env

def compare_programs(args, allocs, out, key, programs, run, command):
    """Runs every program (objects with .name, .compare, .check) under every allocator,
    alternating: run(program, alloc, lib, bindings_dir) -> (measures with wall_s and
    peak_rss_mib, exit status, stdout digest, stdout, why not served or None). Warm-ups
    first: the reference output (glibc's, or the first allocator's that served the
    program) and which allocators served it. Prints the table of medians, the ratios to
    jemalloc and to the best peer (common.peers_of), the geometric means; returns
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
    peers = peers_of(allocs)
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
    return launch.served(lib, launch.malloc_bindings(bindings)) if bindings else None


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
        r, status, digest, stdout = launch.run_once(spawn, app.cmd, lib, [], work, stdin, bindings,
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
        r, status, digest, stdout = launch.run_once(spawn, suite.command(p, checkout, bins, cpus),
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


# The allocator configurations of `bench security` beside every allocator's defaults:
# uslab's guarded sampling at its densest (every allocation guarded while slots
# last), with large objects guarded too, and its debugging options.
SECURITY_CONFIGS = {
    "uslab guard_sample=1": "guard_sample=1",
    "uslab guard_sample=1,guard=true": "guard_sample=1,guard=true",
    "uslab poison=true,guard=true": "poison=true,guard=true",
}
SECURITY_SIZES = ("small", "medium", "large")  # 8 B, 4 KiB, 256 KiB (its CMakeLists)


def security_dir(directory):
    """The folder of mimalloc-bench's built security programs under directory, or None."""
    for d in (os.path.join(directory, "out", "bench", "security"),
              os.path.join(directory, "security"), directory):
        if os.path.isfile(os.path.join(d, "double_free_small")):
            return d
    return None


def bench_security(args, allocs, out):
    """mimalloc-bench's security programs (bench/security: overflows, underflows, use
    after free, double and invalid frees, reuse), each under every allocator and
    uslab's configurations above, --rounds times (a guarded object lies at the end or
    the start of its pages at random, so an error that only one side catches is caught
    about half of the time). A run catches the error when the program does not get to
    print NOT_CAUGHT (bench.sh's rule: it aborted, crashed, or exited first)."""
    import subprocess
    d = security_dir(os.path.abspath(args.suite)) if args.suite else None
    if not d:
        print("Skipped: point --suite at a checkout of github.com/daanx/mimalloc-bench whose "
              "security programs are built (out/bench/security)\n")
        return
    runs = dict(allocs)
    for name in SECURITY_CONFIGS:
        runs[name] = allocs["uslab"]
    rows = {}  # program -> {size: {alloc: runs that caught}}
    for b in sorted(os.listdir(d)):
        path = os.path.join(d, b)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        base, _, size = b.rpartition("_")
        if size not in SECURITY_SIZES:
            base, size = b, ""
        rows.setdefault(base, {}).setdefault(size, {})

    def one(a, lib):
        env = preload_env(lib)
        env.pop("USLAB_CONF", None)
        if a in SECURITY_CONFIGS:
            env["USLAB_CONF"] = SECURITY_CONFIGS[a]
        for base, sizes in rows.items():
            for size, caught in sizes.items():
                exe = os.path.join(d, f"{base}_{size}" if size else base)
                try:
                    r = subprocess.run([exe], cwd=d, env=env, capture_output=True, timeout=5)
                    missed = b"NOT_CAUGHT" in r.stdout
                except subprocess.TimeoutExpired:
                    missed = False
                caught[a] = caught.get(a, 0) + (not missed)

    alternate(runs, args.rounds, one)
    names = list(runs)
    print(f"Command: tools/uslab bench security --suite DIR --rounds {args.rounds} "
          "(mimalloc-bench's bench/security programs, built with their CMakeLists: each C "
          "program at 8 B / 4 KiB / 256 KiB, the C++ ones at 4 KiB; a cell per size: + caught "
          "in every round, - in none, else in how many; the last row counts programs caught, "
          "a program caught in k of n rounds counting k/n)\n")
    print("| program | " + " | ".join(names) + " |")
    print("|" + "---|" * (len(names) + 1))
    total = {a: 0.0 for a in names}
    count = 0
    for base, sizes in rows.items():
        cells = []
        for a in names:
            marks = []
            for size in [s for s in SECURITY_SIZES + ("",) if s in sizes]:
                k = sizes[size].get(a, 0)
                marks.append("+" if k == args.rounds else "-" if k == 0 else f"{k}/{args.rounds}")
                total[a] += k / args.rounds
            cells.append(" ".join(marks))
        count += len(sizes)
        print(f"| {base} | " + " | ".join(cells) + " |")
    print(f"| caught, of {count} | " + " | ".join(f"{total[a]:.1f}" for a in names) + " |\n")
    out["security"] = {f"{a}/{base}/{s}": k for base, sizes in rows.items()
                       for s, c in sizes.items() for a, k in c.items()}
