"""bench/memory.py — the memory families of uslab bench: rss (memory return over
time after a peak and after fragmentation), idle (what a program that goes quiet
after a 1 GB peak keeps, and redis-server after FLUSHALL ASYNC), bigblocks (the
page-fault storm of blocks of megabytes), thp (a random walk over a 256 MiB heap,
with and without transparent huge pages) and drift (object sizes that drift up and
back, only the first 64 bytes of each written, or all: the resident memory huge pages
cost). Each bench_NAME(args, allocs, out) prints
its Markdown table and stores its raw results in out[NAME]."""
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from common import alternate, preload_env, run_json

# bench/rss's workloads: frag-move moves to the other CPU before phase 2, as the
# scheduler moves a program (per-CPU heaps must not strand what one CPU freed).
RSS_WORKLOADS = {"peak": ["peak"], "frag": ["frag"], "frag-move": ["frag", "move"]}


def print_table(columns, rows):
    """A Markdown table of rows (lists of cells), and a blank line."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def mib(kib):
    return f"{kib / 1024:.0f} MiB"


def medians(results, keys):
    """{allocator: {key: median over its runs}} of {allocator: [JSON rows]}."""
    return {a: {k: statistics.median(r[k] for r in runs) for k in keys}
            for a, runs in results.items()}


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
    med = medians(results, ("wall_s", "user_s", "sys_s", "minflt"))
    g = med.get("glibc")
    for a, m in med.items():
        ratios = (f"{m['minflt'] / g['minflt']:.2f} | {m['wall_s'] / g['wall_s']:.2f}" if g
                  else "— | —")
        print(f"| {a} | {m['wall_s']:.3f} | {m['user_s']:.3f} | {m['sys_s']:.3f} | "
              f"{m['minflt']:.0f} | {ratios} |")
    print()
    out["bigblocks"] = results


def thp_peers(allocs):
    """Every allocator and uslab with thp=false; the system's THP setting in use."""
    peers = dict(allocs)
    peers["uslab thp=false"] = allocs["uslab"]
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        mode = f.read().split("[")[-1].split("]")[0]  # the bracketed one
    return peers, mode


# A decay of 1 s for uslab and jemalloc in the churning heap: its holes reach the age
# at which they are returned several times within the run.
CHURN_DECAY = {"USLAB_CONF": "decay_ms=1000", "MALLOC_CONF": "dirty_decay_ms:1000,muzzy_decay_ms:0"}


def bench_thp(args, allocs, out):
    exe = os.path.join(args.build, "bench", "tlb")
    churn_exe = os.path.join(args.build, "bench", "hugechurn")
    peers, mode = thp_peers(allocs)
    results, churn = {}, {}

    def one(a, lib):
        env = {"USLAB_CONF": "thp=false"} if a == "uslab thp=false" else None
        results.setdefault(a, []).extend(run_json([exe, str(4 << 20), str(20 << 20)], lib, env))
        env = dict(CHURN_DECAY)
        if a == "uslab thp=false":
            env["USLAB_CONF"] += ",thp=false"
        churn.setdefault(a, []).extend(run_json([churn_exe, "8", "256"], lib, env))

    alternate(peers, args.rounds, one)
    print(f"Command: tools/uslab bench thp --rounds {args.rounds} (4M objects of 64 bytes, 256 "
          f"MiB, linked in a random cycle and followed 20M times; THP setting: {mode})\n")
    med = medians(results, ("ns_per_step", "setup_s", "peak_rss_kib", "anon_huge_kib"))
    jem = med["jemalloc"]
    print_table(["allocator", "ns per step", "setup s", "peak RSS", "AnonHugePages", "vs jemalloc"],
                [[a, f"{m['ns_per_step']:.1f}", f"{m['setup_s']:.2f}", mib(m["peak_rss_kib"]),
                  mib(m["anon_huge_kib"]), f"{m['ns_per_step'] / jem['ns_per_step']:.2f}× time"]
                 for a, m in med.items()])
    print("A dense heap that churns (`bench/hugechurn 8 256`: 256 MiB of 16-64 KiB objects, "
          "every byte written, 1% replaced every 10 ms for 8 s, random reads between; decay "
          "1 s for uslab and jemalloc; the reads timed over the last 2 s; at the end):\n")
    med = medians(churn, ("ns_per_read", "anon_huge_kib", "rss_kib", "peak_rss_kib"))
    jem = med["jemalloc"]
    print_table(["allocator", "ns per read", "AnonHugePages", "RSS", "peak RSS", "vs jemalloc"],
                [[a, f"{m['ns_per_read']:.1f}", mib(m["anon_huge_kib"]), mib(m["rss_kib"]),
                  mib(m["peak_rss_kib"]), f"{m['ns_per_read'] / jem['ns_per_read']:.2f}× time, "
                  f"{m['peak_rss_kib'] / jem['peak_rss_kib']:.2f}× peak"]
                 for a, m in med.items()])
    out["thp"] = {"walk": results, "churn": churn}


def bench_drift(args, allocs, out):
    exe = os.path.join(args.build, "bench", "drift")
    peers, mode = thp_peers(allocs)
    results = {}  # (allocator, touch) -> [rows of one run]

    def one(a, lib):
        env = {"USLAB_CONF": "thp=false"} if a == "uslab thp=false" else None
        for touch in ("sparse", "full"):
            results.setdefault((a, touch), []).append(run_json([exe, touch], lib, env))

    alternate(peers, args.rounds, one)
    print(f"Command: tools/uslab bench drift --rounds {args.rounds} (60,000 live objects, one "
          "replaced at random 2 million times per phase: 16-256 B, 256 B-2 KiB, 2-8 KiB, then "
          "16-256 B again, then 12 s without a call; sparse writes the first 64 bytes of each "
          f"object, full every byte; THP setting: {mode}; medians over rounds, MiB)\n")
    print("| touch | allocator | peak RSS | of it huge pages at the 2-8 KiB phase | after 12 s "
          "idle | peak / uslab thp=false | peak / lowest peer |")
    print("|---|---|---|---|---|---|---|")
    for touch in ("sparse", "full"):
        med = {}
        for a in peers:
            runs = results[(a, touch)]
            big = [next(r for r in rows if r["phase"] == "2K-8K") for rows in runs]
            idle = [rows[-1] for rows in runs]
            med[a] = (statistics.median(r["peak_rss_kib"] for r in idle) / 1024,
                      statistics.median(r["anon_huge_kib"] for r in big) / 1024,
                      statistics.median(r["rss_kib"] for r in idle) / 1024)
        lowest = min(med[a][0] for a in peers if not a.startswith("uslab"))
        for a, (peak, huge, idle) in med.items():
            print(f"| {touch} | {a} | {peak:.0f} | {huge:.0f} | {idle:.0f} | "
                  f"{peak / med['uslab thp=false'][0]:.2f} | {peak / lowest:.2f} |")
    print()
    out["drift"] = {f"{a}/{t}": rows for (a, t), rows in results.items()}
