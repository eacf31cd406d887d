// core/heap/bulk.cc — the Heap facade's bulk allocation and free (uslab_alloc_bulk,
// uslab_free_bulk) and object caches' entry points: objects move between the CPU
// sheaf, the depots and the slabs in whole batches. Bulks too small for a batch
// (heap.h's inline alloc_bulk/free_bulk and cache_*_bulk) take the single-object
// paths instead, here in alloc_bulk_few and free_bulk_few.
// Locking: none of its own; see heap.h and the allocator layer.
#include "core/heap/heap.h"

#include <cerrno>

#include "core/guard/guard.h"
#include "core/prof/prof.h"

namespace uslab::heap {

namespace {

// The n objects of a bulk allocation, handed to the program: the sanitizer told
// (track.h), and those the profiler samples (batches take no hit counter: each
// object is counted down as the large ones are, sampler.h) replaced by the hook's,
// which it tracks. Returns n.
size_t hand_out_bulk(unsigned cls, size_t n, void** out, Request r) {
  for (size_t i = 0; i < n; i++) track_alloc(out[i], class_size(cls), cls >= kFirstCacheClass);
  if (__builtin_expect(!g_sampling, 1)) return n;
  const size_t bytes = class_size(cls);
  for (size_t i = sample_large_run(bytes, n); i < n; i += 1 + sample_large_run(bytes, n - i - 1))
    if (void* q = g_sample_hooks->small(cls, r)) {
      if (ObjCache* c = cls >= kFirstCacheClass ? obj_cache_of(cls) : nullptr)
        obj_cache_on_free(c, out[i]);
      free_object(out[i], cls);
      out[i] = q;
    }
  return n;
}

// free_bulk_class with several NUMA nodes: objects of other nodes than the current
// CPU's go straight to their nodes (a batch needs no remote-node buffer), the
// others the usual way.
void free_bulk_class_nodes(unsigned cls, void* const* ptrs, size_t n) {
  const unsigned here = node_of_cpu(rseq_cpu_id());
  void* local[kMaxBatch];
  uint64_t remote[kMaxBatch];
  for (size_t i = 0; i < n;) {
    size_t nl = 0, nr = 0;
    for (; i < n && nl < kMaxBatch && nr < kMaxBatch; i++) {
      const Span* s = PageMap::get(ptrs[i]);
      if (node_of_shard(s->shard) == here)
        local[nl++] = ptrs[i];
      else
        remote[nr++] = remote_entry(ptrs[i], s);
    }
    if (nr) percpu_remote_flush(remote, nr);
    if (nl == 0) continue;
    size_t left = nl - percpu_put(cls, local, nl);
    if (left) depot_give(current_shard(), cls, local, left);
  }
}

// n objects of class cls back into the caches, the depots or the slabs, with no
// word to the sanitizers (track.h): free_bulk_class's work, and what a bulk
// allocation that failed half-way took.
void put_back_bulk(unsigned cls, void* const* ptrs, size_t n) {
  if (n && !g_percpu_one_node && g_percpu) return free_bulk_class_nodes(cls, ptrs, n);
  // The CPU sheaf takes the last objects that fit; the rest goes to the depot as
  // full sheaves, or to the slabs once the depot is at its bound.
  size_t left = n && g_percpu ? n - percpu_put(cls, ptrs, n) : n;
  if (left == 0) return;
  const unsigned here = current_shard();
  for (size_t i = 0; i < left; i += kMaxBatch)
    depot_give(here, cls, ptrs + i, left - i < kMaxBatch ? left - i : kMaxBatch);
  decay_notice();  // past the CPU sheaf, as a drain
}

}  // namespace

size_t alloc_bulk_few(unsigned cls, size_t n, void** out, Request r) {
  for (size_t i = 0; i < n; i++)
    if (__builtin_expect(!(out[i] = alloc_class<true>(cls, r)), 0)) {
      for (size_t j = 0; j < i; j++) free_object(out[j], cls);
      return 0;
    }
  return n;
}

size_t alloc_bulk_class(unsigned cls, size_t n, void** out, Request r) {
  // A program whose first allocation is a bulk one decides the front end here (once
  // g_percpu is set, no call).
  if (__builtin_expect(!g_percpu, 0) && !percpu_decided()) percpu_decide();
  if (n <= 2) return alloc_bulk_few(cls, n, out, r);  // cheaper than a batch section
  size_t got = g_percpu ? percpu_take(cls, out, n) : 0;
  if (got == n) return hand_out_bulk(cls, n, out, r);
  while (got < n) {
    size_t want = n - got < kMaxBatch ? n - got : kMaxBatch;
    size_t k = g_depot[current_shard()][cls].take(cls, out + got, want);
    if (k == 0) {
      put_back_bulk(cls, out, got);  // never handed out
      os::fail_nomem();
      return 0;
    }
    got += k;
  }
  decay_notice();  // past the CPU sheaf, as a refill
  return hand_out_bulk(cls, n, out, r);
}

void free_bulk_class(unsigned cls, void* const* ptrs, size_t n) {
  for (size_t i = 0; i < n; i++) track_free(ptrs[i], class_size(cls));
  put_back_bulk(cls, ptrs, n);
}

size_t alloc_bulk_batch(size_t size, size_t n, void** out) {
  if (n == 0) return 0;
  if (size <= kMaxSmall) return alloc_bulk_class(size_to_class(size), n, out, size);
  for (size_t i = 0; i < n; i++) {
    out[i] = alloc_large(size, kPageSize, nullptr);
    if (!out[i]) {
      for (size_t j = 0; j < i; j++) free(out[j]);
      return 0;
    }
  }
  return n;
}

namespace {

// The first index from i on whose pointer is not an object of `slab` (n if none):
// the slab of the previous pointer of a bulk free (SlabRange, in registers), so
// that neighbours in one slab need no page-map lookup.
inline size_t scan_slab(const SlabRange slab, void* const* ptrs, size_t i, size_t n) {
  while (i < n && slab.holds(ptrs[i])) i++;
  return i;
}

// Frees ptrs[0..n), a run of validated objects of class cls (none: nothing to do): a
// short one through the single-object push, which costs less than a batch section.
inline void free_run(unsigned cls, void* const* ptrs, size_t n) {
  if (n == 0) return;
  if (__builtin_expect(prof::g_cache_samples != 0, 0) && cls >= kFirstCacheClass)
    for (size_t i = 0; i < n; i++) prof::on_cache_free(ptrs[i]);
  if (n > 2)
    free_bulk_class(cls, ptrs, n);
  else
    for (size_t i = 0; i < n; i++) free_object(ptrs[i], cls);
}

// The slab of p with its class and cache (nullptr for a size class), or nullptr
// when p is not an object of a live slab or of a live cache.
__attribute__((noinline)) Span* bulk_lookup(void* p, unsigned* cls, const ObjCache** cache) {
  uintptr_t e = PageMap::entry(p);
  *cls = e & PageMap::kClassMask;
  Span* slab = slab_of(p, e);
  *cache = *cls >= kFirstCacheClass ? obj_cache_of(*cls) : nullptr;
  return slab && (*cls < kFirstCacheClass || *cache) ? slab : nullptr;
}

}  // namespace

void free_bulk_few(size_t n, void* const* ptrs) {
  for (size_t i = 0; i < n; i++)
    if (ptrs[i]) free<true>(ptrs[i]);
}

void free_bulk_batch(size_t n, void* const* ptrs) {
  // Consecutive objects of one class are freed in place as one run (one batch); the
  // slab of the previous pointer is checked first. A pointer outside it whose
  // successor is on another page starts no run (mixed sizes, as in a deferred-free
  // block): it takes free(), cheaper than a lookup and a run of one. After a run is
  // freed its slab may have gone back to the page heap, so the next pointer is
  // looked up again.
  SlabRange slab;
  unsigned run_cls = 0;
  const ObjCache* cache = nullptr;
  bool poison = false;
  size_t run = 0;  // the run is ptrs[run, i)
  for (size_t i = 0; i < n; i++) {
    if (!poison) {  // the common case: a tight scan with the slab's fields in registers
      i = scan_slab(slab, ptrs, i, n);
      if (i == n) break;
    }
    void* p = ptrs[i];
    if (__builtin_expect(!slab.holds(p), 0)) {
      unsigned cls;
      const ObjCache* c;
      bool alone = i + 1 == n ||
                   ((reinterpret_cast<uintptr_t>(p) ^ reinterpret_cast<uintptr_t>(ptrs[i + 1])) >>
                    kPageShift) != 0;
      Span* s = p && !alone ? bulk_lookup(p, &cls, &c) : nullptr;
      if (!s || cls != run_cls) {
        free_run(run_cls, ptrs + run, i - run);
        run = s ? i : i + 1;
        if (!s) {
          slab = SlabRange();
          if (p) free(p);  // alone, or large, huge, invalid (reported there)
          continue;
        }
        run_cls = cls;
        cache = c;
        poison = c && (c->flags & kCachePoison);
      }
      slab = SlabRange(s);
    }
    if (poison) obj_cache_on_free(cache, p);
  }
  free_run(run_cls, ptrs + run, n - run);
}

ObjCache* cache_create(const char* name, size_t size, size_t align, unsigned flags,
                       void (*ctor)(void*)) {
  config_init();
  int err;
  ObjCache* c = obj_cache_create(name, size, align, flags, ctor, &err);
  if (!c) errno = err;
  return c;
}

void cache_destroy(ObjCache* c) {
  if (c) obj_cache_destroy(c, guard::live_in_class(c->cls));
}

namespace {
// Whether p is a slab object of cache c, for the caller to free; if not, p is
// freed here when it is a guarded object of c, else reported. *slab holds the last
// slab seen, so neighbours in a bulk free skip the page-map lookup.
bool slab_object(const ObjCache* c, void* p, SlabRange* slab) {
  if (slab->holds(p)) return true;
  uintptr_t e = PageMap::entry(p);
  if (Span* s = (e & PageMap::kClassMask) == c->cls ? slab_of(p, e) : nullptr) {
    *slab = SlabRange(s);
    return true;
  }
  if (Span* g = guard::span_of(e); g && guard::class_of(g) == c->cls) {
    guard::free(p, g);  // a double or invalid free is reported there
    return false;
  }
  report_bad_free(p, "uslab_cache_free of an object not from this cache", c->cls);
  return false;
}
}  // namespace

void cache_free(ObjCache* c, void* p) {
  SlabRange slab;
  if (!p || !slab_object(c, p, &slab)) return;
  if (prof::g_cache_samples) prof::on_cache_free(p);
  obj_cache_on_free(c, p);
  free_object(p, c->cls);
}

size_t cache_alloc_bulk_batch(ObjCache* c, size_t n, void** out) {
  if (alloc_bulk_class(c->cls, n, out) != n || n == 0) return 0;
  if (c->flags & (kCacheZero | kCachePoison))
    for (size_t i = 0; i < n; i++) obj_cache_on_alloc(c, out[i]);
  return n;
}

void cache_free_bulk_batch(ObjCache* c, size_t n, void* const* ptrs) {
  // Runs of valid objects are freed in place; NULLs, guarded objects (freed by
  // slab_object) and foreign pointers (reported) end a run. As in free_bulk_batch, a
  // freed run's slab is not trusted afterwards.
  SlabRange slab;
  size_t run = 0;
  const bool poison = c->flags & kCachePoison;
  for (size_t i = 0; i < n; i++) {
    if (!poison) {  // as in free_bulk: neighbours in the slab need nothing more
      i = scan_slab(slab, ptrs, i, n);
      if (i == n) break;
    }
    void* p = ptrs[i];
    if (p && slab_object(c, p, &slab)) {
      if (poison) obj_cache_on_free(c, p);
      continue;
    }
    free_run(c->cls, ptrs + run, i - run);
    run = i + 1;
    slab = SlabRange();
  }
  free_run(c->cls, ptrs + run, n - run);
}

}  // namespace uslab::heap
