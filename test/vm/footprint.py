#!/usr/bin/env python3
"""test/vm/footprint.py — memory footprints in the guest, for uslab and each peer:
peak RSS of /bin/true and python3 -c pass, of 1000 threads holding 1000 objects each,
and of a THREADS-thread server (server_idle) at its peak and once idle after it (IDLE_MS
past decay_ms' default of 10 s, no allocator call meanwhile); uslab's own metadata in
that run (its statistics). Prints a Markdown table; exits 1 when uslab's idle server
keeps more than half of its peak (its memory must come back by itself).

usage: footprint.py BUILD THREADS PEAK_MB IDLE_MS"""
import os
import re
import subprocess
import sys
import tempfile

build, threads, peak_mb, idle_ms = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ma = "/usr/lib/x86_64-linux-gnu"
peers = {"uslab": f"{build}/libuslab.so", "glibc": "", "jemalloc": f"{ma}/libjemalloc.so.2",
         "mimalloc": f"{ma}/libmimalloc.so.2", "tcmalloc": f"{ma}/libtcmalloc_minimal.so.4"}


def run(cmd, lib, extra=None):
    """Runs cmd with lib preloaded through bench/spawn (a small launcher: Linux carries
    the forking process's RSS into the child's ru_maxrss, python's 14 MiB here);
    returns (stdout + stderr, peak RSS KiB)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    sets = ["-e", f"LD_PRELOAD={lib}"] if lib else []
    for k, v in (extra or {}).items():
        sets += ["-e", f"{k}={v}"]
    with tempfile.NamedTemporaryFile("r") as res:
        p = subprocess.run([f"{build}/bench/spawn", res.name] + sets + cmd, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        fields = res.read().split()
    if p.returncode != 0 or len(fields) < 6 or fields[5] != "0":
        print(f"{cmd[0]} under {lib or 'glibc'}: {fields}\n{p.stdout[-2000:]}", flush=True)
    return p.stdout, int(fields[3]) if len(fields) > 3 else -1


rows = {k: {} for k in peers}
for name, lib in peers.items():
    rows[name]["/bin/true"] = run(["/bin/true"], lib)[1]
    rows[name]["python3 -c pass"] = run(["python3", "-c", "pass"], lib)[1]
    rows[name]["1000 threads x 1000 objects"] = run([f"{build}/bench/threads", "mem", "1000", "1000"], lib)[1]
    out, _ = run([f"{build}/test/vm_server_idle", threads, peak_mb, idle_ms], lib,
                 {"USLAB_STATS": "1"} if name == "uslab" else None)
    m = re.search(r"peak_kib (\d+) idle_kib (\d+)", out)
    rows[name][f"{threads} threads, {peak_mb} MB peak: peak"] = int(m.group(1)) if m else -1
    rows[name][f"{threads} threads, {peak_mb} MB peak: idle {int(idle_ms) // 1000} s later"] = int(m.group(2)) if m else -1
    if name == "uslab":
        meta = re.search(r"(\d+) metadata", out)
        rows[name]["uslab metadata at exit"] = int(meta.group(1)) // 1024 if meta else -1

labels = list(rows["uslab"].keys())
print("| KiB | " + " | ".join(peers) + " |")
print("|---" * (len(peers) + 1) + "|")
for label in labels:
    cells = [str(rows[p].get(label, "")) for p in peers]
    print(f"| {label} | " + " | ".join(cells) + " |")
pk = rows["uslab"][labels[3]]
idle = rows["uslab"][labels[4]]
sys.exit(0 if 0 < idle <= pk // 2 else 1)
