// core/core.h — the core as preload/ and compat/ see it: the one header they include.
//
// The heap layer's floors, lowest first (test/layers/check.py holds the ranks; a
// floor includes only floors below it, through their headers named here):
//   core/prof/       the heap profiler: sampled records, stacks, profile files
//   core/guard/      guarded sampling: objects on a page of their own
//   core/foreign/    pointers uslab did not hand out (glibc's blocks)
//   core/heap/       the Heap facade: malloc's family, bulk calls, object caches
//   core/deferred/   deferred frees after a grace period
//   core/stats/      statistics: snapshot, table, JSON, the live region
//   core/lifecycle/  the library's start and fork
// Below them the allocator layer (core/alloc/alloc.h), core/ds and core/platform.
#pragma once

#include "core/deferred/deferred.h"
#include "core/foreign/foreign.h"
#include "core/foreign/glibc_chunk.h"
#include "core/guard/guard.h"
#include "core/heap/heap.h"
#include "core/lifecycle/lifecycle.h"
#include "core/prof/prof.h"
#include "core/stats/stats.h"
