// core/alloc/segment.h — address space: segments, spans, and pointer → span lookup.
//
// Owns:
//  - Segment: 4 MiB of address space aligned to 4 MiB. Page 0 holds the header;
//    pages 1..511 are carved by the page heap into spans. A huge allocation (larger
//    than a segment's pages; every large one with the guard option) gets a segment
//    of its own, of any size, whose header page precedes it.
//  - Span: a run of pages — free (page heap), a slab of one size class (central
//    list), or one large object. Descriptors live in each page heap's paged pool
//    (paged_pool.h; huge segments': the metadata arena), never in the heap they
//    describe.
//  - PageMap: a two-level radix table, 8 KiB page → entry, over the user address
//    space (os::kUserAddressBits: 47 bits on x86-64, 48 on arm64). An entry is the
//    Span* of the page with the slab's size class in its low 7 bits, so free()
//    learns the class after two loads (as jemalloc's rtree packs szind). A null entry means "not an object start uslab knows", which is how
//    foreign pointers are recognised in O(1).
//
// Locking: PageMap lookups are lock-free: leaves (1 MiB each, lazily faulted) are
// published with a release store and never freed. Entries are written under the page
// heap lock (first/last pages of free and large spans) or by the thread that carves
// a slab before the slab is published (every page of the slab, with its class);
// fast-path readers only read entries of spans whose objects they hold. Leaves are
// created under map_lock when a segment is created, so later writes cannot fail. The
// root (1 MiB) is read-only zero pages, which strict overcommit does not charge, but
// for the pages whose entries were set (each committed under the lock first).
// A normal segment's entries fill one 4 KiB page of its leaf, which its destroyer
// (under the page heap lock) returns to the OS before the unmap: nobody else writes
// there until the address range is mapped again.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/ds/ds.h"

namespace uslab {

struct Segment;

// kGuarded: a slot of the guarded pool (core/guard/), never in a page heap.
enum class SpanKind : uint8_t { kFree = 0, kSlab = 1, kLarge = 2, kGuarded = 3 };

// 128-byte aligned: the page map packs the class into the low 7 bits of a Span*.
struct alignas(128) Span {
  // Free spans' pages: kClean read as zero and are not resident (purged, or never
  // touched); kDirty were written since; kFreshHuge were never touched in a segment
  // advised huge pages when it was made, so read as zero but are resident once any
  // page of their 2 MiB was. The last two are resident, and decay.
  static constexpr uint8_t kClean = 0, kDirty = 1, kFreshHuge = 2;
  static constexpr uint8_t kSampledLarge = 1, kSampledSmall = 2;

  // Read on the free fast path (first cache line).
  char* start;         // first byte of the span
  uint64_t div_inv;    // slabs: the class's exact-division inverse (size_class.h)
  uint32_t obj_size;   // slabs: class size
  uint8_t size_class;  // slabs: class; 0 otherwise
  SpanKind kind;
  uint8_t dirty;       // free spans: 0 (kClean), kDirty or kFreshHuge (below)
  uint8_t on_partial;  // slabs: linked on the central partial list
  uint32_t npages;
  uint32_t div_limit;  // slabs: capacity << tz (exact division, size_class.h)
  Segment* segment;
  Span* prev;  // free lists (page heap) or partial list (central)
  Span* next;
  // Slabs: objects free in the bitmap (1 bit = free), hint of the first word to scan.
  uint16_t capacity;
  uint16_t free_count;
  uint16_t scan_hint;
  uint16_t div_mask;     // slabs: 2^tz - 1
  uint64_t freed_at_ms;  // free spans: when their oldest dirty page became free (decay)
  uint32_t first_page;   // index in the segment (0 for huge segments)
  uint16_t shard;        // slabs: the shard that carved it (shard.h); fixed for its life
  uint8_t sampled;       // large and huge: the heap profiler tracks its object (core/prof):
                         // kSampledLarge, or kSampledSmall (a small object, obj_size bytes)
  // Slabs: the free bitmap (1 bit = free). Inline for up to kInlineBitmapBits
  // objects; a slab of more (the 8 and 16 B classes) keeps it in a 128-byte record
  // from its page heap's descriptor pool, whose address is the first inline word.
  // The descriptors are 128 bytes instead of 256 with a whole bitmap inline.
  uint64_t inline_bitmap[6];
  static constexpr size_t kInlineBitmapBits = sizeof inline_bitmap * 8;
  static bool external_bitmap(size_t objects) { return objects > kInlineBitmapBits; }
  uint64_t* bitmap() {
    return external_bitmap(capacity) ? reinterpret_cast<uint64_t*>(inline_bitmap[0])
                                     : inline_bitmap;
  }

