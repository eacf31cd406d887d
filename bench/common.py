"""bench/common.py — what every benchmark family shares: the allocators compared
(uslab, each peer whose Debian package is installed, and any named by --vs), running
a program under one of them (LD_PRELOAD, with the environment the allocator needs)
and reading its JSON lines, alternating allocators over rounds, instruction counts
under callgrind, the machine's description, geometric means."""
import json
import math
import os
import platform
import subprocess
import sys
import tempfile

from launch import allocator_env

MULTIARCH = "x86_64-linux-gnu"


PEERS = {
    "jemalloc": f"/usr/lib/{MULTIARCH}/libjemalloc.so.2",
    "glibc": "",
    "mimalloc": f"/usr/lib/{MULTIARCH}/libmimalloc.so.2",
    "tcmalloc": f"/usr/lib/{MULTIARCH}/libtcmalloc_minimal.so.4",
}


def preload_env(lib, extra_env=None):
    """This process's environment with lib preloaded ("" = none: glibc), the
    environment the allocator needs (launch.allocator_env) and extra_env."""
    env = dict(os.environ)
    env.update(allocator_env(lib))
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


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def callgrind_instructions(cmd, lib, functions, extra_env=None):
    """Instructions executed inside `functions` (and what they call) while cmd runs
    with lib preloaded, counted by valgrind's callgrind (which has no rseq: uslab runs
    its per-thread fallback there)."""
    with tempfile.TemporaryDirectory() as tmp:
        cg = os.path.join(tmp, "cg.out")
        toggles = [f"--toggle-collect={f}" for f in functions]
        subprocess.run(["valgrind", "-q", "--tool=callgrind", f"--callgrind-out-file={cg}"] +
                       toggles + cmd, env=preload_env(lib, extra_env), check=True,
                       capture_output=True)
        with open(cg) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("totals:"))


def allocators(build, extra=()):
    """{name: library to preload ("" = glibc)}: uslab from build, the peers installed
    here, then each NAME=PATH of extra (a peer built elsewhere; a name of the list
    above takes that library instead)."""
    allocs = {"uslab": os.path.join(build, "libuslab.so")}
    for name, lib in PEERS.items():
        if not lib or os.path.exists(lib):
            allocs[name] = lib
    for spec in extra:
        name, sep, lib = spec.partition("=")
        if not sep or not name or name == "uslab":
            sys.exit(f"uslab bench: --vs takes NAME=PATH (a name other than uslab), not '{spec}'")
        if not os.path.isfile(lib):
            sys.exit(f"uslab bench: --vs {name}: no library at '{lib}'")
        allocs[name] = os.path.abspath(lib)
    return allocs


def peers_of(allocs):
    """The allocators a ratio's "best peer" is taken from: all but uslab and glibc."""
    return [a for a in allocs if a not in ("uslab", "glibc")]
