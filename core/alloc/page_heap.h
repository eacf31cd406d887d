// core/alloc/page_heap.h — per-shard heaps of pages for slabs and large objects.
//
// Owns: one PageHeap per shard (shard.h), each with its own normal segments
// (Segment::heap) and Span descriptors: a shard's new slabs and large objects come
// from its heap, and a span goes back to the heap of its segment from any CPU (one
// heap for all CPUs made every slab carve and release of every CPU wait on one lock).
// Each heap keeps the free spans of its segments in free lists by length
// (one list per length a segment can hold, 1 … 511 pages, with a bitmap of the
// non-empty ones: the shortest span that fits is found in a few words, where a
// best-fit scan of one list grows with what was freed), one set for resident spans,
// taken first, and one
// for clean ones; coalescing of a freed span with its free neighbours of the same
// state in the same segment; the decay clock that returns free pages to the OS
// (MADV_DONTNEED) once they have been free for decay_purge_age_ms (decay.h: a few
// ticks short of decay_ms, left to the caches above), and unmaps segments that
// are wholly free; the same clock returns the pages of its descriptor pool
// (paged_pool.h) left empty. A heap that must map a segment while it holds more
// dirty free pages than its allowance (kDirtyShare) purges the ones too short for
// the request first: holes between live slabs that the request shows it cannot use
// (they would stay resident beside the new segment); so do the heaps it asked
// for a span in vain, down to a segment's worth. A heap borrows a span from heaps of
// its own node before it maps a segment, and from any heap when no segment can be
// mapped (RLIMIT_AS): another node's memory beats ENOMEM.
//
// Locking: each heap's Mutex (lock()) guards its free lists, every free span of its
// segments, the kind and first/last PageMap entries of their spans, and their
// Segment::used_pages. No thread holds two heaps' locks. free_pages_ is also read
// without the lock, by other heaps deciding whether to borrow, and with dirty_pages_
// by the memory limit's estimate (both stored atomically; a stale value only skips
// or tries a heap, or moves the estimate by what changed meanwhile). It also guards
// the heap's descriptor pool (span descriptors and the external bitmaps of slabs of
// many objects, which go back with their slab). Callers never hold a central-list
// lock while calling in (order: central → page heap → MetaArena → PageMap).
//
// Transparent huge pages (the `thp` option, where the system's setting is not
// "never") only where the program touches what it allocates: a huge page makes its
// whole 2 MiB resident, and a program that writes the first bytes of big objects (a
// buffer sized for the worst case) would hold memory it never touched (`uslab bench
// drift`). So a segment is advised MADV_HUGEPAGE when it is dense: all its pages in use
// (all but fewer than kThpFullSlack), and at least kThpDenseEighths/8 of those in use
// before the span that filled it resident (mincore; a segment found sparse is
// measured again a decay tick later at the earliest). Those pages are 4 KiB ones
// already, which khugepaged would collapse at its own pace (16 MiB every 10 s by
// default): the whole 2 MiB blocks before that last span are queued for MADV_COLLAPSE
// (not the span's own: the program may never touch all of it). The background thread
// collapses them when it wakes once they have stayed queued a whole tick, and an
// explicit decay call (arena.<i>.decay) at once; never a malloc: MADV_COLLAPSE takes
// milliseconds for 2 MiB (copy, compaction, the mmap lock), a stall no allocation
// should pay, and a heap that fills and empties within a tick (freed, purged and
// split again) gains nothing from it.
// Without the background thread khugepaged collapses the advised segments at its own
// pace. A segment being collapsed is marked so that no purge unmaps it meanwhile, and
// a purge of an advised segment drops it from the queue. That measure also sets
// the heap's eagerness, apart for spans of objects smaller than an OS page and for
// the rest (ObjectSize): while the last segment that a span of the same size filled
// was touched densely, a heap of kThpMinSegments segments or more advises the
// segments it maps for that size when it makes them
// (their pages then fault in 2 MiB at a time), except every kThpProbeEvery-th, left
// unadvised to measure again, and except segments made for a span of
// kThpEagerMaxPages or more, which do not tile a segment's 511 pages (three 1 MiB
// blocks leave 127 pages that a huge page would make resident). The state is kept per
// ObjectSize because one state for both advised segments for objects written only
// at their start on the strength of measures of smaller objects written whole.
// A purge in an advised segment first advises it MADV_NOHUGEPAGE: the returned pages
// split off their huge page, and khugepaged (which with max_ptes_none = 511 collapses a
// range holding a single page) cannot fill the range back to 2 MiB: that refill is the
// RSS blow-up of THP. So the decay clock leaves the free pages of an advised segment
// alone while at most 1/kThpKeepFreeShare of it is free (Temeraire's rule: a huge page
// mostly in use is worth more whole than the few pages a return would save): a
// long-running heap that churns would otherwise lose its huge pages one segment at a
// time, each time a hole stayed free for decay_ms. Only when memory is short do they
// go: a trim (malloc_trim, arena.<i>.purge) or the memory limit; and once the segment
// is sparser, at the next purge. A heap that must grow past its dirty allowance
// (purge_short) leaves them too: a churning heap that grows while its holes wait
// lost its huge pages, and its speed with them, when growth took them. Under the
// "always" setting, every segment not advised huge is advised
// MADV_NOHUGEPAGE when it is made, for the same reason (and so that the measure sees
// 4 KiB faults). Segments are advised whole: one VMA per segment at most.
//
// OS pages larger than uslab's (16 and 64 KiB kernels, os::page_size): a page is
// returned only with the whole OS page it lies on, when every page of that OS page is
// free. A purge takes a dirty span's whole OS pages and those it shares with free
// neighbours (a clean neighbour's pages read as zero either way); its pages on an OS
// page that a span in use shares stay dirty, split off (they are resident anyway,
// beside that span's), and are counted apart so that the background thread sleeps on
// them; they go when that span is freed, merged with them. The pages after a
// segment's header share its OS page: a request for a whole segment's pages takes
// such a run as one dirty span (merge_mixed), and a wholly free segment is unmapped
// whatever its spans' states. Huge pages are not used there (huge_page_fits_segment: 32 or 512
// MiB, larger than a segment), and under "always" every segment is advised off them.
//
// Invariants: a free span's page-map entries are set at its first and last page and
// null inside; an allocated span's are set at its first and last page (slabs set the
// pages between themselves). Pages of a clean (dirty == 0) free span read as zero.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/decay.h"
#include "core/alloc/meta_arena.h"
#include "core/alloc/paged_pool.h"
#include "core/alloc/segment.h"
#include "core/alloc/shard.h"

