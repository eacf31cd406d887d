#!/usr/bin/env python3
"""test/layers/check.py SRC — the include rule of docs/DESIGN.md, read from the
#include lines of core/, preload/ and compat/: each file includes only its own layer
and the layers below it, a lower layer only through its umbrella header, and, inside
core/alloc, only modules below its own in MODULES and the coordinators' headers. An
include outside these rules fails the test unless ALLOWED lists it with its reason.
Every file of core/ belongs to a layer, and no circle forms between units (a file and
its header together; a module of core/alloc as one): a.cc including b.h while b.h
includes a.h is a circle even though no file includes itself.
Prints every violation; exit 1 on any, or on an ALLOWED entry that no longer occurs
(keep the table true)."""
import pathlib
import re
import sys

src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")

# Layers, lowest first: (name, path prefixes, the headers other layers include). The
# heap layer is built in floors, each a folder of core/ and a layer here: the
# profiler, guarded sampling and foreign pointers below the facade (heap.cc marks
# sampled spans, hands guarded and foreign pointers to them); deferred frees, built
# on the facade's malloc and free, statistics, which read every floor, and the
# library's start and fork, which starts and forks them all, above it; core/core.h
# is what preload/ and compat/ include.
LAYERS = [
    ("platform", ["core/platform/"], ["core/platform/platform.h"]),
    ("ds", ["core/ds/"], ["core/ds/ds.h"]),
    ("alloc", ["core/alloc/"], ["core/alloc/alloc.h"]),
    ("prof", ["core/prof/"], ["core/prof/prof.h", "core/prof/stack.h", "core/prof/symbolize.h"]),
    ("guard", ["core/guard/"], ["core/guard/guard.h"]),
    ("foreign", ["core/foreign/"], ["core/foreign/foreign.h", "core/foreign/glibc_chunk.h"]),
    ("heap", ["core/heap/"], ["core/heap/heap.h"]),
    ("deferred", ["core/deferred/"], ["core/deferred/deferred.h"]),
    ("stats", ["core/stats/"], ["core/stats/stats.h"]),
    ("lifecycle", ["core/lifecycle/"], ["core/lifecycle/lifecycle.h"]),
    ("core", ["core/core.h"], ["core/core.h"]),
    ("front", ["preload/", "compat/"], []),
]
LAYER = {name: i for i, (name, _, _) in enumerate(LAYERS)}

# Modules of core/alloc, lowest first; a module is the files whose names are, or
# start with, its name or one of the names listed with it. The two front ends (the
# thread caches and the per-CPU sheaves) do not know each other: front, above both,
# passes between them.
MODULES = [
    ("error_report", []), ("meta_arena", []), ("paged_pool", []), ("segment", []), ("shard", []),
    ("page_heap", []), ("huge_cache", []), ("central", []), ("first_touch", []),
    ("depot", []), ("hit_counter", []), ("sampler", []),
    ("thread_cache", []), ("percpu", ["capacity"]), ("front", []), ("obj_cache", []),
    ("decay", []), ("background", []), ("memory_limit", []), ("alloc", []),
]
# Coordinators: every module below them tells them that memory waits (decay_notice,
# background_note_free) or asks before the heap grows (limit_admit), and they act on
# all of the modules (a tick drains every cache). Any module may include their
# headers, which in turn include nothing of core/alloc, so that no header cycle forms.
COORDINATORS = {"decay", "background", "memory_limit"}

# Includes outside the rules, each with the reason it stays.
ALLOWED = {
    ("core/heap/heap.cc", "core/alloc/first_touch.h"):
        "the facade prepares a shard on a thread's first call; not for the layers above",
    ("core/prof/stack.cc", "core/platform/libc_calls.h"):
        "the unwinder's libc entry points, kept out of the platform umbrella",
    ("preload/init.cc", "core/platform/libc_calls.h"):
        "the constructor binds glibc's entry points before the heap exists",
    ("core/prof/write.cc", "core/platform/os.h"): "raw syscalls for the profile files",
    ("core/prof/symbolize.cc", "core/platform/os.h"): "raw syscalls to read the binaries",
    ("core/deferred/grace.cc", "core/platform/libc_calls.h"):
        "membarrier's registration through glibc's syscall entry",
    ("core/alloc/memory_limit.cc", "core/platform/cgroup.h"):
        "the cgroup reader, kept out of the platform umbrella (not for the fast paths)",
    ("core/alloc/thread_cache.cc", "core/platform/libc_calls.h"):
        "pthread keys through glibc's entry points, kept out of the platform umbrella",
    ("core/alloc/background.h", "core/platform/helper_thread.h"):
        "the allocator's own thread, kept out of the platform umbrella",
}

