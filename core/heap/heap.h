// core/heap/heap.h — the Heap facade: malloc's family on top of the allocator layer.
//
// Layering (snmalloc-style include rule; each layer includes only the ones below it,
// each through its umbrella header; test/layers/check.py holds the ranks):
//   core/platform/platform.h   raw syscalls, Mutex, configuration, rseq, the
//                              topology providers (probe, hwloc), the cgroup's
//                              memory limit, the helper thread's start, USDT probes
//   core/ds/ds.h               heap geometry, size classes, intrusive lists
//   core/alloc/alloc.h         shards and nodes, segments, page heap, central lists,
//                              depots, the front end (per-CPU sheaves, thread caches),
//                              object caches, the decay tick, the background thread,
//                              the memory limit, the heap profiler's sampling schedule
//   the heap layer's floors    core/prof, core/guard, core/foreign below this facade;
//                              core/deferred, core/stats, core/lifecycle above it
//   core/core.h                what preload/ and compat/ include
//
// Owns: the malloc-family semantics — small objects through the front end
// (core/alloc/front.h), bulk allocation and the object caches' entry points, large
// ones from the page heap, huge ones in their own segments; aligned allocation;
// realloc in place; validation of every pointer handed back (foreign, interior,
// double frees are reported); trim; the decay and background settings.
//
// Locking: the fast paths below take no lock and use no atomic instruction. Slow
// paths take the locks of the layer below in its documented order.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/alloc/alloc.h"

