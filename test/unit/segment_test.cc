// core/alloc/segment.h: segments' layout and mapping, the page map's entries, huge
// segments' objects, guards and resizing, and the count of mapped bytes.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/core.h"
#include "test/unit/child.h"

using namespace uslab;

namespace {
// Whether the OS page at p is mapped (mincore fails with ENOMEM on an unmapped one).
bool mapped(const void* p) {
  unsigned char v;
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(os::kernel_page_size() - 1));
  return mincore(page, os::kernel_page_size(), &v) == 0;
}

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Span descriptors for the huge segments below (the page map needs 128-byte alignment).
alignas(128) Span g_span, g_other;
}  // namespace

TEST_CASE("a normal segment is aligned, counted, and its page-map entries start empty") {
  const size_t before = segment_mapped_bytes();
  Segment* seg = segment_create_normal();
  REQUIRE(seg != nullptr);
  CHECK(aligned(seg, kSegmentSize));
  CHECK(seg->kind == SegmentKind::kNormal);
  CHECK(seg->mapped_bytes == kSegmentSize);
  CHECK(seg->used_pages == 0);
  CHECK(segment_mapped_bytes() == before + kSegmentSize);
  for (size_t page = 0; page < kPagesPerSegment; page++)
    REQUIRE(PageMap::entry(seg->page_addr(page)) == 0);
  // Every page of it can be written and its entry set: the leaves exist.
  memset(seg->page_addr(1), 0xab, kSegmentSize - kPageSize);
  PageMap::set(seg->page_addr(7), &g_span, 5);
  PageMap::set(seg->page_addr(kPagesPerSegment - 1), &g_span);
  segment_destroy(seg);
  CHECK(segment_mapped_bytes() == before);
  CHECK_FALSE(mapped(seg));
  CHECK_FALSE(mapped(seg->page_addr(kPagesPerSegment - 1)));
  // The destroy took its entries with it, set ones included: a segment mapped there
  // later starts from empty entries.
  CHECK(PageMap::entry(seg->page_addr(7)) == 0);
  CHECK(PageMap::entry(seg->page_addr(kPagesPerSegment - 1)) == 0);
}

TEST_CASE("a page-map entry packs the span and its class, and covers its whole page") {
  Segment* seg = segment_create_normal();
  REQUIRE(seg != nullptr);
  char* page = seg->page_addr(3);
  PageMap::set(page, &g_span, 93);
  const uintptr_t e = PageMap::entry(page + kPageSize - 1);
  CHECK(PageMap::span_of(e) == &g_span);
  CHECK((e & PageMap::kClassMask) == 93);
  CHECK(PageMap::get(page + 100) == &g_span);
  // Neighbouring pages have entries of their own.
  CHECK(PageMap::entry(page - 1) == 0);
  CHECK(PageMap::entry(page + kPageSize) == 0);
  PageMap::set(page, &g_other);
  CHECK(PageMap::entry(page) == reinterpret_cast<uintptr_t>(&g_other));
  PageMap::clear(page);
  CHECK(PageMap::entry(page) == 0);
  segment_destroy(seg);
}

TEST_CASE("memory uslab did not map has no page-map entry") {
  int local = 0;
  static int global;
  void* glibc = ::malloc(100);  // the unit tests run on glibc's malloc
  CHECK(PageMap::entry(&local) == 0);
  CHECK(PageMap::entry(&global) == 0);
  CHECK(PageMap::entry(glibc) == 0);
  CHECK(PageMap::entry(nullptr) == 0);
  ::free(glibc);
}

TEST_CASE("a huge segment holds one object after its header page, aligned as asked") {
  const size_t before = segment_mapped_bytes();
  const size_t bytes = 10 * kSegmentSize + 1;
  Segment* seg = segment_create_huge(bytes, 0, &g_span);
  REQUIRE(seg != nullptr);
  CHECK(seg->kind == SegmentKind::kHuge);
  CHECK(aligned(seg, kSegmentSize));  // transparent huge pages line up with it
  CHECK(seg->huge_span == &g_span);
  CHECK(g_span.start == seg->base() + page_granule());
  CHECK(g_span.kind == SpanKind::kLarge);
  CHECK(g_span.segment == seg);
  CHECK(g_span.bytes() == 10 * kSegmentSize + kPageSize);  // rounded up to pages
  CHECK(seg->mapped_bytes == page_granule() + g_span.bytes());
  CHECK(segment_mapped_bytes() == before + seg->mapped_bytes);
  // The object's first page names the span; no other page of it has an entry.
  CHECK(PageMap::get(g_span.start) == &g_span);
  CHECK(PageMap::entry(g_span.start + kPageSize) == 0);
  memset(g_span.start, 1, bytes);
  char* start = g_span.start;
  segment_destroy(seg);
  CHECK(PageMap::entry(start) == 0);
  CHECK_FALSE(mapped(start));
  CHECK(segment_mapped_bytes() == before);

  // An alignment above a page: the object starts at it, the mapping aligned to it.
  const size_t align = 4 * kSegmentSize;
  seg = segment_create_huge(kSegmentSize, align, &g_span);
  REQUIRE(seg != nullptr);
  CHECK(aligned(g_span.start, align));
  CHECK(g_span.start == seg->base() + align);
  CHECK(PageMap::get(g_span.start) == &g_span);
  segment_destroy(seg);
  // Sizes whose rounding wraps around are refused.
  CHECK(segment_create_huge(SIZE_MAX - 100, 0, &g_span) == nullptr);
}