namespace uslab {

// What a span's objects are to its pages: smaller than an OS page (every page holds
// an object's start, so a program that writes its objects at all writes every page),
// or a page and more (a program that writes only the start of each, as one that sizes
// its buffers for the worst case does, leaves pages untouched). The eagerness (above)
// is kept apart for each.
enum class ObjectSize : uint8_t { kSubPage = 0, kPageOrMore = 1 };

struct PageHeapStats {
  size_t segments;
  size_t free_bytes;     // in free spans
  size_t dirty_bytes;    // free but possibly resident
  size_t large_bytes;    // in large spans handed out
  size_t purged_bytes;   // returned to the OS so far (cumulative)
  size_t huge_segments;  // advised MADV_HUGEPAGE
  size_t thp_splits;     // times a return took a segment off huge pages (cumulative)
  size_t thp_collapses;  // segments collapsed into huge pages (MADV_COLLAPSE, cumulative)
  size_t thp_kept_bytes;  // free pages the last decay purge left inside huge pages

  PageHeapStats& operator+=(const PageHeapStats& o) {
    segments += o.segments;
    huge_segments += o.huge_segments;
    thp_splits += o.thp_splits;
    thp_collapses += o.thp_collapses;
    thp_kept_bytes += o.thp_kept_bytes;
    free_bytes += o.free_bytes;
    dirty_bytes += o.dirty_bytes;
    large_bytes += o.large_bytes;
    purged_bytes += o.purged_bytes;
    return *this;
  }
};

// Cache-line aligned: one heap's counters must not share a line with the next's lock.
class alignas(64) PageHeap {
 public:
  // Transparent huge pages (above): whether they are in use (the option, the
  // system's setting, and a huge page no larger than a segment: not with 16 or
  // 64 KiB OS pages, whose huge pages are 32 or 512 MiB).
  static bool thp_enabled();
  static constexpr size_t kMaxPages = kPagesPerSegment - 1;  // usable pages per segment
  static constexpr size_t kStealReserve = 64;                // 512 KiB
  // A segment counts as full with fewer free pages than this: slabs of 2-7 pages
  // leave 1-3 of its 511 (slabs of 3 KiB objects: 170 of 3 pages), which a heap of one
  // size never fills.
  static constexpr size_t kThpFullSlack = 4;
  static constexpr size_t kThpMinSegments = 4;               // 16 MiB
  static constexpr size_t kThpEagerMaxPages = 64;            // 512 KiB
  static constexpr size_t kThpProbeEvery = 8;                // eager segments: one in 8 measures
  static constexpr size_t kThpDenseEighths = 7;              // resident share that counts as dense
  // A huge segment keeps its free pages through decay purges while at most this
  // share of it is free (above).
  static constexpr size_t kThpKeepFreeShare = 8;
  // Dirty free pages a heap keeps when it must grow: a segment's worth, or 1/128 of
  // its pages in use. A larger share (1/8, jemalloc 3's lg_dirty_mult) kept holes a
  // sparse heap will not reuse resident at its peak.
  static constexpr size_t kDirtyShare = 128;

