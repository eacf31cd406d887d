#!/usr/bin/env python3
"""test/vm/footprint.py — memory footprints in the guest, for uslab and each peer:
peak RSS of /bin/true and python3 -c pass, of 1000 threads holding 1000 objects each,
and of a THREADS-thread server (server_idle) at its peak and once idle after it (IDLE_MS
past decay_ms' default of 10 s, no allocator call meanwhile); uslab's own metadata in
that run (its statistics). Prints a Markdown table (-1: the run failed or took longer than
FOOTPRINT_RUN_TIMEOUT, 900 s); exits 1 when uslab's idle server keeps more than half
of its peak above its threads' stacks (its memory must come back by itself).

usage: footprint.py BUILD THREADS PEAK_MB IDLE_MS [NAME=PATH[;VAR=VALUE...]...]
  each NAME=PATH one more allocator (a peer built from its sources), with the
  environment it needs (GLIBC_TUNABLES=glibc.pthread.rseq=0 for one that registers
  rseq itself)"""
import os
import re
import subprocess
import sys
import tempfile

build, threads, peak_mb, idle_ms = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ma = f"/usr/lib/{os.uname().machine}-linux-gnu"  # x86_64 or aarch64
peers = {"uslab": f"{build}/libuslab.so", "glibc": "", "jemalloc": f"{ma}/libjemalloc.so.2",
         "mimalloc": f"{ma}/libmimalloc.so.2", "tcmalloc": f"{ma}/libtcmalloc_minimal.so.4"}
peer_env = {}
for arg in sys.argv[5:]:
    name, _, rest = arg.partition("=")
    path, *sets = rest.split(";")
    peers[name] = path
    peer_env[name] = dict(s.split("=", 1) for s in sets)


def run(cmd, name, extra=None):
    """Runs cmd with allocator NAME preloaded through bench/spawn (a small launcher:
    Linux carries the forking process's RSS into the child's ru_maxrss, python's 14 MiB);
    returns (stdout + stderr, peak RSS KiB); -1 for a run that failed or ran past
    RUN_TIMEOUT (an emulated 64-CPU guest can spend hours on 1000 threads)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    lib = peers[name]
    sets = ["-e", f"LD_PRELOAD={lib}"] if lib else []
    for k, v in {**peer_env.get(name, {}), **(extra or {})}.items():
        sets += ["-e", f"{k}={v}"]
    with tempfile.NamedTemporaryFile("r") as res:
        try:
            p = subprocess.run([f"{build}/bench/spawn", res.name] + sets + cmd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"{cmd[0]} under {name}: not done in {RUN_TIMEOUT} s", flush=True)
            return "", -1
        fields = res.read().split()
    if p.returncode != 0 or len(fields) < 6 or fields[5] != "0":
        print(f"{cmd[0]} under {name}: {fields}\n{p.stdout[-2000:]}", flush=True)
        return p.stdout, -1
    return p.stdout, int(fields[3])


RUN_TIMEOUT = int(os.environ.get("FOOTPRINT_RUN_TIMEOUT", "900"))
rows = {k: {} for k in peers}
server = f"{threads} threads, {peak_mb} MB peak"
idle_label = f"{server}: idle {int(idle_ms) // 1000} s later"
# Row by row, every allocator in each, the slowest row (1000 threads) last: what
# finishes is in the table even when that row does not.
for name in peers:
    rows[name]["/bin/true"] = run(["/bin/true"], name)[1]
    rows[name]["python3 -c pass"] = run(["python3", "-c", "pass"], name)[1]
for name in peers:
    out, _ = run([f"{build}/test/vm_server_idle", threads, peak_mb, idle_ms], name,
                 {"USLAB_STATS": "1"} if name == "uslab" else None)
    m = re.search(r"peak_kib (\d+) idle_kib (\d+) base_kib (\d+)", out)
    rows[name][f"{server}: peak"] = int(m.group(1)) if m else -1
    rows[name][idle_label] = int(m.group(2)) if m else -1
    if name == "uslab":
        server_base = int(m.group(3)) if m else -1
    if name == "uslab":
        meta = re.search(r"(\d+) metadata", out)
        rows[name]["uslab metadata at exit"] = int(meta.group(1)) // 1024 if meta else -1
    print(f"{name}: {rows[name]}", flush=True)
for name in peers:
    rows[name]["1000 threads x 1000 objects"] = run([f"{build}/bench/threads", "mem", "1000", "1000"], name)[1]

labels = list(rows["uslab"].keys())
print("| KiB | " + " | ".join(peers) + " |")
print("|---" * (len(peers) + 1) + "|")
for label in labels:
    cells = [str(rows[p].get(label, "")) for p in peers]
    print(f"| {label} | " + " | ".join(cells) + " |")
# Above the threads' own stacks (base: many threads' stacks under THP "always" can be
# most of it), what uslab keeps once idle must be at most half of what it held.
pk = rows["uslab"][f"{server}: peak"] - server_base
idle = rows["uslab"][idle_label] - server_base
print(f"uslab's idle server above its threads' stacks: {idle} KiB of {pk} KiB at the peak")
sys.exit(0 if server_base >= 0 and 0 < pk and idle <= pk // 2 else 1)