TEST_CASE("a guarded huge object faults one page before it and one page past its end") {
  const size_t bytes = 3 * kSegmentSize;
  Segment* seg = segment_create_huge(bytes, 0, &g_span, true);
  REQUIRE(seg != nullptr);
  char* obj = g_span.start;
  obj[0] = 1;
  obj[bytes - 1] = 1;
  // The header's page, the guard's OS page before the object (the two are one 8 KiB
  // page with 4 KiB OS pages), the object, the guard after it.
  const size_t page = os::page_size();
  CHECK(seg->mapped_bytes == (2 * page > page_granule() ? 2 * page : page_granule()) + bytes + page);
  // In a child, without Catch's handler, which would report the expected fault.
  CHECK(in_child(fork, [&] {
          signal(SIGSEGV, SIG_DFL);
          obj[-1] = 1;
          return 0;
        }) == -SIGSEGV);
  CHECK(in_child(fork, [&] {
          signal(SIGSEGV, SIG_DFL);
          obj[bytes] = 1;
          return 0;
        }) == -SIGSEGV);
  // The header, in the mapping's first OS page, stays readable.
  CHECK(seg->huge_span == &g_span);
  segment_destroy(seg);
}

TEST_CASE("a huge object grows and shrinks with its pages, its entry and the mapped count") {
  const size_t before = segment_mapped_bytes();
  const size_t small = 2 * kSegmentSize, big = 9 * kSegmentSize;
  Segment* seg = segment_create_huge(small, 0, &g_span);
  REQUIRE(seg != nullptr);
  for (size_t i = 0; i < small; i += os::page_size()) g_span.start[i] = static_cast<char>(i >> 12);
  // Something mapped right after it: the object cannot grow in place.
  char* after = seg->base() + seg->mapped_bytes;
  void* blocker = mmap(after, os::kernel_page_size(), PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  // Something may be mapped there already (the kernel packs mappings; under TSan it
  // was): a neighbour all the same, left as it is.
  const bool ours = blocker == after;
  if (!ours) {
    REQUIRE(errno == EEXIST);
    blocker = after;
  }
  Segment* old = seg;
  char* old_start = g_span.start;
  // Not allowed to move: refused, nothing changed.
  CHECK(segment_resize_huge(seg, big, false) == nullptr);
  CHECK(g_span.start == old_start);
  CHECK(g_span.bytes() == small);
  CHECK(PageMap::get(old_start) == &g_span);
  CHECK(segment_mapped_bytes() == before + page_granule() + small);
  // Allowed: the pages move (no copy) to a fresh segment-aligned range.
  seg = segment_resize_huge(seg, big, true);
  REQUIRE(seg != nullptr);
  CHECK(seg != old);
  CHECK(aligned(seg, kSegmentSize));
  CHECK(seg->huge_span == &g_span);
  CHECK(g_span.segment == seg);
  CHECK(g_span.start == seg->base() + page_granule());
  CHECK(g_span.bytes() == big);
  CHECK(PageMap::get(g_span.start) == &g_span);
  CHECK(PageMap::entry(old_start) == 0);
  CHECK_FALSE(mapped(old_start));
  CHECK(mapped(blocker));  // the neighbour is untouched
  bool same = true;
  for (size_t i = 0; i < small; i += os::page_size())
    same &= g_span.start[i] == static_cast<char>(i >> 12);
  CHECK(same);
  g_span.start[big - 1] = 1;
  CHECK(segment_mapped_bytes() == before + page_granule() + big);
  // Shrinking stays in place and unmaps the tail.
  char* start = g_span.start;
  Segment* shrunk = segment_resize_huge(seg, small, false);
  CHECK(shrunk == seg);
  CHECK(g_span.start == start);
  CHECK(g_span.bytes() == small);
  CHECK_FALSE(mapped(start + big - 1));
  CHECK(segment_mapped_bytes() == before + page_granule() + small);
  same = true;
  for (size_t i = 0; i < small; i += os::page_size())
    same &= g_span.start[i] == static_cast<char>(i >> 12);
  CHECK(same);
  segment_destroy(seg);
  if (ours) munmap(blocker, os::kernel_page_size());
  CHECK(segment_mapped_bytes() == before);
}