  // A span of `npages` whose first page is aligned to `align_pages` (a power of two),
  // marked `kind` (kSlab or kLarge). *zeroed tells whether its pages read as zero.
  // nullptr when memory cannot be had. When this heap has no free span that fits,
  // its shard's central lists give back their spare empty slabs (central.h, those
  // whose lock is free), then one of another heap's free spans is taken (it stays
  // that heap's, and is freed there) before a new segment is mapped: pages freed on
  // one CPU serve the others.
  // Only heaps with a surplus (kStealReserve free pages beyond the request) that are
  // not busy are asked, so that CPUs do not take turns at each other's working set;
  // those asked that have no span that fits purge their dirty holes as a growing
  // heap does (purge_short). The memory limit is asked first (memory_limit.h: a hard
  // limit's refusal is a nullptr); the caller holds no lock.
  // `objects` says what the span will hold, for the eagerness (above): a segment
  // mapped for it is advised at once only while the last segment that a span of the
  // same size of objects filled was measured dense.
  Span* alloc(size_t npages, size_t align_pages, SpanKind kind, bool* zeroed,
              ObjectSize objects = ObjectSize::kPageOrMore);
  // Up to n more spans of npages pages from this heap's free spans under one lock
  // (the slabs of a refill after the first): no other heap, no new segment; how many.
  size_t alloc_more(size_t npages, SpanKind kind, Span** out, size_t n,
                    ObjectSize objects = ObjectSize::kPageOrMore);
  // Give back a slab or large span (its page-map interior must be cleared by then
  // for large spans; slab interiors are cleared here).
  void free(Span* s) { free(&s, 1); }
  // The external free bitmap of a slab of more than Span::kInlineBitmapBits objects
  // (a descriptor-sized record, zeroed); nullptr when the OS refuses memory. free()
  // drops it with its slab.
  uint64_t* alloc_bitmap();
  // The same for n spans of this heap under one lock (the empty slabs of a batch).
  void free(Span* const* spans, size_t n);
  // Large spans: grow in place into a free successor; true on success.
  bool try_grow(Span* s, size_t new_npages);
  // Large spans: give back the pages past new_npages.
  void shrink(Span* s, size_t new_npages);
  // Return free pages older than decay_purge_age_ms (all of them if `all`); bytes purged.
  size_t purge(bool all);
  // Collapses the oldest segment queued for it into huge pages (see above) if it was
  // queued by queued_by_ms (os::now_ms); true when one was collapsed.
  bool collapse_one(uint64_t queued_by_ms = UINT64_MAX);
  // Bytes of free pages that are not resident (purged or never touched), read without
  // the lock (the memory limit's estimate: a racy but never torn figure).
  size_t clean_free_bytes() const;
  // What the decay tick can still do here (decay.h): free dirty bytes in *dirty_bytes;
  // true when there is anything (those, wholly free segments, empty descriptor pages).
  bool backlog(size_t* dirty_bytes);

