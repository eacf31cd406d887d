"""bench/suite.py — the standard allocator benchmarks (mimalloc-bench's programs: larson,
rptest, sh6bench, sh8bench, xmalloc-test, mstress, mleak, cache-scratch/thrash,
glibc-simple/thread, alloc-test, malloc-large, cfrac, espresso, barnes) for
`uslab bench suite --suite DIR`.

The project does not carry their code (several licences, some without one). DIR is a
checkout of github.com/daanx/mimalloc-bench that the user built: `cmake -S bench -B
out/bench && cmake --build out/bench` (or its own `./build-bench-env.sh bench`), so
the binaries are in DIR/out/bench and the inputs in DIR/bench. Each program runs with
the arguments mimalloc-bench's bench.sh gives it, scaled to this machine's CPU count,
through bench/launch.py's run_once (the same launcher and peak-RSS measure as `uslab ab`).

Time is the program's wall time, except where it reports its own throughput over a
fixed time (larson, rptest, xmalloc-test, glibc-thread): there it is the relative
time bench.sh derives from that throughput, so lower is better everywhere. Programs
whose output is deterministic are checked against the run under glibc.
"""
import os
import re
from dataclasses import dataclass
from typing import Callable, Optional


def _rate(pattern, scale):
    """A parser of a throughput line: the relative time scale / rate, as bench.sh."""
    def parse(stdout):
        m = re.search(pattern, stdout)
        return scale / float(m.group(1)) if m and float(m.group(1)) > 0 else None
    return parse


def _seconds(pattern):
    def parse(stdout):
        m = re.search(pattern, stdout)
        return float(m.group(1)) if m else None
    return parse


@dataclass
class Program:
    name: str
    binary: str
    args: Callable[[int], list]          # CPU count -> arguments
    stdin: Optional[str] = None          # input file, relative to the checkout
    time: Optional[Callable[[str], Optional[float]]] = None  # stdout -> seconds
    compare: bool = False                # output deterministic: compare with glibc's

    def check(self, stdout):
        """A program timed by its own line must have printed it."""
        return self.time is None or self.time(stdout.decode(errors="replace")) is not None


PROGRAMS = [
    Program("cfrac", "cfrac", lambda n: ["17545186520507317056371138836327483792789528"],
            compare=True),
    Program("espresso", "espresso", lambda n: ["{src}/bench/espresso/largest.espresso"],
            compare=True),
    Program("barnes", "barnes", lambda n: [], stdin="bench/barnes/input"),
    Program("larsonN", "larson", lambda n: ["5", "8", "1000", "5000", "100", "4141", str(n)],
            time=_seconds(r"relative time: ([0-9.]+)")),
    Program("larsonN-sized", "larson-sized",
            lambda n: ["5", "8", "1000", "5000", "100", "4141", str(n)],
            time=_seconds(r"relative time: ([0-9.]+)")),
    Program("alloc-test1", "alloc-test", lambda n: ["1"]),
    Program("alloc-testN", "alloc-test", lambda n: [str(min(n, 16))]),
    Program("sh6benchN", "sh6bench", lambda n: [str(2 * n)]),
    Program("sh8benchN", "sh8bench", lambda n: [str(2 * n)]),
    Program("xmalloc-testN", "xmalloc-test", lambda n: ["-w", str(n), "-t", "5", "-s", "64"],
            time=_seconds(r"rtime: ([0-9.]+)")),
    Program("cache-scratch1", "cache-scratch", lambda n: ["1", "1000", "1", "2000000", str(n)]),
    Program("cache-scratchN", "cache-scratch",
            lambda n: [str(n), "1000", "1", "2000000", str(n)]),
    Program("cache-thrash1", "cache-thrash", lambda n: ["1", "1000", "1", "2000000", str(n)]),
    Program("cache-thrashN", "cache-thrash", lambda n: [str(n), "1000", "1", "2000000", str(n)]),
    Program("malloc-large", "malloc-large", lambda n: []),
    Program("mstressN", "mstress", lambda n: [str(n), "50", "25"]),
    Program("mleak10", "mleak", lambda n: ["5"]),
    Program("mleak100", "mleak", lambda n: ["50"]),
    Program("rptestN", "rptest",
            lambda n: [str(n), "0", "1", "2", "500", "1000", "100", "8", "16000"],
            time=_rate(r"\.\.\.([0-9]+) memory ops", 2000000)),
    Program("glibc-simple", "glibc-simple", lambda n: []),
    Program("glibc-thread", "glibc-thread", lambda n: [str(n)],
            time=_rate(r"([0-9.]+) iterations", 1e9)),
]


def locate(directory):
    """(checkout, binary folder) of a built mimalloc-bench, or a reason it is not one."""
    directory = os.path.abspath(directory)
    for checkout, bins in ((directory, os.path.join(directory, "out", "bench")),
                           (os.path.dirname(os.path.dirname(directory)), directory)):
        if (os.path.isfile(os.path.join(bins, "cfrac")) or
                os.path.isfile(os.path.join(bins, "larson"))) and \
                os.path.isdir(os.path.join(checkout, "bench")):
            return checkout, bins, None
    return None, None, (f"{directory} is not a built mimalloc-bench checkout (expected its "
                        "binaries in out/bench and its inputs in bench/)")


def command(program, checkout, bins, cpus):
    return [os.path.join(bins, program.binary)] + \
        [a.format(src=checkout) for a in program.args(cpus)]