  size_t bytes() const { return size_t{npages} << kPageShift; }
  // Slabs: whether p is the start of one of its objects.
  bool is_object(const void* p) const {
    return exact_start(static_cast<uint64_t>(static_cast<const char*>(p) - start), div_inv,
                       div_limit, div_mask);
  }
};
static_assert(sizeof(Span) == 128, "two cache lines; the page map needs 128-byte alignment");
static_assert(sizeof(Span) * 8 >= kMaxSlabObjects, "an external bitmap is one Span-sized record");

// A slab's geometry copied into locals: loops over many pointers (bulk frees,
// free_batch) keep it in registers, where the Span's fields would be reloaded after
// every store through an object or bitmap pointer (they may alias).
struct SlabRange {
  const char* start = nullptr;
  uint64_t bytes = 0, inv = 0, limit = 0, mask = 0;
  unsigned shift = 0;

  explicit SlabRange(const Span* s = nullptr) {
    if (!s) return;
    start = s->start;
    bytes = s->bytes();
    inv = s->div_inv;
    limit = s->div_limit;
    mask = s->div_mask;
    shift = static_cast<unsigned>(__builtin_ctzll(mask + 1));
  }
  // Whether p lies in the slab (any byte of it).
  bool spans(const void* p) const {
    return static_cast<uint64_t>(static_cast<const char*>(p) - start) < bytes;
  }
  // Whether p is the start of one of its objects.
  bool holds(const void* p) const {
    uint64_t off = static_cast<uint64_t>(static_cast<const char*>(p) - start);
    return off < bytes && exact_start(off, inv, limit, mask);
  }
  // The index of the object at p (p must be one).
  uint64_t index(const void* p) const {
    return static_cast<uint64_t>(static_cast<const char*>(p) - start) * inv >> shift;
  }
};

enum class SegmentKind : uint32_t { kNormal = 1, kHuge = 2 };

struct Segment {
  SegmentKind kind;
  uint32_t used_pages;  // normal: pages in non-free spans
  size_t mapped_bytes;  // the whole mapping, header included
  Span* huge_span;      // huge: the one large object
  uint32_t heap;        // normal: the shard whose page heap carves it (page_heap.h;
                        // PageHeap::kPrivate for a unit test's private heap); huge:
                        // the shard it was made for (its pages are on that node)
  bool huge;            // normal: advised MADV_HUGEPAGE (page_heap.h; its heap's lock)
  bool collapse_queued;  // normal: waits for MADV_COLLAPSE (page_heap.h; its heap's lock)
  bool collapsing;       // normal: MADV_COLLAPSE runs on it, not to be unmapped (ditto)
  uint64_t sparse_at_ms;  // normal: when a fill last measured it sparse (page_heap.h; ditto)
  // Normal: the size class of each page's slab, written with the page's page-map
  // entry when the slab is carved and left stale after it is freed (the entry is
  // the authority). Found by masking a pointer, a page's class costs one load where
  // the entry costs two; see page_class_of.
  // Relaxed atomics: a bad free may read a byte while its page is carved again.
  std::atomic<uint8_t> page_class[kPagesPerSegment];

  char* base() { return reinterpret_cast<char*>(this); }
  char* page_addr(size_t page) { return base() + (page << kPageShift); }
};

// The class recorded for p's page in the header of the segment p lies in. Only for
// p whose page-map entry names a slab: any other p may lie in no segment, where the
// load would fault. free() takes the class from here rather than from the entry
// because the class picks the sheaf the object is pushed on: in a program that
// frees what it just allocated, the chain alloc's pop -> p -> class -> free's push
// -> next pop runs through this lookup, and one load is shorter than two.
inline unsigned page_class_of(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const Segment* seg = reinterpret_cast<const Segment*>(a & ~(kSegmentSize - 1));
  return seg->page_class[(a >> kPageShift) & (kPagesPerSegment - 1)].load(
      std::memory_order_relaxed);
}

class PageMap {
 public:
  static constexpr unsigned kAddressBits = os::kUserAddressBits;
  static constexpr unsigned kLeafBits = 17;
  static constexpr unsigned kRootBits = kAddressBits - kPageShift - kLeafBits;  // 17 (18 on arm64)
  static constexpr uintptr_t kClassMask = 127;
  static_assert(kMaxClasses == kClassMask + 1 && alignof(Span) == kClassMask + 1);

