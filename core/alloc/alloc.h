// core/alloc/alloc.h — umbrella of the allocator layer (shards, segments, page heaps,
// central slab lists, depots, huge cache, per-CPU sheaves, thread caches, metadata,
// the decay tick, the background thread, the memory limit). Includes only the layers
// below it; only the heap layer above (core/heap/, core/deferred/, core/prof/, ...)
// includes it.
#pragma once

#include "core/alloc/background.h"
#include "core/alloc/central.h"
#include "core/alloc/decay.h"
#include "core/alloc/depot.h"
#include "core/alloc/error_report.h"
#include "core/alloc/first_touch.h"
#include "core/alloc/hit_counter.h"
#include "core/alloc/huge_cache.h"
#include "core/alloc/memory_limit.h"
#include "core/alloc/meta_arena.h"
#include "core/alloc/obj_cache.h"
#include "core/alloc/page_heap.h"
#include "core/alloc/paged_pool.h"
#include "core/alloc/front.h"
#include "core/alloc/percpu.h"
#include "core/alloc/sampler.h"
#include "core/alloc/segment.h"
#include "core/alloc/shard.h"
#include "core/alloc/thread_cache.h"
#include "core/ds/ds.h"