# Circles that stay, each with its reason; any other fails, as does one listed here
# that no longer forms.
ALLOWED_CIRCLES = {
    ("core/platform/config", "core/platform/fault", "core/platform/os"):
        "the OS page is configurable (os_page): the first page_size() reads the "
        "configuration, which reads the environment through os; and in the "
        "fault-injection build, os's system calls ask fault, which reads its rules "
        "and prints through os",
}


def layer_of(path):
    for i, (_, prefixes, _) in enumerate(LAYERS):
        if any(path.startswith(p) for p in prefixes):
            return i
    return None


def module_of(path):
    stem = pathlib.Path(path).name.split(".")[0]
    for i, (mod, extra) in enumerate(MODULES):
        if any(stem == m or stem.startswith(m + "_") for m in [mod] + extra):
            return i
    return None


files = sorted(p for d in ("core", "preload", "compat") for p in (src / d).rglob("*")
               if p.suffix in (".h", ".cc"))
bad, seen = [], set()
edges = {}  # unit -> units it includes


def unit_of(path):
    # A coordinator's header includes nothing of core/alloc: a unit of its own.
    if layer_of(path) == LAYER["alloc"] and module_of(path) is not None and not (
            MODULES[module_of(path)][0] in COORDINATORS and path.endswith(".h")):
        return "core/alloc module " + MODULES[module_of(path)][0]
    return path.rsplit(".", 1)[0]


for f in files:
    rel = f.relative_to(src).as_posix()
    la = layer_of(rel)
    if la is None:
        bad.append(f"{rel}: in no layer (add its folder to LAYERS)")
    for inc in re.findall(r'^#include "([^"]+)"', f.read_text(), re.M):
        lb = layer_of(inc)
        if lb is not None and unit_of(inc) != unit_of(rel):
            edges.setdefault(unit_of(rel), set()).add(unit_of(inc))
        if lb is None or la is None:
            continue
        why = None
        if lb > la:
            why = f"{LAYERS[la][0]} includes the higher layer {LAYERS[lb][0]}"
        elif lb < la and inc not in LAYERS[lb][2] and not (lb, la) == (LAYER["platform"], LAYER["ds"]):
            why = f"{LAYERS[lb][0]} reached past its umbrella {LAYERS[lb][2]}"
        elif la == lb == LAYER["alloc"]:
            ma, mb = module_of(rel), module_of(inc)
            if ma is None or mb is None:
                why = f"a core/alloc file not in MODULES ({rel if ma is None else inc})"
            elif MODULES[ma][0] in COORDINATORS and rel.endswith(".h"):
                why = f"the coordinator header {rel} includes {inc}"
            elif mb > ma and not (MODULES[mb][0] in COORDINATORS and inc.endswith(".h")):
                why = f"module {MODULES[ma][0]} includes the higher module {MODULES[mb][0]}"
        if why is None:
            continue
        if (rel, inc) in ALLOWED:
            seen.add((rel, inc))
            continue
        bad.append(f"{rel} -> {inc}: {why}")


def circles(graph):
    """The strongly connected components of more than one unit (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


found = {tuple(c) for c in circles(edges)}
for comp in sorted(found - set(ALLOWED_CIRCLES)):
    bad.append("a circle of includes: " + " <-> ".join(comp))
for comp in sorted(set(ALLOWED_CIRCLES) - found):
    bad.append(" <-> ".join(comp) + ": in ALLOWED_CIRCLES but no longer a circle (remove it)")
for edge in sorted(set(ALLOWED) - seen):
    bad.append(f"{edge[0]} -> {edge[1]}: in ALLOWED but no longer included (remove it)")
for b in bad:
    print("layer rule:", b)
print(f"{len(files)} files, {len(bad)} violations")
sys.exit(1 if bad else 0)