  // The entry of p's page: Span* | class, or 0 when uslab knows no span there.
  static uintptr_t entry(const void* p) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    // Masked, not range-checked: a pointer above the mapped range lands on some
    // entry, and the checks on the span (object start, span start) reject it.
    uintptr_t root = (a >> (kPageShift + kLeafBits)) & ((uintptr_t{1} << kRootBits) - 1);
    Leaf* leaf = root_[root].load(std::memory_order_acquire);
    if (__builtin_expect(leaf == nullptr, 0)) return 0;
    return leaf->e[(a >> kPageShift) & ((uintptr_t{1} << kLeafBits) - 1)].load(
        std::memory_order_acquire);
  }
  static Span* span_of(uintptr_t e) { return reinterpret_cast<Span*>(e & ~kClassMask); }
  static Span* get(const void* p) { return span_of(entry(p)); }

  // Set or clear the entry of the page at `page` (its leaf must exist: see reserve).
  static void set(const void* page, Span* s, unsigned cls = 0) {
    uintptr_t a = reinterpret_cast<uintptr_t>(page);
    Leaf* leaf = root_[a >> (kPageShift + kLeafBits)].load(std::memory_order_relaxed);
    leaf->e[(a >> kPageShift) & ((uintptr_t{1} << kLeafBits) - 1)].store(
        reinterpret_cast<uintptr_t>(s) | cls, std::memory_order_release);
  }
  static void clear(const void* page) { set(page, nullptr); }

  // Create the leaves covering [base, base + bytes); false when memory cannot be had.
  static bool reserve(const void* base, size_t bytes);
  // Zeroes the entries of the normal segment at `base`, about to be unmapped, by
  // returning their page of the leaf to the OS: a segment's entries fill exactly one
  // 4 KiB page, which after a peak would otherwise stay resident for nothing.
  static void release_segment(const void* base);

  static Mutex& lock() { return lock_; }
  // The root's pages uncharged (see above) by the constructor, in a process that has
  // not allocated yet; a no-op once done.
  static void uncharge_root();
  // The root's entry for p (where it lies: which of the root's pages are committed).
  static const void* root_slot(const void* p) {
    return &root_[(reinterpret_cast<uintptr_t>(p) >> (kPageShift + kLeafBits)) &
                  ((uintptr_t{1} << kRootBits) - 1)];
  }

 private:
  struct Leaf {
    std::atomic<uintptr_t> e[size_t{1} << kLeafBits];
  };
  static std::atomic<Leaf*> root_[size_t{1} << kRootBits] USLAB_HIDDEN;
  static bool root_uncharged_;  // lock_
  static void uncharge_root_locked() USLAB_REQUIRES(lock_);
  static bool commit_root_page(uintptr_t root_index) USLAB_REQUIRES(lock_);
  static Mutex lock_;
};

// Create a normal segment (header initialised, page-map leaves reserved).
// uslab's page or the OS page, whichever is larger: the unit of what is mapped,
// protected or returned on its own (a huge object's header, object and guards, a
// guarded slot's parts).
inline size_t page_granule() { return os::page_size() > kPageSize ? os::page_size() : kPageSize; }

// Whether a transparent huge page fits in a segment: with 4 KiB OS pages (2 MiB), not
// with 16 or 64 KiB ones (32 or 512 MiB), where none is used (page_heap.h).
inline bool huge_page_fits_segment() { return os::huge_page_bytes() <= kSegmentSize; }

// With `advise`, the mapping is advised MADV_HUGEPAGE (`huge`) or MADV_NOHUGEPAGE
// before its header is written: the header's write would otherwise fault a 4 KiB
// page into the first 2 MiB and keep that half off huge pages. Segment::huge tells
// whether MADV_HUGEPAGE took.
Segment* segment_create_normal(bool advise = false, bool huge = false);
// Create a huge segment holding one large object of `bytes` aligned to `align`.
// The returned segment's huge_span describes the object. With `guard`, the OS page
// before the object and one after its last page are made inaccessible (the guard
// option: an overflow or underflow faults at once).
Segment* segment_create_huge(size_t bytes, size_t align, Span* span, bool guard = false);
// Resizes an unguarded huge segment's object to `bytes` with mremap, its pages kept
// (glibc grows its mmapped chunks the same way): in place when the address space
// after it is free or the object shrinks; else, with `may_move`, moved to a fresh
// segment-aligned range without copying. The span and its page-map entry follow.
// The segment (moved or not), or nullptr when it could not be done (nothing changed).
Segment* segment_resize_huge(Segment* seg, size_t bytes, bool may_move);
// Unmap (normal or huge), with its page-map entries: a normal segment's all go (its
// free span's bounds included), a huge one's is its object's.
void segment_destroy(Segment* seg);

// Total bytes currently mapped for segments.
size_t segment_mapped_bytes();

}  // namespace uslab
