// core/heap.cc — slow paths of the Heap facade: large and huge objects, aligned
// and zeroed allocation, realloc, pointer validation (pointers with no uslab span go
// to core/foreign.h), the heap profiler's marks on sampled spans (core/prof), trim,
// stats and fork.
// Locking: none of its own; see heap.h and the allocator layer.
#include "core/heap.h"

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/alloc/first_touch.h"
#include "core/foreign.h"
#include "core/prof/prof.h"

namespace uslab::heap {

namespace {

std::atomic<size_t> g_huge_count{0};
std::atomic<size_t> g_huge_bytes{0};

constexpr size_t kMaxRequest = size_t{1} << 62;  // beyond this nothing can be mapped

size_t pages_for(size_t bytes) { return (bytes + kPageSize - 1) >> kPageShift; }

// Large or huge span of p (p must be its start; e is p's PageMap entry), or nullptr.
Span* large_of(const void* p, uintptr_t e) {
  Span* s = PageMap::span_of(e);
  if (!s || (e & PageMap::kClassMask) || s->kind != SpanKind::kLarge) return nullptr;
  return s->start == p ? s : nullptr;
}

bool is_huge(const Span* s) { return s->segment->kind == SegmentKind::kHuge; }

// A large span's usable size: its pages, or the class size of the small object the
// profiler sampled into it (the program sees the size it would have had unsampled).
size_t large_usable(const Span* s) {
  return s->sampled == Span::kSampledSmall ? s->obj_size : s->bytes();
}

void free_huge(Segment* seg) {
  g_huge_count.fetch_sub(1, std::memory_order_relaxed);
  g_huge_bytes.fetch_sub(seg->huge_span->bytes(), std::memory_order_relaxed);
  // A guarded segment's guards fit its object only: not kept for reuse.
  if (g_config.guard)
    huge_segment_destroy(seg);
  else
    huge_cache_put(seg);
}

// Resizes huge segment seg's object to `size` with mremap (segment_resize_huge), its
// growth admitted by the memory limit first (memory_limit.h).
Segment* resize_huge_admitted(Segment* seg, size_t size, bool may_move) {
  size_t old = seg->huge_span->bytes();
  if (size > old && !limit_admit(size - old)) return nullptr;
  return segment_resize_huge(seg, size, may_move);
}

}  // namespace

void* alloc_large(size_t size, size_t align, bool* zeroed) {
  config_init();
  decay_notice();  // a program that only makes large calls still returns a peak
  if (size > kMaxRequest || align > kMaxRequest) return os::fail_nomem();
  if (size == 0) size = 1;
  size_t npages = pages_for(size);
  size_t align_pages = align > kPageSize ? align >> kPageShift : 1;
  USLAB_PROBE(large_alloc, size, align);
  // With the guard option every large object gets a mapping of its own, between
  // inaccessible pages (segment_create_huge).
  if (!g_config.guard && npages + align_pages - 1 <= PageHeap::kMaxPages) {
    bool z;
    Span* s = g_page_heap[current_shard()].alloc(npages, align_pages, SpanKind::kLarge, &z);
    if (!s) return os::fail_nomem();
    if (zeroed) *zeroed = z;
    if (__builtin_expect(g_sampling, 0)) prof::on_large_alloc(s);
    track_alloc(s->start, s->bytes(), z);
    return s->start;
  }
  Span* desc;
  bool fresh = true;
  const bool reusable = align <= kPageSize && !g_config.guard;  // kept blocks' layout
  const unsigned shard = current_shard();
  Segment* cached = reusable ? huge_cache_take(npages << kPageShift, shard) : nullptr;
  if (!cached && reusable) {
    // None fits: the largest kept block grows into this one (a vector that doubles
    // kept every smaller block it left resident beside the new one: 200 MiB grown
    // in 4 KiB steps peaked at 331 MB, glibc 265).
    if (Segment* old = huge_cache_take_largest(shard)) {
      cached = resize_huge_admitted(old, npages << kPageShift, true);
      if (!cached) huge_segment_destroy(old);
    }
  }
  if (cached) {
    desc = cached->huge_span;
    fresh = false;
  } else {
    if (!limit_admit(size + align)) return os::fail_nomem();  // memory_limit.h
    desc = g_span_pool.alloc();
    if (!desc) return os::fail_nomem();
    if (!segment_create_huge(size, align, desc, g_config.guard)) {
      g_span_pool.free(desc);
      return os::fail_nomem();
    }
    desc->segment->heap = shard;
    bind_to_shard_node(desc->start, desc->bytes(), shard);
  }
  g_huge_count.fetch_add(1, std::memory_order_relaxed);
  g_huge_bytes.fetch_add(desc->bytes(), std::memory_order_relaxed);
  if (zeroed) *zeroed = fresh;
  if (__builtin_expect(g_sampling, 0)) prof::on_large_alloc(desc);
  track_alloc(desc->start, desc->bytes(), fresh);
  return desc->start;
}

void free_slow(void* p, uintptr_t e) {
  if (p == nullptr) return;
  config_init();
  unsigned cls = e & PageMap::kClassMask;
  if (cls) {
    // The fast path takes every valid object of a size class; cache objects come here.
    ObjCache* c = obj_cache_of(cls);
    if (!c || !slab_of(p, e)) return report_bad_free(p, "free of invalid pointer", cls);
    if (prof::g_cache_samples) prof::on_cache_free(p);
    obj_cache_on_free(c, p);
    return free_object(p, cls);
  }
  if (Span* s = large_of(p, e)) {
    if (__builtin_expect(s->sampled, 0)) prof::on_sampled_free(s);
    track_free(s->start, s->bytes());
    if (is_huge(s))
      free_huge(s->segment);
    else
      page_heap_of(s).free(s);
    decay_notice();
    prof::poll();
    return;
  }
  Span* s = PageMap::span_of(e);
  if (s && s->kind == SpanKind::kFree && s->start == p)
    report_bad_free(p, "double free", 0);
  else if (!e)
    foreign::free(p);  // not uslab's memory at all: glibc's block, or reported there
  else
    report_bad_free(p, "free of invalid pointer", 0);
}

namespace {

// The size class serving size bytes aligned to align, or 0 for a large allocation:
// a class whose size is a multiple of align (its objects, laid out from a
// page-aligned slab start, are all aligned). Class 8 is only 8-aligned.
unsigned aligned_class(size_t size, size_t align) {
  if (size > kMaxSmall || align > kPageSize) return 0;
  for (unsigned cls = size_to_class(size > align ? size : align); cls < kNumClasses; cls++)
    if (class_size(cls) % align == 0) return cls;
  return 0;
}

}  // namespace

void* alloc_aligned(size_t size, size_t align) {
  if (align <= 16) return alloc(size < align ? align : size);
  if (unsigned cls = aligned_class(size, align)) return alloc_class(cls);
  return alloc_large(size, align > kPageSize ? align : kPageSize, nullptr);
}

void* alloc_zeroed(size_t size) {
  if (size <= kMaxSmall) {
    void* p = alloc_class(size_to_class(size));
    if (p) memset(p, 0, size);
    return p;
  }
  bool zeroed = false;
  void* p = alloc_large(size, kPageSize, &zeroed);
  if (p && !zeroed) memset(p, 0, size);
  return p;
}

size_t usable_size(const void* p) {
  uintptr_t e = PageMap::entry(p);
  if (Span* s = slab_of(p, e)) return s->obj_size;
  if (Span* s = large_of(p, e)) return large_usable(s);
  return e ? 0 : foreign::usable_size(p);
}

namespace {

// Whether an object of `size` bytes is huge (a mapping of its own; alloc_large).
bool huge_size(size_t size) { return pages_for(size) > PageHeap::kMaxPages; }

// Resizes huge span l's mapping to `size` (resize_huge_admitted), moving it only with
// `may_move`; the span, moved or not, or nullptr (nothing changed).
Span* huge_resize(Span* l, size_t size, bool may_move) {
  size_t old = l->bytes();
  Segment* seg = resize_huge_admitted(l->segment, size, may_move);
  if (!seg) return nullptr;
  g_huge_bytes.fetch_add(seg->huge_span->bytes() - old, std::memory_order_relaxed);
  return seg->huge_span;
}

// Large span l was resized in place from old_bytes (track.h); the pages a page-heap
// span gave up are free again (a huge one's left the address space: os.h untracked
// them).
void track_resized(const Span* l, size_t old_bytes) {
  track_resize(l->start, old_bytes, l->bytes());
  if (l->bytes() < old_bytes && !is_huge(l))
    track_close(l->start + l->bytes(), old_bytes - l->bytes());
}

// Large span l was resized in place, or moved from `was` (its old start): the
// profiler forgets the object it sampled and counts the new size as an allocation,
// as jemalloc's does for realloc.
void resampled(Span* l, const void* was = nullptr) {
  if (__builtin_expect(l->sampled, 0)) prof::on_sampled_free(l, was ? was : l->start);
  if (__builtin_expect(g_sampling, 0)) prof::on_large_alloc(l);
}

// Resizes large span l (object p) in place to `size` bytes when its pages allow;
// false when the object must move.
bool large_resize_in_place(Span* l, size_t size) {
  if (size <= kMaxSmall || size > kMaxRequest) return false;
  size_t want = pages_for(size);
  // A huge mapping is kept while the object still fills at least half of it, and
  // otherwise resized where it is, while the object stays huge; guarded, its pages
  // must stay exactly (the guard sits right after the object).
  if (is_huge(l)) {
    if (g_config.guard) return want == l->npages;
    if (size <= l->bytes() && size >= l->bytes() / 2) return true;
    return huge_size(size) && huge_resize(l, size, false);
  }
  if (want <= l->npages) {
    if (want < l->npages) page_heap_of(l).shrink(l, want);
    return true;
  }
  return page_heap_of(l).try_grow(l, want);
}

}  // namespace

size_t resize_in_place(void* p, size_t size) {
  uintptr_t e = PageMap::entry(p);
  if (Span* s = slab_of(p, e)) return s->obj_size;
  if (Span* l = large_of(p, e)) {
    size_t old = l->bytes();
    large_resize_in_place(l, size);
    if (l->bytes() != old) {
      track_resized(l, old);
      resampled(l);
    }
    decay_notice();
    return large_usable(l);
  }
  config_init();
  report_bad_free(p, "resize of invalid pointer", 0);
  return 0;
}

size_t usable_size_for(size_t size, size_t align) {
  if (size > kMaxRequest || align > kMaxRequest) return 0;
  if (size == 0) size = 1;
  if (align < 16 && size < align) size = align;
  if (unsigned cls = aligned_class(size, align < 16 ? 1 : align)) return class_size(cls);
  return pages_for(size) << kPageShift;
}

void* realloc(void* p, size_t size) {
  if (!p) return alloc(size);
  if (size == 0) {
    free(p);
    return nullptr;
  }
  uintptr_t e = PageMap::entry(p);
  size_t old_size;
  if (Span* s = slab_of(p, e)) {
    if (size <= kMaxSmall && size_to_class(size) == s->size_class) return p;
    old_size = s->obj_size;
  } else if (Span* l = large_of(p, e)) {
    old_size = large_usable(l);
    const size_t old_bytes = l->bytes();
    bool resized = large_resize_in_place(l, size);
    // A huge block that must grow moves its pages to a bigger mapping, not a copy:
    // the peak holds the block once (a copy held both until the free).
    Span* moved = !resized && is_huge(l) && !g_config.guard && huge_size(size)
                      ? huge_resize(l, size, true)
                      : nullptr;
    if (resized && l->bytes() != old_bytes) track_resized(l, old_bytes);
    if (moved) track_move(p, moved->start, moved->bytes());
    if (resized && l->bytes() != old_size) resampled(l);
    if (moved) resampled(moved, p);
    decay_notice();
    if (resized) return p;
    if (moved) return moved->start;
  } else if (size_t foreign_size = e ? 0 : foreign::usable_size(p)) {
    // glibc's block (foreign.h): moved into uslab's heap, glibc's freed.
    old_size = foreign_size;
  } else {
    config_init();
    report_bad_free(p, "realloc of invalid pointer", 0);
    return nullptr;
  }
  void* q = alloc(size);
  if (!q) return nullptr;  // the old object stays valid
  memcpy(q, p, old_size < size ? old_size : size);
  free(p);
  return q;
}

namespace {

// The n objects of a bulk allocation, handed to the program: the sanitizer told
// (track.h), and those the profiler samples (batches take no hit counter: each
// object is counted down as the large ones are, sampler.h) replaced by the hook's,
// which it tracks. Returns n.
size_t hand_out_bulk(unsigned cls, size_t n, void** out) {
  for (size_t i = 0; i < n; i++) track_alloc(out[i], class_size(cls), cls >= kFirstCacheClass);
  if (__builtin_expect(!g_sampling, 1)) return n;
  for (size_t i = 0; i < n; i++)
    if (sample_large(class_size(cls)))
      if (void* q = g_sample_hooks->small(cls)) {
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

size_t alloc_bulk_class(unsigned cls, size_t n, void** out) {
  // A program whose first allocation is a bulk one decides the front end here (once
  // g_percpu is set, no call).
  if (__builtin_expect(!g_percpu, 0) && !percpu_decided()) percpu_decide();
  if (n <= 2) {  // one or two single pops cost less than a batch section
    for (size_t i = 0; i < n; i++) {
      if (!(out[i] = alloc_class(cls))) {
        free_bulk_class(cls, out, i);
        return 0;
      }
    }
    return n;
  }
  size_t got = g_percpu ? percpu_take(cls, out, n) : 0;
  if (got == n) return hand_out_bulk(cls, n, out);
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
  return hand_out_bulk(cls, n, out);
}

void free_bulk_class(unsigned cls, void* const* ptrs, size_t n) {
  for (size_t i = 0; i < n; i++) track_free(ptrs[i], class_size(cls));
  put_back_bulk(cls, ptrs, n);
}

size_t alloc_bulk(size_t size, size_t n, void** out) {
  if (n == 0) return 0;
  if (size <= kMaxSmall) return alloc_bulk_class(size_to_class(size), n, out);
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

void free_bulk(size_t n, void* const* ptrs) {
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
  if (c) obj_cache_destroy(c);
}

namespace {
// p is an object of cache c (reported otherwise). *slab holds the last slab seen, so
// neighbours in a bulk free skip the page-map lookup.
bool belongs(const ObjCache* c, const void* p, SlabRange* slab) {
  if (slab->holds(p)) return true;
  uintptr_t e = PageMap::entry(p);
  if (Span* s = (e & PageMap::kClassMask) == c->cls ? slab_of(p, e) : nullptr) {
    *slab = SlabRange(s);
    return true;
  }
  report_bad_free(p, "uslab_cache_free of an object not from this cache", c->cls);
  return false;
}
}  // namespace

void cache_free(ObjCache* c, void* p) {
  SlabRange slab;
  if (!p || !belongs(c, p, &slab)) return;
  if (prof::g_cache_samples) prof::on_cache_free(p);
  obj_cache_on_free(c, p);
  free_object(p, c->cls);
}

size_t cache_alloc_bulk(ObjCache* c, size_t n, void** out) {
  if (alloc_bulk_class(c->cls, n, out) != n || n == 0) return 0;
  if (c->flags & (kCacheZero | kCachePoison))
    for (size_t i = 0; i < n; i++) obj_cache_on_alloc(c, out[i]);
  return n;
}

void cache_free_bulk(ObjCache* c, size_t n, void* const* ptrs) {
  // Runs of valid objects are freed in place; NULLs and foreign pointers (reported)
  // end a run. As in free_bulk, a freed run's slab is not trusted afterwards.
  SlabRange slab;
  size_t run = 0;
  const bool poison = c->flags & kCachePoison;
  for (size_t i = 0; i < n; i++) {
    if (!poison) {  // as in free_bulk: neighbours in the slab need nothing more
      i = scan_slab(slab, ptrs, i, n);
      if (i == n) break;
    }
    void* p = ptrs[i];
    if (p && belongs(c, p, &slab)) {
      if (poison) obj_cache_on_free(c, p);
      continue;
    }
    free_run(c->cls, ptrs + run, i - run);
    run = i + 1;
    slab = SlabRange();
  }
  free_run(c->cls, ptrs + run, n - run);
}

void flush_thread_cache() { thread_cache_flush_mine(); }

size_t trim() {
  config_init();
  return decay_release_all();
}

void decay_now() {
  config_init();
  thread_cache_flush_mine();  // the caller's share, as a tick it runs takes it (decay.h)
  decay_tick_now();
}

uint64_t decay_ms() {
  config_init();
  return __atomic_load_n(&g_config.decay_ms, __ATOMIC_RELAXED);
}

void set_decay_ms(uint64_t ms) {
  config_init();
  __atomic_store_n(&g_config.decay_ms, ms < kDecayNever ? ms : kDecayNever, __ATOMIC_RELAXED);
  decay_postpone_tick();  // the next tick on the new schedule
}

bool background_configured() {
  config_init();
  return g_config.background_thread != Config::Background::kOff;
}

void set_background(bool on) { background_enable(on); }

namespace {

// Objects of each class held in the caches in front of the slabs (racy sums).
struct CachedCounts {
  size_t thread[kMaxClasses];
  size_t ncaches;
  PerCpuClassStats cpu[kMaxClasses];
  DepotStats depot[kMaxClasses];
  uint64_t hits[kMaxClasses];  // of the CPU sheaves and the thread caches

  CachedCounts() {
    thread_cache_counts(thread, &ncaches);
    percpu_class_stats(cpu);
    thread_cache_hits(hits);
    for (unsigned c = 1; c < kMaxClasses; c++) {
      depot[c] = depot_stats(c);
      hits[c] += cpu[c].hits;
    }
  }
  size_t total(unsigned c) const { return thread[c] + cpu[c].cpu_objects + depot[c].objects; }
};

}  // namespace

Stats stats() {
  Stats st{};
  CachedCounts cached;
  RemoteNodeStats rs;
  percpu_remote_stats(&rs);
  st.thread_caches = cached.ncaches;
  for (unsigned c = 1; c < kMaxClasses; c++) {
    CentralStats cs = central_stats(c);
    size_t live = cs.objects - cs.free_objects;
    const size_t held = cached.total(c) + rs.pending_by_class[c];  // free, in caches and buffers
    live = live > held ? live - held : 0;
    st.small_slab_bytes += cs.slabs * class_info(c).slab_pages * kPageSize;
    st.small_allocated += live * class_size(c);
    st.thread_cached += cached.thread[c] * class_size(c);
    st.cpu_cached += (cached.cpu[c].cpu_objects + rs.pending_by_class[c]) * class_size(c);
    st.depot_cached += cached.depot[c].objects * class_size(c);
  }
  PageHeapStats ph = page_heap_stats();
  st.huge_count = g_huge_count.load(std::memory_order_relaxed);
  st.huge_allocated = g_huge_bytes.load(std::memory_order_relaxed);
  st.mapped = segment_mapped_bytes();
  // Descriptors and pools, the shards' arrays made resident, the CPUs' header pages.
  st.metadata = g_meta_arena.mapped() + g_paged_pool_bytes.load(std::memory_order_relaxed) +
                prepared_shard_bytes() + percpu_header_bytes();
  st.large_allocated = ph.large_bytes;
  st.free_bytes = ph.free_bytes;
  st.dirty_bytes = ph.dirty_bytes;
  st.purged_bytes = ph.purged_bytes;
  st.huge_segments = ph.huge_segments;
  st.allocated = st.small_allocated + st.large_allocated + st.huge_allocated;
  st.active = st.small_slab_bytes + st.large_allocated + st.huge_allocated;
  st.resident = st.mapped - (st.free_bytes - st.dirty_bytes) + st.metadata;
  st.nodes = node_count();
  for (unsigned n = 0; n < kTopoMaxNodes; n++) st.remote_node_frees += rs.received[n];
  st.remote_node_pending = rs.pending;
  switch (background_state()) {  // as uslab.h numbers them
    case BackgroundState::kIdle:
      st.background = 0;
      break;
    case BackgroundState::kWanted:
    case BackgroundState::kStarting:
      st.background = 1;
      break;
    case BackgroundState::kRunning:
      st.background = 2;
      break;
    case BackgroundState::kFailed:
      st.background = 3;
      break;
  }
  return st;
}

int mode() {
  percpu_decide();
  return g_percpu ? static_cast<int>(rseq_mode()) : 0;
}

unsigned cpus_in_use() { return g_percpu ? percpu_stats().cpus_used : 0; }

void stats_print(void (*write)(void*, const char*), void* opaque) {
  char line[256];
  auto out = [&](const char* fmt, auto... args) {
    os::format(line, sizeof line, fmt, args...);
    write(opaque, line);
  };
  config_init();
  percpu_decide();  // a process that never allocated still shows its mode
  CachedCounts cached;
  if (g_percpu) {
    PerCpuStats pc = percpu_stats();
    out("uslab stats (mode: %s; %u of %u CPUs used, %zu bytes of capacity per CPU, "
        "%zu thread caches)\n",
        rseq_mode_name(rseq_mode()), pc.cpus_used, pc.cpus_possible, pc.budget, cached.ncaches);
    out("sheaf capacity: %zu grows, %zu steals, %zu CPU drains\n", (size_t)pc.grows,
        (size_t)pc.steals, (size_t)pc.drains);
  } else {
    out("uslab stats (mode: per-thread caches (%s); %zu thread caches)\n",
        g_config.poison   ? "none: poison=true sends every object through its slab"
        : g_config.percpu ? "rseq unavailable"
                          : "forced by percpu=false",
        cached.ncaches);
  }
  if (g_config.poison || g_config.guard)
    out("checks: poison %s (freed small objects, checked when allocated again), guard pages "
        "%s (around large objects)\n",
        g_config.poison ? "on" : "off", g_config.guard ? "on" : "off");
  const Topology& topo = topology_in_use();
  out("topology: %u possible CPUs, %u NUMA node%s%s, %u shards of %u CPUs, L2 %zu KiB (%s)\n",
      topo.cpus_possible, topo.nodes, topo.nodes == 1 ? "" : "s",
      topo.synthetic ? " (synthetic)" : "", shard_count(), shard_cpus(),
      static_cast<size_t>(topo.l2.bytes >> 10), topo.source);
  if (topo.nodes > 1) {
    RemoteNodeStats rs;
    percpu_remote_stats(&rs);
    for (unsigned n = 0; n < topo.nodes; n++) {
      unsigned first;
      out("node %u: %u CPUs, %u shards, %zu remote-node frees received\n", n, topo.cpus_of_node(n),
          shards_of_node(n, &first), static_cast<size_t>(rs.received[n]));
    }
    out("remote-node buffers: %zu objects pending, %zu flushes\n", rs.pending,
        static_cast<size_t>(rs.flushes));
  }
  size_t deferred[kMaxClasses];
  DeferredStats d = deferred_stats(deferred);
  out("%5s %7s %6s %9s %9s %8s %8s %8s %9s %11s %9s %9s %9s %9s %9s %9s %9s\n", "class", "size",
      "slabs", "objects", "active", "cpu", "depot", "thread", "free", "hits", "refills", "drains",
      "depot-hit", "slab-out", "slab-in", "deferred", "remote");
  for (unsigned c = 1; c < kNumClasses; c++) {
    CentralStats cs = central_stats(c);
    if (cs.slabs == 0 && cs.batches_out == 0) continue;
    size_t used = cs.objects - cs.free_objects;
    size_t active = used > cached.total(c) ? used - cached.total(c) : 0;
    const DepotStats& dp = cached.depot[c];
    out("%5u %7u %6zu %9zu %9zu %8zu %8zu %8zu %9zu %11zu %9zu %9zu %9zu %9zu %9zu %9zu %9zu\n", c,
        (unsigned)class_size(c), cs.slabs, cs.objects, active, cached.cpu[c].cpu_objects,
        dp.objects, cached.thread[c], cs.free_objects, (size_t)cached.hits[c],
        (size_t)cached.cpu[c].refills, (size_t)cached.cpu[c].drains, (size_t)dp.hits,
        (size_t)cs.batches_out, (size_t)cs.batches_in, deferred[c],
        (size_t)(dp.remote + cs.remote));
  }
  struct CacheLines {
    decltype(out)& print;
    const CachedCounts& cached;
    const size_t* deferred;
  } lines{out, cached, deferred};
  obj_cache_for_each(
      [](const ObjCache* c, void* arg) {
        auto& l = *static_cast<CacheLines*>(arg);
        CentralStats cs = central_stats(c->cls);
        size_t used = cs.objects - cs.free_objects;
        size_t active = used > l.cached.total(c->cls) ? used - l.cached.total(c->cls) : 0;
        l.print(
            "cache %-24s size %6u align %4u slabs %6zu objects %9zu active %9zu deferred %zu%s\n",
            c->name, c->size, c->align, cs.slabs, cs.objects, active, l.deferred[c->cls],
            c->retired ? " (destroyed)" : "");
      },
      &lines);
  Stats st = stats();
  out("cached: %zu bytes in CPU sheaves, %zu in depots, %zu in thread caches\n", st.cpu_cached,
      st.depot_cached, st.thread_cached);
  out("small: %zu bytes in slabs, %zu allocated\n", st.small_slab_bytes, st.small_allocated);
  out("large: %zu bytes allocated; huge: %zu objects, %zu bytes, %zu bytes of freed ones "
      "kept for reuse\n",
      st.large_allocated, st.huge_count, st.huge_allocated, huge_cache_bytes());
  out("pages: %zu mapped, %zu resident (estimate), %zu free (%zu dirty), %zu returned to the "
      "OS, %zu metadata; %zu segments advised huge pages (THP %s)\n",
      st.mapped, st.resident, st.free_bytes, st.dirty_bytes, st.purged_bytes, st.metadata,
      st.huge_segments,
      !g_config.thp                             ? "off: thp=false"
      : os::thp_mode() == os::ThpMode::kNever   ? "off: the system's setting is never"
      : os::thp_mode() == os::ThpMode::kMadvise ? "on, system setting madvise"
                                                : "on, system setting always");
  out("deferred: %zu objects pending (%zu bytes in %zu sealed blocks, %zu chained), "
      "%zu freed in %zu blocks, %zu grace periods (%s)\n",
      d.objects_pending, d.bytes_waiting, d.blocks, d.emergency_objects, (size_t)d.objects_freed,
      (size_t)d.blocks_freed, (size_t)d.grace_periods,
      d.membarrier ? "membarrier" : "reader fences");
  background_describe(line, sizeof line);
  write(opaque, line);
  memory_limit_describe(line, sizeof line, false);
  write(opaque, line);
  if (size_t n = foreign::forwarded())
    out("foreign: %zu frees of glibc's blocks (RTLD_DEEPBIND libraries, launchers) forwarded "
        "to glibc\n",
        n);
  if (prof::enabled()) {
    prof::Stats ps = prof::stats();
    out("prof: %s, a sample every %zu bytes on average: %zu samples, %zu live (%zu bytes "
        "estimated live, %zu at the peak), %zu stacks, %zu profiles written; %zu bytes of "
        "its own\n",
        prof::active() ? "active" : "inactive", static_cast<size_t>(g_sample_bytes),
        static_cast<size_t>(ps.samples), ps.live_samples, static_cast<size_t>(ps.live_bytes),
        static_cast<size_t>(ps.peak_bytes), ps.stacks, static_cast<size_t>(ps.dumps), ps.mapped);
  }
}

namespace {
constinit Mutex topology_print_lock_;
USLAB_LOCK_ONE(kTopologyPrint, topology_print_lock_);
}  // namespace

void topology_print(void (*write)(void*, const char*), void* opaque) {
  // Two records of 4 KiB each: static, behind a lock, rather than on the caller's stack.
  USLAB_LARGE_ZERO static Topology probe, hw;
  USLAB_LARGE_ZERO static char text[8192];
  LockGuard g(topology_print_lock_);
  auto out = [&](const char* fmt, auto... args) {
    os::format(text, sizeof text, fmt, args...);
    write(opaque, text);
  };
  auto describe = [&](const Topology& t) {
    topology_format(t, text, sizeof text);
    write(opaque, text);
  };
  topology_probe(&probe, true);
  out("The probe (sysfs, sched_getaffinity, cpuid) sees:\n");
  describe(probe);
  char why[160];
  if (topology_hwloc(&hw, why, sizeof why)) {
    out("hwloc sees:\n");
    describe(hw);
    char diff[512];
    if (topology_diff(probe, hw, diff, sizeof diff))
      out("The providers differ: %s\n", diff);
    else
      out("The providers agree.\n");
  } else {
    out("hwloc: not available (%s)\n", why);
  }
  config_init();
  percpu_decide();
  const Topology& t = topology_in_use();
  const char* how = g_config.topology == TopologySource::kHwloc   ? "topology=hwloc"
                    : g_config.topology == TopologySource::kProbe ? "topology=probe"
                                                                  : "topology=auto";
  out("uslab uses (%s):\n", how);
  describe(t);
  out("  %u shards of %u CPUs:", shard_count(), shard_cpus());
  for (unsigned n = 0; n < t.nodes; n++) {
    unsigned first, count = shards_of_node(n, &first);
    if (count) out(" node %u: %u (from %u)%s", n, count, first, n + 1 < t.nodes ? ";" : "");
  }
  NodeBinding b = node_binding();
  out("\n  memory bound to nodes: %s\n",
      b == NodeBinding::kBound       ? "yes (mbind, preferred)"
      : b == NodeBinding::kSynthetic ? "no (synthetic nodes)"
      : b == NodeBinding::kTaskPolicy
          ? "no (the process has a memory policy: the kernel applies it)"
          : "no (one node)");
  if (g_percpu) {
    PerCpuStats pc = percpu_stats();
    out("  mode: %s; sheaves for CPU ids below %u; %zu bytes of sheaf capacity per CPU\n",
        rseq_mode_name(rseq_mode()), pc.cpus_possible, pc.budget);
  } else {
    out("  mode: per-thread caches\n");
  }
  write(opaque, "  ");
  memory_limit_describe(text, sizeof text, true);
  write(opaque, text);
}

namespace {
// Where the report at exit goes: a duplicate of stderr taken at start when a report
// was asked for, since programs may close stderr before exit (coreutils do).
int g_report_fd = 2;
}  // namespace

void stats_print_stderr() {
  stats_print(
      [](void*, const char* t) {
        size_t n = 0;
        while (t[n]) n++;
        os::write_fd(g_report_fd, t, n);
      },
      nullptr);
}

USLAB_STARTUP_TEXT void init() {
  config_init();
  // hwloc allocates: only from here, the constructor, never inside an allocation.
  if (topology_adopt_hwloc()) percpu_nodes_changed();
  if (g_config.stats_at_exit && g_report_fd == 2) {
    int fd = os::dup_high(2);
    if (fd >= 0) g_report_fd = fd;
  }
  background_init();
  prof::init();
}

USLAB_STARTUP_TEXT bool stats_at_exit() {
  config_init();
  return g_config.stats_at_exit;
}

void die(const char* message) { os::fatal("uslab: %s\n", message); }

// fork takes every lock of the lock table (core/platform/lock_table.h) in rank order,
// unless the forking thread holds or is taking one (t_locks_held: fork from a signal
// handler that interrupted a slow path, glibc tst-mallocfork2). Then it takes none: a
// lock of a lower rank may be held by another thread (the background thread's tick,
// say) that waits for the one this thread holds. That child finds the heap as the
// fork found it, other threads' operations and its own interrupted one half done,
// and may only make async-signal-safe calls until it execs (POSIX's rule for any
// multi-threaded fork); every lock is reset there, and nothing that walks shared
// lists runs.
namespace {

bool g_fork_interrupted;
// How many locks of each set prepare took: a set's count may grow while a lock of a
// higher rank is still free (more shards), and parent must release just those.
uint32_t g_fork_taken[kMaxLockSets];

// Calls fn on every registered lock, in rank order (reverse: the last first); the
// counts recorded by prepare (taken), or the sets' counts now.
template <class Fn>
void for_each_lock(bool reverse, bool taken, Fn fn) {
  uint32_t n;
  const LockSet* const* sets = lock_sets(&n);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t s = reverse ? n - 1 - k : k;
    uint32_t count = taken ? g_fork_taken[s] : sets[s]->count();
    if (!taken) g_fork_taken[s] = count;
    for (uint32_t i = 0; i < count; i++) fn(sets[s]->at(reverse ? count - 1 - i : i));
  }
}

}  // namespace

void fork_prepare() {
  g_fork_interrupted = t_locks_held != 0;
  if (g_fork_interrupted) return;
  for_each_lock(false, false, [](Mutex* m) { m->lock(); });
  deferred_fork_prepare();
}

void fork_parent() {
  if (g_fork_interrupted) return;
  for_each_lock(true, true, [](Mutex* m) { m->unlock(); });
}

void fork_child() {
  forget_current_tid();
  // After an interrupted fork, every lock there is now (prepare recorded nothing).
  for_each_lock(false, !g_fork_interrupted, [](Mutex* m) { m->reset_after_fork(); });
  lock_order_reset();
  deferred_fork_child(!g_fork_interrupted);
  background_fork_child();
  if (g_fork_interrupted) return;
  t_locks_held = 0;  // the locks prepare took were reset above
  thread_cache_after_fork_child();
}

}  // namespace uslab::heap
