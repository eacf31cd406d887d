// core/heap/heap.cc — slow paths of the Heap facade: large and huge objects, aligned
// and zeroed allocation, realloc, pointer validation (pointers with no uslab span go
// to core/foreign/), the heap profiler's marks on sampled spans (core/prof), trim,
// the decay and background settings. Bulk allocation and object caches: bulk.cc;
// statistics: core/stats/; the library's start and fork: core/lifecycle/.
// Locking: none of its own; see heap.h and the allocator layer.
#include "core/heap/heap.h"

#include <cerrno>
#include <cstring>

#include "core/alloc/first_touch.h"
#include "core/foreign/foreign.h"
#include "core/guard/guard.h"
#include "core/prof/prof.h"

namespace uslab::heap {

std::atomic<size_t> g_huge_count{0};
std::atomic<size_t> g_huge_bytes{0};

namespace {

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

// Whose sample point (sampler.h) a large allocation of `bytes` holds, if any: the
// large allocations' countdown decides once for both clients.
enum class LargePick { kNone, kProfiler, kGuard };
LargePick large_pick(size_t bytes) {
  if (!sample_large(bytes)) return LargePick::kNone;
  return sample_pick() == SampleClient::kProfiler ? LargePick::kProfiler : LargePick::kGuard;
}

// The most pages a large object of npages may take from the page heap; above, it gets
// a mapping of its own (a huge object). Where every mapping counts against a limit
// (os::mappings_counted: strict overcommit, RLIMIT_AS), so do a segment's pages left
// beside its large objects, free or not: a segment holds one object of half its size
// and the other half counts too. There an object above an eighth of a segment is
// huge, which leaves at most that share over.
constexpr size_t kCountedLargeMaxPages = kPagesPerSegment / 8;
size_t large_max_pages(size_t npages) {
  return npages <= kCountedLargeMaxPages || !os::mappings_counted() ? PageHeap::kMaxPages
                                                                    : kCountedLargeMaxPages;
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
  const LargePick pick =
      __builtin_expect(g_sampling, 0) ? large_pick(npages << kPageShift) : LargePick::kNone;
  if (__builtin_expect(pick == LargePick::kGuard, 0))
    if (void* p = guard::alloc_large(size, align)) {  // else allocated as usual
      if (zeroed) *zeroed = false;
      track_alloc(p, (size + 15) & ~size_t{15}, false);
      return p;
    }
  // With the guard option every large object gets a mapping of its own, between
  // inaccessible pages (segment_create_huge).
  if (!g_config.guard && npages + align_pages - 1 <= large_max_pages(npages + align_pages - 1)) {
    bool z;
    Span* s = g_page_heap[current_shard()].alloc(npages, align_pages, SpanKind::kLarge, &z);
    if (!s) return os::fail_nomem();
    if (zeroed) *zeroed = z;
    if (__builtin_expect(pick == LargePick::kProfiler, 0)) prof::on_large_sampled(s);
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
    // kept every smaller block it left resident beside the new one, and peaked well
    // above glibc).
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
    // The whole mapping, header page too: one policy keeps it one VMA, which mremap
    // needs to resize it. Bound on the object alone, every resize on a multi-node
    // machine failed, and a failed mremap to a fixed address has already unmapped
    // its destination, which the clean-up then unmapped again: by then another
    // thread's new segment (segment_resize_huge).
    bind_to_shard_node(desc->segment, desc->segment->mapped_bytes, shard);
  }
  g_huge_count.fetch_add(1, std::memory_order_relaxed);
  g_huge_bytes.fetch_add(desc->bytes(), std::memory_order_relaxed);
  if (zeroed) *zeroed = fresh;
  if (__builtin_expect(pick == LargePick::kProfiler, 0)) prof::on_large_sampled(desc);
  track_alloc(desc->start, desc->bytes(), fresh);
  return desc->start;
}

void free_slow(void* p, uintptr_t e) {
  if (p == nullptr) return;
  config_init();
  unsigned cls = e & PageMap::kClassMask;
  if (cls) {
    // The fast path takes every valid object of a size class unless its segment
    // header disagrees with the page map; cache objects come here.
    const Span* s = slab_of(p, e);
    if (cls < kNumClasses && s)
      return report_bad_free(p, "heap corruption (segment header overwritten) at free", cls);
    ObjCache* c = obj_cache_of(cls);
    if (!c || !s) return report_bad_free(p, "free of invalid pointer", cls);
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
  if (Span* g = guard::span_of(e)) return guard::free(p, g);
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
  if (unsigned cls = aligned_class(size, align))
    return alloc_class(cls, aligned_request(size, align));
  return alloc_large(size, align > kPageSize ? align : kPageSize, nullptr);
}

void* alloc_zeroed(size_t size) {
  if (size <= kMaxSmall) {
    void* p = alloc_class(size_to_class(size), size);
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
  if (Span* g = guard::span_of(e)) return guard::live_size(p, g, "malloc_usable_size");
  return e ? 0 : foreign::usable_size(p);
}

namespace {

// Whether an object of `size` bytes is huge (a mapping of its own; alloc_large).
bool huge_size(size_t size) { return pages_for(size) > large_max_pages(pages_for(size)); }

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
  if (__builtin_expect(g_sampling, 0) && large_pick(l->bytes()) == LargePick::kProfiler)
    prof::on_large_sampled(l);
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
  if (Span* g = guard::span_of(e)) return guard::live_size(p, g, "resize in place");
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
  } else if (Span* g = guard::span_of(e)) {
    // A guarded object moves out (its slot goes to the quarantine); its class is
    // not kept, so a realloc that fits it would otherwise stay guarded for good.
    old_size = guard::live_size(p, g, "realloc");
    if (!old_size) return nullptr;
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

void* realloc_aligned(void* p, size_t size, size_t align) {
  // malloc's memory of at least align bytes is aligned to it (alloc_aligned).
  if (align <= 16) return realloc(p, size > align ? size : align);
  if (reinterpret_cast<uintptr_t>(p) % align == 0 && resize_in_place(p, size) >= size) return p;
  const size_t old = usable_size(p);
  void* q = alloc_aligned(size, align);
  if (!q) return nullptr;
  memcpy(q, p, old < size ? old : size);
  free(p);
  return q;
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

void die(const char* message) { os::fatal("uslab: %s\n", message); }
}  // namespace uslab::heap
