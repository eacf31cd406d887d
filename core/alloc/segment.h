// core/alloc/segment.h — address space: segments, spans, and pointer → span lookup.
//
// Owns:
//  - Segment: 4 MiB of address space aligned to 4 MiB. Page 0 holds the header
//    (this struct and its page map: one Span* per 8 KiB page); pages 1..511 are
//    carved by the page heap into spans. A huge allocation (larger than a segment's
//    pages) gets a segment of its own, of any size, whose header page precedes it.
//  - Span: a run of pages — free (page heap), a slab of one size class (central
//    list), or one large object. Descriptors live in the metadata arena, never in
//    the heap they describe.
//  - SegmentMap: a two-level radix table, 4 MiB chunk → Segment*, covering the
//    47-bit user address space. It answers "is this pointer ours?" in O(1).
//
// Locking: SegmentMap::lookup is lock-free: leaves are published with a release
// store and never freed; an entry is set before a segment's memory is handed out and
// cleared only after the segment is given back, so a reader racing with neither
// sees a stale segment for a live pointer. Writers (register/unregister) hold
// map_lock. A Segment's page map entries are written under the page heap lock (free
// spans, large spans) or by the thread that owns a freshly carved slab before it is
// published; fast-path readers only read entries of spans whose objects they own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/ds/ds.h"

namespace uslab {

struct Segment;

enum class SpanKind : uint8_t { kFree = 0, kSlab = 1, kLarge = 2 };

struct Span {
  // Read on the free fast path (first cache line).
  char* start;          // first byte of the span
  uint64_t div_magic;   // slabs: offset * div_magic >> kDivShift == object index
  uint32_t obj_size;    // slabs: class size
  uint8_t size_class;   // slabs: class; 0 otherwise
  SpanKind kind;
  uint8_t dirty;        // free spans: pages may be resident (not purged since use)
  uint8_t on_partial;   // slabs: linked on the central partial list
  uint32_t npages;
  uint32_t first_page;  // index in the segment (0 for huge segments)
  Segment* segment;
  Span* prev;           // free lists (page heap) or partial list (central)
  Span* next;
  // Slabs: objects free in the bitmap (1 bit = free), hint of the first word to scan.
  uint16_t capacity;
  uint16_t free_count;
  uint16_t scan_hint;
  uint64_t freed_at_ms;  // free spans: when they last became free (decay clock)
  uint64_t bitmap[kMaxSlabObjects / 64];

  size_t bytes() const { return size_t{npages} << kPageShift; }
};

enum class SegmentKind : uint32_t { kNormal = 1, kHuge = 2 };

struct Segment {
  SegmentKind kind;
  uint32_t used_pages;  // normal: pages in non-free spans
  size_t mapped_bytes;  // the whole mapping, header included
  Span* huge_span;      // huge: the one large object
  Span* page_map[kPagesPerSegment];  // normal: span of each page (first/last page of free
                                     // and large spans, every page of a slab), or nullptr

  char* base() { return reinterpret_cast<char*>(this); }
  char* page_addr(size_t page) { return base() + (page << kPageShift); }
  size_t page_of(const void* p) {
    return (size_t)(static_cast<const char*>(p) - base()) >> kPageShift;
  }
};
static_assert(sizeof(Segment) <= kPageSize, "segment header must fit page 0");

class SegmentMap {
 public:
  static constexpr unsigned kAddressBits = 47;
  static constexpr unsigned kLeafBits = 14;
  static constexpr unsigned kTopBits = kAddressBits - kSegmentShift - kLeafBits;  // 11

  // The segment whose chunk holds p, or nullptr when p is not uslab's.
  static Segment* lookup(const void* p) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uintptr_t top = a >> (kSegmentShift + kLeafBits);
    if (__builtin_expect(top >= (uintptr_t{1} << kTopBits), 0)) return nullptr;
    Leaf* leaf = top_[top].load(std::memory_order_acquire);
    if (__builtin_expect(leaf == nullptr, 0)) return nullptr;
    return leaf->seg[(a >> kSegmentShift) & ((uintptr_t{1} << kLeafBits) - 1)].load(
        std::memory_order_acquire);
  }

  // Map every chunk of [base, base + bytes) to seg; false if a leaf cannot be mapped.
  static bool set_range(const void* base, size_t bytes, Segment* seg);

  static Mutex& lock() { return lock_; }

 private:
  struct Leaf {
    std::atomic<Segment*> seg[size_t{1} << kLeafBits];
  };
  static std::atomic<Leaf*> top_[size_t{1} << kTopBits];
  static Mutex lock_;
};

// Create a normal segment (header initialised, all pages unmapped in the page map).
Segment* segment_create_normal();
// Create a huge segment holding one large object of `bytes` aligned to `align`.
// The returned segment's huge_span describes the object.
Segment* segment_create_huge(size_t bytes, size_t align, Span* span);
// Unregister and unmap (normal or huge).
void segment_destroy(Segment* seg);

// Total bytes currently mapped for segments.
size_t segment_mapped_bytes();

}  // namespace uslab
