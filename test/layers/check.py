#!/usr/bin/env python3
"""test/layers/check.py SRC — the include rule of docs/DESIGN.md, read from the
#include lines of core/, preload/ and compat/: each file includes only its own layer
and the layers below it, a lower layer only through its umbrella header, and, inside
core/alloc, only modules below its own in MODULES and the coordinators' headers. An
include outside these rules fails the test unless ALLOWED lists it with its reason.
Prints every violation; exit 1 on any, or on an ALLOWED entry that no longer occurs
(keep the table true)."""
import pathlib
import re
import sys

src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")

# Layers, lowest first: (name, path prefixes, umbrella headers others include).
LAYERS = [
    ("platform", ["core/platform/"], ["core/platform/platform.h"]),
    ("ds", ["core/ds/"], ["core/ds/ds.h"]),
    ("alloc", ["core/alloc/"], ["core/alloc/alloc.h"]),
    ("heap", ["core/heap", "core/deferred.", "core/grace.", "core/foreign.", "core/prof/",
              "core/guard/"],
     ["core/heap.h"]),
    ("front", ["preload/", "compat/"], []),
]

# Modules of core/alloc, lowest first; a module is the files whose names are, or
# start with, its name or one of the names listed with it. The two front ends (the
# thread caches and the per-CPU sheaves, each the other's fallback) are one module.
MODULES = [
    ("error_report", []), ("meta_arena", []), ("paged_pool", []), ("segment", []), ("shard", []),
    ("page_heap", []), ("huge_cache", []), ("central", []), ("first_touch", []),
    ("depot", []), ("hit_counter", []), ("sampler", []),
    ("thread_cache", ["percpu", "capacity"]), ("obj_cache", []),
    ("decay", []), ("background", []), ("memory_limit", []), ("alloc", []),
]
# Coordinators: every module below them tells them that memory waits (decay_notice,
# background_note_free) or asks before the heap grows (limit_admit), and they act on
# all of the modules (a tick drains every cache). Any module may include their
# headers, which in turn include nothing of core/alloc, so that no header cycle forms.
COORDINATORS = {"decay", "background", "memory_limit"}

# Includes outside the rules, each with the reason it stays.
ALLOWED = {
    ("core/heap.cc", "core/alloc/first_touch.h"):
        "the facade prepares a shard on a thread's first call; not for the layers above",
    ("core/prof/stack.cc", "core/platform/libc_calls.h"):
        "the unwinder's libc entry points, kept out of the platform umbrella",
    ("preload/init.cc", "core/platform/libc_calls.h"):
        "the constructor binds glibc's entry points before the heap exists",
    ("core/prof/write.cc", "core/platform/os.h"): "raw syscalls for the profile files",
    ("core/prof/symbolize.cc", "core/platform/os.h"): "raw syscalls to read the binaries",
    ("core/grace.cc", "core/platform/libc_calls.h"):
        "membarrier's registration through glibc's syscall entry",
    ("core/alloc/memory_limit.cc", "core/platform/cgroup.h"):
        "the cgroup reader, kept out of the platform umbrella (not for the fast paths)",
    ("core/alloc/thread_cache.cc", "core/platform/libc_calls.h"):
        "pthread keys through glibc's entry points, kept out of the platform umbrella",
    ("core/alloc/background.h", "core/platform/helper_thread.h"):
        "the allocator's own thread, kept out of the platform umbrella",
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
for f in files:
    rel = f.relative_to(src).as_posix()
    la = layer_of(rel)
    for inc in re.findall(r'^#include "([^"]+)"', f.read_text(), re.M):
        lb = layer_of(inc)
        if lb is None or la is None:
            continue
        why = None
        if lb > la:
            why = f"{LAYERS[la][0]} includes the higher layer {LAYERS[lb][0]}"
        elif lb < la and inc not in LAYERS[lb][2] and not (lb == 0 and la == 1):
            why = f"{LAYERS[lb][0]} reached past its umbrella {LAYERS[lb][2]}"
        elif la == lb == 2:
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
for edge in sorted(set(ALLOWED) - seen):
    bad.append(f"{edge[0]} -> {edge[1]}: in ALLOWED but no longer included (remove it)")
for b in bad:
    print("layer rule:", b)
print(f"{len(files)} files, {len(bad)} violations")
sys.exit(1 if bad else 0)
