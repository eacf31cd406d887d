// core/alloc/segment.cc — segment mapping and the radix PageMap.
// Locking: PageMap::lock_ serialises leaf creation; see segment.h.
#include "core/alloc/segment.h"

#include "core/alloc/background.h"
#include "core/alloc/memory_limit.h"

#include <cstring>

namespace uslab {

USLAB_LARGE_ZERO constinit std::atomic<PageMap::Leaf*>
    PageMap::root_[size_t{1} << PageMap::kRootBits] = {};
constinit Mutex PageMap::lock_;
constinit bool PageMap::root_uncharged_ = false;
USLAB_LOCK_ONE(kPageMap, PageMap::lock());

static std::atomic<size_t> g_segment_bytes{0};

// Counts newly mapped segment bytes; the memory limit is decided on the way, and a
// heap crossing kBackgroundLiveBytes wants the background thread.
static void add_mapped(size_t bytes) {
  size_t mapped = g_segment_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  limit_note_mapped(mapped);
  if (mapped >= kBackgroundLiveBytes && mapped - bytes < kBackgroundLiveBytes)
    background_want_live();
}

// Before any entry is written (the constructor, or the first reserve): the root's
// pages made uncharged zero pages, each committed when an entry of it is first set.
USLAB_STARTUP_TEXT void PageMap::uncharge_root_locked() {
  if (root_uncharged_) return;
  os::uncharge_zero(root_, sizeof root_);
  root_uncharged_ = true;
}

// Root pages made writable (a bit per OS page of the root), so that each is committed
// once, over the zero page it was. Among the big arrays: a process that never
// allocates never touches it, and start-up's small globals keep their pages.
USLAB_LARGE_ZERO static uint64_t
    g_root_committed[((sizeof(void*) << PageMap::kRootBits) / 4096 + 63) / 64];  // lock_

bool PageMap::commit_root_page(uintptr_t a) {
  uintptr_t page = os::page_down(reinterpret_cast<uintptr_t>(&root_[a]));
  uintptr_t lo = os::page_up(reinterpret_cast<uintptr_t>(root_));
  uintptr_t hi = os::page_down(reinterpret_cast<uintptr_t>(root_ + (size_t{1} << kRootBits)));
  if (page < lo || page >= hi) return true;  // never uncharged (the root's ends)
  size_t i = (page - lo) / os::page_size();
  uint64_t bit = uint64_t{1} << (i % 64);
  if (g_root_committed[i / 64] & bit) return true;
  if (!os::charge_zero(reinterpret_cast<void*>(page), os::page_size())) return false;
  g_root_committed[i / 64] |= bit;
  return true;
}

USLAB_STARTUP_TEXT void PageMap::uncharge_root() {
  LockGuard g(lock_);
  uncharge_root_locked();
}

bool PageMap::reserve(const void* base, size_t bytes) {
  uintptr_t a = reinterpret_cast<uintptr_t>(base) >> (kPageShift + kLeafBits);
  uintptr_t last = (reinterpret_cast<uintptr_t>(base) + bytes - 1) >> (kPageShift + kLeafBits);
  LockGuard g(lock_);
  uncharge_root_locked();
  for (; a <= last; a++) {
    if (a >= (uintptr_t{1} << kRootBits)) return false;
    if (root_[a].load(std::memory_order_relaxed)) continue;
    if (!commit_root_page(a)) return false;
    Leaf* leaf = static_cast<Leaf*>(os::map_metadata(sizeof(Leaf)));
    if (!leaf) return false;
    root_[a].store(leaf, std::memory_order_release);
  }
  return true;
}

void PageMap::release_segment(const void* base) {
  constexpr size_t kEntryBytes = (kSegmentSize >> kPageShift) * sizeof(uintptr_t);
  static_assert(kEntryBytes == 4096, "a segment's entries fill a 4 KiB page of its leaf");
  uintptr_t a = reinterpret_cast<uintptr_t>(base);
  Leaf* leaf = root_[a >> (kPageShift + kLeafBits)].load(std::memory_order_relaxed);
  // Before the unmap: once the range is unmapped, a new segment there may be setting
  // entries in this page.
  std::atomic<uintptr_t>* e = &leaf->e[(a >> kPageShift) & ((uintptr_t{1} << kLeafBits) - 1)];
  if (os::page_size() == kEntryBytes) {
    os::purge_zeroing(e, kEntryBytes);
    return;
  }
  // A larger OS page holds other segments' entries too, which other threads may be
  // setting: this segment's are cleared, and the page stays.
  for (size_t i = 0; i < kSegmentSize >> kPageShift; i++) e[i].store(0, std::memory_order_relaxed);
}

Segment* segment_create_normal(bool advise, bool huge) {
  void* mem = os::map_aligned(kSegmentSize, kSegmentSize);
  if (!mem) return nullptr;
  bool advised = advise && os::advise_huge(mem, kSegmentSize, huge);
  if (!PageMap::reserve(mem, kSegmentSize)) {
    os::unmap(mem, kSegmentSize);
    return nullptr;
  }
  Segment* seg = static_cast<Segment*>(mem);  // fresh mapping: header is zero
  seg->kind = SegmentKind::kNormal;
  seg->mapped_bytes = kSegmentSize;
  seg->huge = advised && huge;
  add_mapped(kSegmentSize);
  return seg;
}

Segment* segment_create_huge(size_t bytes, size_t align, Span* span, bool guard) {
  // The object starts after the header's page (uslab's or the OS's, whichever is
  // larger) and, with `guard`, the OS page of the guard before it, or at `align` when
  // that is larger. A guarded object fills whole OS pages, so that its guard after it
  // starts right at its usable end.
  const size_t page = os::page_size();
  size_t offset = guard && 2 * page > page_granule() ? 2 * page : page_granule();
  if (align > offset) offset = align;
  const size_t unit = guard ? page_granule() : kPageSize;
  size_t obj_bytes = (bytes + unit - 1) & ~(unit - 1);
  size_t tail = guard ? page : 0;
  if (obj_bytes < bytes || offset + obj_bytes + tail < obj_bytes) return nullptr;
  size_t total = offset + obj_bytes + tail;
  size_t map_align = align > kSegmentSize ? align : kSegmentSize;
  void* mem = os::map_aligned(total, map_align);
  if (!mem) return nullptr;
  // Under THP "always" with 16 or 64 KiB OS pages, a huge page is 32 or 512 MiB: a
  // first touch would make that much resident (the normal segments' rule, page_heap.h).
  if (!huge_page_fits_segment() && os::thp_mode() == os::ThpMode::kAlways)
    os::advise_huge(mem, total, false);
  char* obj = static_cast<char*>(mem) + offset;
  if (!PageMap::reserve(obj, kPageSize)) {
    os::unmap(mem, total);
    return nullptr;
  }
  // The OS pages just before and just after the object (the header sits in the
  // mapping's first one). A refused mprotect (vm.max_map_count) leaves the object
  // without guards rather than failing the allocation.
  if (guard && !(os::protect(obj - page, page, false) && os::protect(obj + obj_bytes, page, false)))
    os::protect(obj - page, page, true);
  Segment* seg = static_cast<Segment*>(mem);
  seg->kind = SegmentKind::kHuge;
  seg->mapped_bytes = total;
  seg->huge_span = span;
  memset(span, 0, offsetof(Span, inline_bitmap));
  span->start = obj;
  span->kind = SpanKind::kLarge;
  span->npages = static_cast<uint32_t>(obj_bytes >> kPageShift);
  span->segment = seg;
  PageMap::set(obj, span);
  add_mapped(total);
  return seg;
}

Segment* segment_resize_huge(Segment* seg, size_t bytes, bool may_move) {
  Span* span = seg->huge_span;
  size_t offset = static_cast<size_t>(span->start - seg->base());
  size_t obj_bytes = (bytes + kPageSize - 1) & ~(kPageSize - 1);
  size_t old_total = seg->mapped_bytes, total = offset + obj_bytes;
  if (obj_bytes < bytes || total < obj_bytes) return nullptr;
  if (!os::remap_in_place(seg, old_total, total)) {
    if (!may_move || total < old_total) return nullptr;
    // A range of the new size on a segment boundary (transparent huge pages line up
    // as in segment_create_huge), which the pages then move into.
    char* to = static_cast<char*>(os::map_aligned(total, kSegmentSize));
    if (!to) return nullptr;
    if (!PageMap::reserve(to + offset, kPageSize)) {
      os::unmap(to, total);
      return nullptr;
    }
    // The old entry goes before the move: once the pages have moved, another thread
    // may map a segment at the old address and set the same entry, which a clear
    // after the move would wipe (that object's free then looks invalid).
    PageMap::clear(span->start);
    if (!os::remap_to(seg, old_total, total, to)) {
      PageMap::set(span->start, span);  // a failed mremap leaves the old mapping
      os::unmap_if_unclaimed(to, total);  // and may have unmapped the new one
      return nullptr;
    }
    seg = reinterpret_cast<Segment*>(to);  // its header moved with the pages
    span->start = to + offset;
    span->segment = seg;
    PageMap::set(span->start, span);
  }
  seg->mapped_bytes = total;
  span->npages = static_cast<uint32_t>(obj_bytes >> kPageShift);
  if (total > old_total)
    add_mapped(total - old_total);
  else
    g_segment_bytes.fetch_sub(old_total - total, std::memory_order_relaxed);
  return seg;
}

void segment_destroy(Segment* seg) {
  size_t bytes = seg->mapped_bytes;
  if (seg->kind == SegmentKind::kHuge)
    PageMap::clear(seg->huge_span->start);
  else
    PageMap::release_segment(seg);
  g_segment_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  os::unmap(seg, bytes);
}

size_t segment_mapped_bytes() { return g_segment_bytes.load(std::memory_order_relaxed); }

}  // namespace uslab