  PageHeapStats stats();
  Mutex& lock() { return lock_; }

  // The shards' heaps (g_page_heap; their locks are in the lock table), and a
  // private one (the unit tests'), whose lock is outside it.
  constexpr PageHeap() = default;
  constexpr explicit PageHeap(Mutex::Unranked u) : lock_(u) {}

 private:
  Span* alloc_locked(size_t npages, size_t align_pages, SpanKind kind, bool* zeroed, bool grow,
                     ObjectSize objects) USLAB_REQUIRES(lock_);
  void free_locked(Span* s, uint64_t now) USLAB_REQUIRES(lock_);
  // After a free, with no lock of this heap: tells the background thread (dirty_pages:
  // this heap's dirty pages now).
  static void after_free(size_t dirty_pages);
  // Merges free span s (on no list) with its free neighbours of the same state
  // (dirty or clean) and sets its bounds.
  // Merges free span s (on no list) with its free neighbours of its state; with
  // `any_state`, with every free neighbour, as long as there are, into a dirty span.
  void coalesce(Span* s, bool any_state = false) USLAB_REQUIRES(lock_);
  Span* find_free(size_t npages) USLAB_REQUIRES(lock_);
  static bool is_free(const Span* n);  // a neighbour from the page map
  Span* grow_heap(size_t want, ObjectSize objects) USLAB_REQUIRES(lock_);
  void insert_free(Span* s) USLAB_REQUIRES(lock_);
  void remove_free(Span* s) USLAB_REQUIRES(lock_);
  void set_bounds(Span* s) USLAB_REQUIRES(lock_);
  void clear_bounds(Span* s) USLAB_REQUIRES(lock_);
  Span* split_front(Span* s, size_t npages) USLAB_REQUIRES(lock_);
  void maybe_purge(uint64_t now) USLAB_REQUIRES(lock_);
  size_t purge_locked(uint64_t now, bool all) USLAB_REQUIRES(lock_);
  // Returns a dirty free span's whole OS pages to the OS (bytes in *bytes): the span
  // that is now clean (merged with its clean neighbours), or nullptr when none was
  // whole. Its pages on OS pages shared with a span in use stay dirty, split off
  // (their count in *kept).
  Span* purge_span(Span* s, size_t* bytes, size_t* kept = nullptr) USLAB_REQUIRES(lock_);
  // Before a segment is mapped for a request of npages: the dirty free spans shorter
  // than that could not serve it; purged, shortest first, down to the allowance
  // (kDirtyShare) of the heap that grows, or a segment's worth in another heap; but
  // those of a huge segment mostly in use (keeps_huge), which stay whole.
  void purge_short(size_t npages, bool growing) USLAB_REQUIRES(lock_);
  // Before a segment is mapped: a dirty span whose clean neighbours make it long
  // enough for npages is purged, which merges them; the merged span, or nullptr.
  Span* merge_mixed(size_t npages) USLAB_REQUIRES(lock_);
  Span* new_span_desc() USLAB_REQUIRES(lock_);
  // Transparent huge pages (above): the advice, and the count of a segment's pages
  // in use, which advises it once it is dense.
  // Whether seg's free pages stay through decay purges (above).
  bool keeps_huge(const Segment* seg) const USLAB_REQUIRES(lock_);
  void advise_huge(Segment* seg, bool huge) USLAB_REQUIRES(lock_);
  void unqueue_collapse(Segment* seg) USLAB_REQUIRES(lock_);
  // npages more of seg in use, from `fresh` on (not touched yet), for `objects`: a
  // measure this fill makes sets the eagerness of that size (above).
  void use_pages(Segment* seg, const char* fresh, size_t npages, ObjectSize objects)
      USLAB_REQUIRES(lock_);
  static constexpr unsigned kPrivate = ~0u;
  unsigned index() const;  // in g_page_heap, or kPrivate