namespace uslab::heap {

// Every allocation function below fails with nullptr and errno = ENOMEM.
using os::fail_nomem;

// Out-of-line paths.
// *zeroed (when asked for) tells whether the memory is known to read as zero.
void* alloc_large(size_t size, size_t align, bool* zeroed);
void free_slow(void* p, uintptr_t entry);
void* alloc_aligned(size_t size, size_t align);
void* alloc_zeroed(size_t size);
void* realloc(void* p, size_t size);
// realloc keeping an alignment (above malloc's 16: in place when p is aligned and its
// slab or span holds size, else moved); nullptr with p still valid when it fails.
void* realloc_aligned(void* p, size_t size, size_t align);
size_t usable_size(const void* p);
// jemalloc's xallocx: resizes p in place to hold size bytes when its slab or span
// allows; returns its usable size afterwards (0 for an invalid pointer, reported).
size_t resize_in_place(void* p, size_t size);
// jemalloc's nallocx: the usable size alloc_aligned(size, align) would give (0 when
// it could not be had).
size_t usable_size_for(size_t size, size_t align);

// p (class cls, or null) handed to the program: a cache's objects are constructed.
inline void* handed_out(void* p, unsigned cls) {
  track_alloc(p, class_size(cls), cls >= kFirstCacheClass);
  return p;
}
template <bool Hot = false>
inline void* alloc_class(unsigned cls, Request r = kWholeClass) {
  return handed_out(take_object<Hot>(cls, r), cls);
}

// malloc.
template <bool Hot = false>
inline void* alloc(size_t size) {
  if (__builtin_expect(size <= kMaxSmall, 1)) return alloc_class<Hot>(size_to_class(size), size);
  return alloc_large(size, kPageSize, nullptr);
}

// The slab of p when p is a valid object start in a live slab (e is p's PageMap
// entry), else nullptr.
inline Span* slab_of(const void* p, uintptr_t e) {
  unsigned cls = e & PageMap::kClassMask;
  if (__builtin_expect(cls == 0, 0)) return nullptr;
  Span* s = PageMap::span_of(e);
  if (__builtin_expect(!s->is_object(p), 0)) return nullptr;
  return s;
}

// Whether two classes are equal, tested where the compiler cannot see it: after
// `c == cls` it may push with whichever register it likes, and the caller needs the
// push to use c, the class it has sooner.
inline bool same_class(unsigned c, unsigned cls) {
#if defined(__x86_64__)
  __asm__ goto("cmpl %0, %1\n\tjne %l[differ]" : : "r"(c), "r"(cls) : "cc" : differ);
  return true;
differ:
  return false;
#else
  return c == cls;
#endif
}

// The page map validates p (its entry names a live slab whose object starts at p);
// the push uses the class recorded in p's segment header, one load from p where the
// entry is two (page_class_of). They differ only if that header was overwritten:
// free_slow reports it.
template <bool Hot = false>
inline void free(void* p) {
  uintptr_t e = PageMap::entry(p);
  unsigned cls = e & PageMap::kClassMask;
  // Size classes only: objects of caches (and everything else) take free_slow.
  if (__builtin_expect(cls - 1 < kNumClasses - 1 && slab_of(p, e) != nullptr, 1)) {
    unsigned c = page_class_of(p);
    if (__builtin_expect(same_class(c, cls), 1)) return free_object<Hot>(p, c);
  }
  free_slow(p, e);
}

// Free of p allocated with size bytes (sized delete, free_sized, sdallocx): the class
// comes from the size, with no load from p at all; the page map still validates p.
// Any disagreement (an aligned allocation, a wrong size) takes free().
template <bool Hot = false>
inline void free_sized(void* p, size_t size) {
  if (__builtin_expect(size <= kMaxSmall, 1)) {
    unsigned c = size_to_class(size);
    uintptr_t e = PageMap::entry(p);
    if (__builtin_expect(same_class(c, e & PageMap::kClassMask) && slab_of(p, e) != nullptr, 1))
      return free_object<Hot>(p, c);
  }
  free(p);
}

// Bulk allocation of n objects of class cls into out (r: what each is asked for): n,
// or 0 with nothing allocated (errno = ENOMEM). Frees of n validated objects of class cls. Both move whole
// batches between the CPU sheaf, the depot and the slabs (one lock per batch).
size_t alloc_bulk_class(unsigned cls, size_t n, void** out, Request r = kWholeClass);
void free_bulk_class(unsigned cls, void* const* ptrs, size_t n);
// uslab_alloc_bulk / uslab_free_bulk (any pointers uslab handed out; NULLs skipped).
// A bulk of one small object is malloc's or free's fast path, inline as theirs; up
// to kBulkSingles objects take single pops and pushes (a batch section and the
// calls to it cost more than that many); larger bulks move whole batches.
constexpr size_t kBulkSingles = 4;
size_t alloc_bulk_few(unsigned cls, size_t n, void** out, Request r);  // n ≤ kBulkSingles
size_t alloc_bulk_batch(size_t size, size_t n, void** out);
void free_bulk_few(size_t n, void* const* ptrs);
void free_bulk_batch(size_t n, void* const* ptrs);
inline size_t alloc_bulk(size_t size, size_t n, void** out) {
  if (__builtin_expect(n - 1 < kBulkSingles && size <= kMaxSmall, 1)) {
    if (n > 1) return alloc_bulk_few(size_to_class(size), n, out, size);
    void* p = alloc_class<true>(size_to_class(size), size);
    out[0] = p;
    return p != nullptr;
  }
  return alloc_bulk_batch(size, n, out);
}
inline void free_bulk(size_t n, void* const* ptrs) {
  if (__builtin_expect(n == 1, 1)) {
    if (ptrs[0]) free<true>(ptrs[0]);
  } else if (n <= kBulkSingles) {
    free_bulk_few(n, ptrs);
  } else {
    free_bulk_batch(n, ptrs);
  }
}

// Object caches (uslab_cache_*); see core/alloc/obj_cache.h.
ObjCache* cache_create(const char* name, size_t size, size_t align, unsigned flags,
                       void (*ctor)(void*));  // nullptr with errno set
void cache_destroy(ObjCache* c);
inline void* cache_alloc(ObjCache* c) {
  void* p = alloc_class(c->cls);
  if (p && (c->flags & (kCacheZero | kCachePoison))) obj_cache_on_alloc(c, p);
  return p;
}
void cache_free(ObjCache* c, void* p);
// The bulk calls of a cache: a bulk of one is cache_alloc or cache_free (a batch
// that small costs more), larger ones move whole batches.
size_t cache_alloc_bulk_batch(ObjCache* c, size_t n, void** out);
void cache_free_bulk_batch(ObjCache* c, size_t n, void* const* ptrs);
inline size_t cache_alloc_bulk(ObjCache* c, size_t n, void** out) {
  if (__builtin_expect(n == 1, 1)) return (out[0] = cache_alloc(c)) != nullptr;
  return cache_alloc_bulk_batch(c, n, out);
}
inline void cache_free_bulk(ObjCache* c, size_t n, void* const* ptrs) {
  if (__builtin_expect(n == 1, 1)) return cache_free(c, ptrs[0]);
  cache_free_bulk_batch(c, n, ptrs);
}

// True when uslab has a span at p's page (p may still be an interior pointer).
inline bool owns(const void* p) { return PageMap::entry(p) != 0; }

// malloc_trim: flush this thread's cache and every CPU's sheaves, release spare
// slabs, purge free pages.
size_t trim();
// jemalloc's arena.<i>.decay: a decay tick now (what stayed unused for its time goes back).
void decay_now();
// decay_ms now, and a new value (jemalloc's dirty_decay_ms; kDecayNever: never).
constexpr uint64_t kDecayNever = UINT64_MAX / 4;
uint64_t decay_ms();
void set_decay_ms(uint64_t ms);
// The background thread, as jemalloc's background_thread mallctl: whether the option
// asks for it (auto or true); start or stop it.
bool background_configured();
void set_background(bool on);
// Flush the calling thread's cache (per-thread mode; nothing to do per CPU).
void flush_thread_cache();

// The system page (valloc/pvalloc alignment), and uslab's own (large objects are
// whole pages of it).
inline size_t system_page() { return os::page_size(); }
constexpr size_t kPage = kPageSize;

// Huge blocks live and their bytes (alloc_large, free, realloc; read by stats()).
extern std::atomic<size_t> g_huge_count;
extern std::atomic<size_t> g_huge_bytes;

// Prints a message on stderr and aborts; allocates nothing.
[[noreturn]] void die(const char* message);

}  // namespace uslab::heap
