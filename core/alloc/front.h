// core/alloc/front.h — the front end: which cache serves the calling thread's
// objects, this CPU's sheaves (percpu.h) or this thread's cache (thread_cache.h).
//
// Owns: the dispatch every small allocation and free of the heap layer goes through
// (take_object, free_object), and in front.cc what passes between the two: the
// choice, made once at the process's first allocation (until then g_percpu is false
// and the thread caches serve, so that first call reaches thread_cache_alloc_slow,
// which decides), the per-CPU slow paths that hand a thread with no usable CPU to
// its thread cache, the calling thread's shard, and arming both front ends'
// sampling streams. The two front ends never call each other.
//
// Both forms of the per-CPU sections (percpu_rseq.h) are inlined into the entry
// points programs call most: malloc, free, operator new and delete (Hot = true).
// Elsewhere the base form is reached by a jump, to keep the section descriptors the
// loader relocates at start-up within one page (percpu.h).
//
// Locking: none; what the two front ends say of theirs.
#pragma once

#include "core/alloc/percpu.h"
#include "core/alloc/thread_cache.h"

namespace uslab {

// An object of class cls from this CPU's sheaf or this thread's cache, not yet the
// program's (track.h: the profiler's hook takes one to hand out itself); r: what the
// program asked for, which a sampled allocation's hook sizes a guarded object by.
template <bool Hot = false>
inline void* take_object(unsigned cls, Request r = kWholeClass) {
  if (__builtin_expect(holds_index_form(g_percpu), 1)) return percpu_alloc_as<false>(cls, r);
  if constexpr (Hot) {
    if (__builtin_expect(g_percpu != 0, 1)) return percpu_alloc_as<true>(cls, r);  // kSheafBase
  } else {
    if (g_percpu) return percpu_alloc_base(cls, r);
  }
  return thread_cache_alloc(cls, r);
}

// Push a validated object of any class onto this CPU's sheaf (or its remote-node
// buffer, with several NUMA nodes) or this thread's cache. From here on the
// sanitizer sees it as freed (track.h). Hot: see take_object.
template <bool Hot = false>
inline void free_object(void* p, unsigned cls) {
  track_free(p, class_size(cls));
  if (__builtin_expect(holds_index_form(g_percpu_one_node), 1))
    return percpu_free_as<false>(p, cls);
  if constexpr (Hot) {
    if (__builtin_expect(g_percpu_one_node != 0, 1)) return percpu_free_as<true>(p, cls);
  } else {
    if (g_percpu_one_node) return percpu_free_base(p, cls);
  }
  if (g_percpu) return percpu_free_nodes(p, cls);
  return thread_cache_free(p, cls);
}

// The shard (shard.h) whose depots the calling thread uses: its CPU's in per-CPU
// mode, else its thread cache's.
unsigned current_shard();

}  // namespace uslab