  // Free spans by length (1 … kMaxPages; index 0 unused), and which lists are not
  // empty: the shortest span that fits is found in a few words.
  struct SpanLists {
    IntrusiveList<Span> by_length[kPagesPerSegment];
    uint64_t nonempty[kPagesPerSegment / 64] = {};
    void push(Span* s);
    void remove(Span* s);
    Span* shortest(size_t npages) const;  // of at least npages, or nullptr
  };

  Mutex lock_;
  PagedPool<Span> descs_;  // descriptors of this heap's spans (under lock_)
  // Resident (kDirty, kFreshHuge) and clean free spans apart, never merged
  // (coalesce): requests take resident pages first, as jemalloc takes its dirty
  // extents before retained ones. With one set, in which a freed span merged with
  // its clean neighbours and made them "dirty", new slabs faulted in purged pages
  // while resident ones sat free.
  SpanLists dirty_lists_ USLAB_GUARDED_BY(lock_), clean_lists_ USLAB_GUARDED_BY(lock_);
  size_t segments_ USLAB_GUARDED_BY(lock_) = 0;
  size_t huge_segments_ USLAB_GUARDED_BY(lock_) = 0;
  size_t thp_splits_ USLAB_GUARDED_BY(lock_) = 0;
  size_t thp_collapses_ USLAB_GUARDED_BY(lock_) = 0;
  size_t thp_kept_pages_ USLAB_GUARDED_BY(lock_) = 0;  // by the last purge
  // Dirty pages the last purge could not return: on OS pages a span in use shares.
  size_t shared_kept_pages_ USLAB_GUARDED_BY(lock_) = 0;
  // Segments measured dense, waiting for MADV_COLLAPSE, the oldest first; a dense
  // segment that finds the queue full is left to khugepaged.
  static constexpr size_t kCollapseQueue = 8;
  struct CollapseRange {
    Segment* seg;
    size_t bytes;  // from its base, whole 2 MiB blocks
    uint64_t queued_ms;
  };
  CollapseRange collapse_queue_[kCollapseQueue] USLAB_GUARDED_BY(lock_) = {};
  size_t collapse_queued_ USLAB_GUARDED_BY(lock_) = 0;
  std::atomic<bool> collapse_waiting_{false};  // collapse_queued_ > 0, read without the lock
  // Set once MADV_COLLAPSE is found missing (a kernel before 6.1): nothing is queued.
  static inline std::atomic<bool> collapse_unsupported_{false};
  size_t free_pages_ USLAB_GUARDED_BY(lock_) = 0;
  size_t dirty_pages_ USLAB_GUARDED_BY(lock_) = 0;
  size_t large_pages_ USLAB_GUARDED_BY(lock_) = 0;
  size_t purged_bytes_ USLAB_GUARDED_BY(lock_) = 0;
  uint64_t next_purge_ms_ USLAB_GUARDED_BY(lock_) = 0;
  // By ObjectSize: the last segment a span of that size filled was measured dense;
  // the segments mapped for that size while eager.
  bool thp_eager_[2] USLAB_GUARDED_BY(lock_) = {};
  size_t thp_made_eager_[2] USLAB_GUARDED_BY(lock_) = {};
};

extern PageHeap g_page_heap[kMaxShards];
extern MetaPool<Span> g_span_pool;  // descriptors of huge segments

// The central lists' reclaim of their spare empty slabs (central.h; a layer above,
// so it registers itself when it first carves a slab): PageHeap::alloc calls it with
// its shard before it takes another heap's pages or maps a segment; how many came back.
using SpareReclaim = size_t (*)(unsigned shard);
void page_heap_set_spare_reclaim(SpareReclaim fn);
// The heap whose segment holds span s (slab, large or free).
inline PageHeap& page_heap_of(const Span* s) { return g_page_heap[s->segment->heap]; }
// Give spans[0..n) back to their heaps, one lock per run of one heap's.
void page_heap_free_spans(Span* const* spans, size_t n);
// Every heap in use: purge (bytes purged), and the counters summed.
size_t page_heap_purge_all(bool all);
// Every heap in use collapses its oldest queued segment if queued by queued_by_ms
// (the background thread; an explicit decay tick).
void page_heap_collapse_all(uint64_t queued_by_ms);
PageHeapStats page_heap_stats();

}  // namespace uslab
