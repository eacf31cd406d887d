"""bench/launch.py — one run of a command under an allocator, measured: through the
bench/spawn launcher (wall, user and sys seconds, peak RSS and minor page faults of
the command itself, from wait4's rusage), with perf's hardware counters where this
machine has them, and the dynamic linker's bindings of `malloc` (LD_DEBUG=bindings),
which say whether the preloaded allocator served the program at all. Used by uslab ab
(tools/ab.py) and by the apps and suite benchmarks (bench/programs.py)."""
import functools
import hashlib
import os
import re
import shutil
import subprocess

# Allocators a program may bring itself (then a preloaded one does not serve it).
ALLOCATOR_LIBS = ("libjemalloc", "libtcmalloc", "libmimalloc", "libsnmalloc", "libhoard")
HW_EVENTS = ("cycles", "instructions", "cache-misses")


def bundled_allocator(cmd0):
    """A reason to warn when the program links or defines its own malloc, else None."""
    exe = shutil.which(cmd0)
    if not exe:
        return None
    try:
        ldd = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
        for lib in ALLOCATOR_LIBS:
            if lib in ldd:
                return f"{cmd0} links {lib}"
        nm = subprocess.run(["nm", "-D", "--defined-only", exe], capture_output=True,
                            text=True).stdout
        for line in nm.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TtWi" and parts[2] in ("malloc", "free",
                                                                        "je_malloc"):
                return f"{cmd0} defines {parts[2]} itself"
    except OSError:
        return None
    return None


@functools.lru_cache(maxsize=None)
def registers_rseq(lib):
    """Whether the library registers rseq itself (defines the ABI's __rseq_abi, as
    Google's tcmalloc does): glibc 2.35+ registers first, and the library's per-CPU
    mode then stays off without telling."""
    if not lib:
        return False
    r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    return any(line.split()[-1:] == ["__rseq_abi"] for line in r.stdout.splitlines())


def allocator_env(lib):
    """The environment an allocator needs to run as it was built to ({} for most): one
    that registers rseq itself gets glibc's registration off (glibc.pthread.rseq=0)."""
    if not registers_rseq(lib):
        return {}
    tunables = os.environ.get("GLIBC_TUNABLES")
    return {"GLIBC_TUNABLES": (tunables + ":" if tunables else "") + "glibc.pthread.rseq=0"}


def perf_events():
    """The hardware events perf stat can count here (empty when none)."""
    if not shutil.which("perf"):
        return []
    r = subprocess.run(["perf", "stat", "-x,", "-e", ",".join(HW_EVENTS), "true"],
                       capture_output=True, text=True)
    ok = []
    for line in r.stderr.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2] in HW_EVENTS and not f[0].startswith("<"):
            ok.append(f[2])
    return ok


BINDING = re.compile(r"binding file (\S*) \[\d+\] to (\S+) \[\d+\]: normal symbol `malloc'")


def malloc_bindings(directory):
    """The objects `malloc` was bound to in the LD_DEBUG=bindings files of a run."""
    bound = set()
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), errors="replace") as f:
            for line in f:
                m = BINDING.search(line)
                if m:
                    bound.add(os.path.basename(m.group(2)))
    return bound


def served(lib, bound):
    """None when the allocator (lib; "" for glibc) served every malloc of the run, else why not."""
    expected = os.path.basename(lib) if lib else "libc.so.6"
    if not bound:
        return "no object of the run binds malloc (a static binary, or no call at all)"
    others = sorted(bound - {expected})
    if others:
        return f"malloc is bound to {', '.join(others)}" + (
            f" as well as {expected}" if expected in bound else f", not {expected}")
    return None


def run_once(spawn, cmd, lib, events, tmp, stdin_path, bindings_dir=None, cwd=None,
             command_env=None, keep_stdout=False):
    """One run (in cwd); returns a dict of measures, the exit status and a hash of stdout
    (the stdout itself with keep_stdout). With bindings_dir, LD_DEBUG=bindings writes
    the dynamic linker's bindings there; the allocator's own (allocator_env) and
    command_env are added to the command's environment."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # The preload (and the bindings' log) for the command alone, through spawn.
    child = [f"{k}={v}" for k, v in dict(allocator_env(lib), **(command_env or {})).items()]
    child += [f"LD_PRELOAD={lib}"] if lib else []
    if bindings_dir:
        child += ["LD_DEBUG=bindings", f"LD_DEBUG_OUTPUT={os.path.join(bindings_dir, 'ld')}"]
    tfile = os.path.join(tmp, "spawn.txt")
    pfile = os.path.join(tmp, "perf.txt")
    argv = [spawn, tfile] + [x for kv in child for x in ("-e", kv)] + cmd
    if events:
        argv = ["perf", "stat", "-x,", "-o", pfile, "-e", ",".join(events), "--"] + argv
    with open(stdin_path, "rb") as stdin:
        proc = subprocess.run(argv, env=env, stdin=stdin, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, cwd=cwd)
    with open(tfile) as f:
        wall, user, sys_, rss, minor, status = f.read().split()[:6]
    run = {"wall_s": int(wall) / 1e6, "user_s": int(user) / 1e6, "sys_s": int(sys_) / 1e6,
           "peak_rss_mib": int(rss) / 1024, "minor_faults": int(minor)}
    if events and os.path.exists(pfile):
        with open(pfile) as f:
            for line in f:
                p = line.split(",")
                if len(p) > 2 and p[2] in events and p[0].replace(".", "").isdigit():
                    run[p[2]] = float(p[0])
    digest = hashlib.sha256(proc.stdout).hexdigest()
    return (run, int(status), digest, proc.stdout) if keep_stdout else (run, int(status), digest)
