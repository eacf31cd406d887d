// core/alloc/segment.cc — segment mapping and the radix SegmentMap.
// Locking: SegmentMap::lock_ serialises writers of the map; see segment.h.
#include "core/alloc/segment.h"

#include <cstring>

namespace uslab {

constinit std::atomic<SegmentMap::Leaf*> SegmentMap::top_[size_t{1} << SegmentMap::kTopBits] = {};
constinit Mutex SegmentMap::lock_;

static std::atomic<size_t> g_segment_bytes{0};

bool SegmentMap::set_range(const void* base, size_t bytes, Segment* seg) {
  uintptr_t a = reinterpret_cast<uintptr_t>(base);
  uintptr_t end = a + bytes;
  LockGuard g(lock_);
  for (; a < end; a += kSegmentSize) {
    uintptr_t top = a >> (kSegmentShift + kLeafBits);
    if (top >= (uintptr_t{1} << kTopBits)) return false;
    Leaf* leaf = top_[top].load(std::memory_order_relaxed);
    if (!leaf) {
      if (!seg) continue;  // nothing to clear
      leaf = static_cast<Leaf*>(os::map(sizeof(Leaf)));
      if (!leaf) return false;
      top_[top].store(leaf, std::memory_order_release);
    }
    leaf->seg[(a >> kSegmentShift) & ((uintptr_t{1} << kLeafBits) - 1)].store(
        seg, std::memory_order_release);
  }
  return true;
}

Segment* segment_create_normal() {
  void* mem = os::map_aligned(kSegmentSize, kSegmentSize);
  if (!mem) return nullptr;
  Segment* seg = static_cast<Segment*>(mem);  // fresh mapping: header is zero
  seg->kind = SegmentKind::kNormal;
  seg->mapped_bytes = kSegmentSize;
  if (!SegmentMap::set_range(mem, kSegmentSize, seg)) {
    SegmentMap::set_range(mem, kSegmentSize, nullptr);
    os::unmap(mem, kSegmentSize);
    return nullptr;
  }
  g_segment_bytes.fetch_add(kSegmentSize, std::memory_order_relaxed);
  return seg;
}

Segment* segment_create_huge(size_t bytes, size_t align, Span* span) {
  // The object starts after the header page, or at `align` when that is larger.
  size_t offset = align > kPageSize ? align : kPageSize;
  size_t obj_bytes = (bytes + kPageSize - 1) & ~(kPageSize - 1);
  if (obj_bytes < bytes || offset + obj_bytes < obj_bytes) return nullptr;
  size_t total = offset + obj_bytes;
  size_t map_align = align > kSegmentSize ? align : kSegmentSize;
  void* mem = os::map_aligned(total, map_align);
  if (!mem) return nullptr;
  Segment* seg = static_cast<Segment*>(mem);
  seg->kind = SegmentKind::kHuge;
  seg->mapped_bytes = total;
  seg->huge_span = span;
  memset(span, 0, offsetof(Span, bitmap));
  span->start = static_cast<char*>(mem) + offset;
  span->kind = SpanKind::kLarge;
  span->npages = static_cast<uint32_t>(obj_bytes >> kPageShift);
  span->segment = seg;
  if (!SegmentMap::set_range(mem, total, seg)) {
    SegmentMap::set_range(mem, total, nullptr);
    os::unmap(mem, total);
    return nullptr;
  }
  g_segment_bytes.fetch_add(total, std::memory_order_relaxed);
  return seg;
}

void segment_destroy(Segment* seg) {
  size_t bytes = seg->mapped_bytes;
  SegmentMap::set_range(seg, bytes, nullptr);
  g_segment_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  os::unmap(seg, bytes);
}

size_t segment_mapped_bytes() { return g_segment_bytes.load(std::memory_order_relaxed); }

}  // namespace uslab
