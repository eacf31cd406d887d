// Page heap: span allocation, alignment, coalescing, in-place growth and shrinking,
// purging (decay) and the backlog the background thread sleeps on — on a private
// PageHeap so the global heap's state is irrelevant.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/alloc/alloc.h"
#include "test/unit/vm_flags.h"

using namespace uslab;

namespace {

// Whether the running kernel's release is at least major.minor.
bool kernel_at_least(int major, int minor) {
  struct utsname u;
  REQUIRE(uname(&u) == 0);
  int ma = 0, mi = 0;
  sscanf(u.release, "%d.%d", &ma, &mi);
  return ma > major || (ma == major && mi >= minor);
}

bool all_zero(const char* p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return false;
  return true;
}

// uslab pages per OS page (1 when the OS page is smaller).
size_t pages_per_os_page() {
  return os::page_size() > kPageSize ? os::page_size() / kPageSize : 1;
}
// A span at the start of a new segment that ends on an OS page: the spans after it
// start on one, and can be returned whole (one page with 4 KiB OS pages).
size_t keep_pages() { return pages_per_os_page() > 1 ? pages_per_os_page() - 1 : 1; }

// Fills a new segment of ph with two spans, the first written when `touched`; its spans.
std::vector<Span*> fill_segment(PageHeap& ph, bool touched,
                                ObjectSize objects = ObjectSize::kPageOrMore) {
  bool z;
  const size_t half = PageHeap::kMaxPages / 2;
  Span* a = ph.alloc(half, 1, SpanKind::kLarge, &z, objects);
  REQUIRE(a != nullptr);
  REQUIRE(a->first_page == 1);  // a new segment
  if (touched) memset(a->start, 1, a->bytes());
  Span* b = ph.alloc(PageHeap::kMaxPages - half, 1, SpanKind::kLarge, &z, objects);
  REQUIRE(b->segment == a->segment);
  return {a, b};
}
}  // namespace

TEST_CASE("adjacent spans coalesce back into one free segment") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* a = ph.alloc(10, 1, SpanKind::kLarge, &z);
  REQUIRE(z);  // fresh memory reads as zero
  Span* b = ph.alloc(10, 1, SpanKind::kLarge, &z);
  Span* c = ph.alloc(10, 1, SpanKind::kLarge, &z);
  REQUIRE(a->segment == b->segment);
  REQUIRE(b->start == a->start + 10 * kPageSize);
  REQUIRE(c->start == b->start + 10 * kPageSize);
  REQUIRE(ph.stats().segments == 1);
  memset(a->start, 1, a->bytes());
  char* a_start = a->start;
  ph.free(a);
  ph.free(c);
  REQUIRE(ph.stats().free_bytes == (PageHeap::kMaxPages - 10) * kPageSize);
  ph.free(b);
  PageHeapStats st = ph.stats();
  REQUIRE(st.free_bytes == PageHeap::kMaxPages * kPageSize);
  // The written pages stay a dirty span of their own beside the clean rest; a
  // maximal allocation merges them by purging the dirty part, without growing.
  REQUIRE(st.dirty_bytes == 30 * kPageSize);
  Span* all = ph.alloc(PageHeap::kMaxPages, 1, SpanKind::kLarge, &z);
  REQUIRE(all != nullptr);
  // With OS pages above 8 KiB, the first page shares the header's and stays dirty:
  // the span is then taken dirty, not known zero.
  const bool whole = os::page_size() <= kPageSize;
  REQUIRE(z == whole);
  if (whole) REQUIRE(all_zero(a_start, 10 * kPageSize));
  REQUIRE(ph.stats().segments == 1);
  ph.free(all);
  REQUIRE(ph.purge(true) > 0);
  REQUIRE(ph.stats().segments == 0);  // a wholly free segment is unmapped
}

TEST_CASE("requests take dirty pages before clean ones, which stay apart") {
  // Resident (dirty) free pages are used first, as jemalloc takes dirty extents
  // before retained ones: a shortest-fit over both took purged pages while dirty
  // ones sat resident (fragmentation peak 217 -> 207 MiB with this).
  PageHeap ph{Mutex::kUnranked};
  bool z;
  // In units of OS pages where those are larger, each span on whole ones.
  const size_t r = pages_per_os_page();
  Span* lead = r > 1 ? ph.alloc(r - 1, 1, SpanKind::kLarge, &z) : nullptr;
  Span* a = ph.alloc(8 * r, 1, SpanKind::kLarge, &z);
  Span* k1 = ph.alloc(r, 1, SpanKind::kLarge, &z);
  Span* c = ph.alloc(4 * r, 1, SpanKind::kLarge, &z);
  Span* k2 = ph.alloc(r, 1, SpanKind::kLarge, &z);
  REQUIRE(c->start == a->start + 9 * r * kPageSize);
  char* a_start = a->start;
  ph.free(c);
  ph.purge(true);  // c's pages: a clean hole between k1 and k2
  memset(a->start, 1, a->bytes());
  ph.free(a);  // dirty pages, not merged with anything clean
  REQUIRE(ph.stats().dirty_bytes == 8 * r * kPageSize);
  Span* s = ph.alloc(4 * r, 1, SpanKind::kLarge, &z);
  REQUIRE(s->start == a_start);  // not the clean hole that fits exactly
  REQUIRE(!z);
  ph.free(s);
  ph.free(k1);
  ph.free(k2);
  if (lead) ph.free(lead);
  ph.purge(true);
}

TEST_CASE("the untouched rest of a segment advised huge pages when made decays") {
  // Its first touch faults in 2 MiB: the rest reads as zero but is resident, so it
  // counts as resident and is purged with the decay (2 MiB stayed resident after a
  // peak when it counted as clean).
  PageHeap ph{Mutex::kUnranked};
  bool z;
  std::vector<Span*> whole;
  // A big heap whose segments were touched densely: the next one is advised when made.
  for (size_t i = 0; i < PageHeap::kThpMinSegments; i++)
    for (Span* w : fill_segment(ph, true)) whole.push_back(w);
  Span* s = ph.alloc(1, 1, SpanKind::kLarge, &z);
  REQUIRE(s != nullptr);
  config_init();
  if (!PageHeap::thp_enabled()) {
    REQUIRE_FALSE(s->segment->huge);
    WARN("transparent huge pages off here: no segment is advised when made");
  } else {
    REQUIRE(s->segment->huge);
    REQUIRE(z);  // zero all the same
    REQUIRE(ph.stats().dirty_bytes == (PageHeap::kMaxPages - 1) * kPageSize);
    Span* t = ph.alloc(8, 1, SpanKind::kLarge, &z);
    REQUIRE(z);
    ph.free(t);
    REQUIRE(ph.purge(true) >= (PageHeap::kMaxPages - 1) * kPageSize);
    REQUIRE(ph.stats().dirty_bytes == 0);
  }
  ph.free(s);
  for (Span* w : whole) ph.free(w);
  ph.purge(true);
  REQUIRE(ph.stats().segments == 0);
}

TEST_CASE("a large span grows in place over a dirty and a clean span that follow it") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* big = ph.alloc(4, 1, SpanKind::kLarge, &z);
  Span* d = ph.alloc(3, 1, SpanKind::kLarge, &z);
  REQUIRE(d->start == big->start + 4 * kPageSize);
  memset(d->start, 1, d->bytes());
  ph.free(d);  // dirty, beside the clean rest of the segment
  size_t free_before = ph.stats().free_bytes;
  REQUIRE(ph.try_grow(big, 4 + 3 + 10));
  REQUIRE(big->npages == 17);
  REQUIRE(ph.stats().free_bytes == free_before - 13 * kPageSize);
  REQUIRE(ph.stats().dirty_bytes == 0);
  memset(big->start, 2, big->bytes());  // all of it is usable
  Span* next = ph.alloc(1, 1, SpanKind::kLarge, &z);
  REQUIRE(next->start == big->start + 17 * kPageSize);  // the rest stayed free after it
  ph.free(next);
  ph.free(big);
  ph.purge(true);
}

TEST_CASE("aligned spans start on the alignment and give the lead back") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* pad = ph.alloc(3, 1, SpanKind::kLarge, &z);
  for (size_t align : {2, 4, 16, 64, 256}) {
    Span* s = ph.alloc(5, align, SpanKind::kLarge, &z);
    REQUIRE(s != nullptr);
    REQUIRE(reinterpret_cast<uintptr_t>(s->start) % (align * kPageSize) == 0);
    REQUIRE(s->npages == 5);
    ph.free(s);
  }
  ph.free(pad);
  REQUIRE(ph.stats().free_bytes == PageHeap::kMaxPages * kPageSize);
  ph.purge(true);
}

TEST_CASE("large spans grow and shrink in place") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* s = ph.alloc(4, 1, SpanKind::kLarge, &z);
  char* start = s->start;
  REQUIRE(ph.try_grow(s, 40));
  REQUIRE(s->start == start);
  REQUIRE(s->npages == 40);
  Span* blocker = ph.alloc(1, 1, SpanKind::kLarge, &z);
  REQUIRE(blocker->start == start + 40 * kPageSize);
  REQUIRE_FALSE(ph.try_grow(s, 41));
  ph.shrink(s, 7);
  REQUIRE(s->npages == 7);
  REQUIRE(ph.stats().large_bytes == 8 * kPageSize);
  // The pages given back are reusable right after the span.
  Span* t = ph.alloc(33, 1, SpanKind::kLarge, &z);
  REQUIRE(t->start == start + 7 * kPageSize);
  ph.free(t);
  ph.free(blocker);
  ph.free(s);
  ph.purge(true);
  REQUIRE(ph.stats().segments == 0);
}

TEST_CASE("purged pages read as zero and are counted") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* keep = ph.alloc(keep_pages(), 1, SpanKind::kLarge, &z);
  Span* s = ph.alloc(8, 1, SpanKind::kLarge, &z);
  char* p = s->start;
  memset(p, 0xab, 8 * kPageSize);
  ph.free(s);
  REQUIRE(ph.stats().dirty_bytes >= 8 * kPageSize);
  size_t purged = ph.purge(true);
  REQUIRE(purged >= 8 * kPageSize);
  REQUIRE(ph.stats().dirty_bytes == 0);
  Span* again = ph.alloc(8, 1, SpanKind::kLarge, &z);
  REQUIRE(again->start == p);
  REQUIRE(z);
  REQUIRE(all_zero(again->start, 8 * kPageSize));
  ph.free(again);
  ph.free(keep);
  ph.purge(true);
}

TEST_CASE("decay keeps recently freed pages until they are old enough") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* keep = ph.alloc(keep_pages(), 1, SpanKind::kLarge, &z);
  Span* s = ph.alloc(8, 1, SpanKind::kLarge, &z);
  memset(s->start, 1, s->bytes());
  ph.free(s);
  REQUIRE(ph.purge(false) == 0);  // decay_ms defaults to 10 s
  REQUIRE(ph.stats().dirty_bytes > 0);
  ph.free(keep);
  ph.purge(true);
}

TEST_CASE("free pages are purged before decay_ms, leaving the caches above their share") {
  // decay_ms bounds the time from the program's free to the purge: the caches give
  // back within kCacheIdleTicks + 1 ticks, so the page heap purges pages that many
  // ticks early and two more (with the purge at decay_ms, a peak came back 1.25-1.7 x
  // decay_ms after its frees).
  uint64_t saved = g_config.decay_ms;
  g_config.decay_ms = 160;
  REQUIRE(decay_tick_ms() == 10);
  REQUIRE(decay_purge_age_ms() == 160 - 10 * (kCacheIdleTicks + 3));
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* keep = ph.alloc(keep_pages(), 1, SpanKind::kLarge, &z);
  Span* s = ph.alloc(8, 1, SpanKind::kLarge, &z);
  memset(s->start, 1, s->bytes());
  ph.free(s);
  size_t purged_before = ph.stats().purged_bytes;
  os::sleep_ns(135'000'000);
  ph.purge(false);
  REQUIRE(ph.stats().purged_bytes - purged_before >= 8 * kPageSize);
  REQUIRE(ph.stats().dirty_bytes == 0);
  g_config.decay_ms = 1;  // a tick at least every millisecond, purged at once
  REQUIRE(decay_tick_ms() == 1);
  REQUIRE(decay_purge_age_ms() == 0);
  g_config.decay_ms = saved;
  ph.free(keep);
  ph.purge(true);
}

TEST_CASE("a span freed next to an old dirty span keeps the old span's age") {
  // A slab freed now and then at the edge of a large dirty span must not keep the
  // whole span from decaying (the merged span used to take the newest time).
  uint64_t saved = g_config.decay_ms;
  g_config.decay_ms = 100;
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* keep = ph.alloc(keep_pages(), 1, SpanKind::kLarge, &z);
  Span* old_part = ph.alloc(16, 1, SpanKind::kLarge, &z);
  Span* new_part = ph.alloc(1, 1, SpanKind::kLarge, &z);
  REQUIRE(new_part->start == old_part->start + 16 * kPageSize);
  memset(old_part->start, 1, old_part->bytes());
  memset(new_part->start, 1, new_part->bytes());
  ph.free(old_part);
  size_t purged_before = ph.stats().purged_bytes;
  os::sleep_ns(150'000'000);
  ph.free(new_part);  // merges with old_part (and the free rest of the segment)
  ph.purge(false);    // (the free may have purged already: its heap's clock was due)
  REQUIRE(ph.stats().purged_bytes - purged_before >= 17 * kPageSize);
  REQUIRE(ph.stats().dirty_bytes == 0);
  g_config.decay_ms = saved;
  ph.free(keep);
  ph.purge(true);
}

TEST_CASE("a wholly free segment goes with its page-map entries") {
  // Its free span's bounds pointed at a freed descriptor after the unmap; now the
  // segment's page of the leaf is returned, so every entry reads 0.
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* s = ph.alloc(3, 1, SpanKind::kLarge, &z);
  char* first = s->start;
  REQUIRE(PageMap::entry(first) != 0);
  ph.free(s);
  REQUIRE(PageMap::entry(first) != 0);  // the free span's first page
  REQUIRE(ph.purge(true) > 0);
  REQUIRE(ph.stats().segments == 0);
  REQUIRE(PageMap::entry(first) == 0);
  REQUIRE(PageMap::entry(first + (PageHeap::kMaxPages - 1) * kPageSize) == 0);
}

TEST_CASE("dense segments are advised huge pages; a purge takes the advice back", "[kernel]") {
  config_init();
  PageHeap ph{Mutex::kUnranked};
  bool z;
  if (!PageHeap::thp_enabled()) {
    // Off (thp=false, or the system's setting "never"): no advice at all, even dense.
    std::vector<Span*> all = fill_segment(ph, true);
    REQUIRE_FALSE(all[0]->segment->huge);
    REQUIRE_FALSE(has_flag(vm_flags(all[0]->segment), "hg"));
    REQUIRE(ph.stats().huge_segments == 0);
    for (Span* s : all) ph.free(s);
    ph.purge(true);
    REQUIRE(ph.stats().thp_splits == 0);
    return;
  }
  const size_t half = PageHeap::kMaxPages / 2;
  Span* a = ph.alloc(half, 1, SpanKind::kLarge, &z);
  Segment* seg = a->segment;
  memset(a->start, 1, a->bytes());
  REQUIRE_FALSE(seg->huge);  // half used: not dense
  REQUIRE_FALSE(has_flag(vm_flags(seg), "hg"));
  Span* b = ph.alloc(PageHeap::kMaxPages - half, 1, SpanKind::kLarge, &z);
  REQUIRE(b->segment == seg);
  REQUIRE(seg->huge);  // every page in use, and what was in use before written
  REQUIRE(has_flag(vm_flags(seg), "hg"));
  REQUIRE(ph.stats().huge_segments == 1);
  // Measured dense: what was measured, the first 2 MiB (written before the advice, in
  // 4 KiB pages), is queued for a collapse, which the allocation left to a tick; a
  // tick's collapse takes only what waited since the tick before it.
  CHECK(seg->collapse_queued);
  CHECK(ph.stats().thp_collapses == 0);
  CHECK_FALSE(ph.collapse_one(os::now_ms() - decay_tick_ms()));
  CHECK(seg->collapse_queued);
  // Collapsed into a huge page; b's own 2 MiB left alone (not resident: not written).
  bool collapsed = ph.collapse_one(os::now_ms());
  CHECK_FALSE(seg->collapse_queued);
  if (kernel_at_least(6, 1)) {
    CHECK(collapsed);
    CHECK(ph.stats().thp_collapses == 1);
    CHECK(smaps_kib(seg, "AnonHugePages") == 2048);
    CHECK(smaps_kib(seg, "Rss") == 2048);
  }
  CHECK_FALSE(ph.collapse_one());  // nothing left queued
  memset(b->start, 1, b->bytes());
  ph.free(b);
  REQUIRE(ph.purge(true) == b->bytes());
  // The purge split the range off its huge pages; khugepaged must not refill it.
  REQUIRE_FALSE(seg->huge);
  REQUIRE(has_flag(vm_flags(seg), "nh"));
  REQUIRE(ph.stats().huge_segments == 0);
  REQUIRE(ph.stats().thp_splits == 1);
  b = ph.alloc(PageHeap::kMaxPages - half, 1, SpanKind::kLarge, &z);
  REQUIRE(seg->huge);  // dense again
  REQUIRE(has_flag(vm_flags(seg), "hg"));
  std::vector<Span*> spans = {a, b};

  // Spans of 3 pages fill 510 of a segment's 511: full enough, and advised once dense.
  {
    std::vector<Span*> threes;
    for (size_t i = 0; i < PageHeap::kMaxPages / 3; i++) {
      Span* t = ph.alloc(3, 1, SpanKind::kLarge, &z);
      REQUIRE(t->segment == (threes.empty() ? t->segment : threes[0]->segment));
      REQUIRE(t->segment->huge == (i + 1 == PageHeap::kMaxPages / 3));
      memset(t->start, 1, t->bytes());
      threes.push_back(t);
    }
    REQUIRE(threes[0]->first_page == 1);
    REQUIRE(threes[0]->segment->used_pages == 510);
    REQUIRE(has_flag(vm_flags(threes[0]->segment), "hg"));
    threes.push_back(ph.alloc(1, 1, SpanKind::kLarge, &z));  // the last page, for below
    REQUIRE(threes.back()->segment == threes[0]->segment);
    spans.insert(spans.end(), threes.begin(), threes.end());
  }

  // Full, but what was in use was never written: not advised.
  std::vector<Span*> sparse = fill_segment(ph, false);
  REQUIRE_FALSE(sparse[0]->segment->huge);
  REQUIRE_FALSE(has_flag(vm_flags(sparse[0]->segment), "hg"));
  spans.insert(spans.end(), sparse.begin(), sparse.end());
  // A big heap whose last measured segment was sparse makes its next one unadvised.
  while (ph.stats().segments < PageHeap::kThpMinSegments)
    for (Span* s : fill_segment(ph, false)) spans.push_back(s);
  Span* one = ph.alloc(1, 1, SpanKind::kLarge, &z);
  REQUIRE(one->first_page == 1);
  REQUIRE_FALSE(one->segment->huge);
  spans.push_back(one);
  spans.push_back(ph.alloc(PageHeap::kMaxPages - 1, 1, SpanKind::kLarge, &z));  // fills it
  // Dense again: the next segments are advised when made, but one in kThpProbeEvery.
  for (Span* s : fill_segment(ph, true)) spans.push_back(s);
  size_t advised = 0;
  for (size_t i = 0; i < 2 * PageHeap::kThpProbeEvery; i++) {
    Span* s = ph.alloc(1, 1, SpanKind::kLarge, &z);
    REQUIRE(s->first_page == 1);
    advised += s->segment->huge;
    REQUIRE(s->segment->huge == has_flag(vm_flags(s->segment), "hg"));
    spans.push_back(s);
    // Each filled after its first page was written: the probes keep the heap eager.
    memset(s->start, 1, s->bytes());
    Span* rest = ph.alloc(PageHeap::kMaxPages - 1, 1, SpanKind::kLarge, &z);
    REQUIRE(rest->segment == s->segment);
    spans.push_back(rest);
  }
  CHECK(advised == 2 * (PageHeap::kThpProbeEvery - 1));
  // ... but not one made for a span that leaves a long tail: three 1 MiB blocks leave
  // 127 pages that a huge page would make resident.
  std::vector<Span*> mib;
  for (int i = 0; i < 3; i++) mib.push_back(ph.alloc(128, 1, SpanKind::kLarge, &z));
  REQUIRE(mib[0]->segment == mib[2]->segment);
  REQUIRE_FALSE(mib[0]->segment->huge);
  REQUIRE_FALSE(has_flag(vm_flags(mib[0]->segment), "hg"));
  for (Span* s : mib) ph.free(s);
  for (Span* s : spans) ph.free(s);
  ph.purge(true);
  REQUIRE(ph.stats().segments == 0);
  REQUIRE(ph.stats().huge_segments == 0);
  // The segments measured dense since were queued; unmapped, they left the queue.
  CHECK_FALSE(ph.collapse_one());
}

TEST_CASE("the eagerness is kept apart for objects under a page and the rest", "[kernel]") {
  config_init();
  if (!PageHeap::thp_enabled()) return;  // nothing measured
  PageHeap ph{Mutex::kUnranked};
  bool z;
  std::vector<Span*> spans;
  auto keep = [&](const std::vector<Span*>& v) { spans.insert(spans.end(), v.begin(), v.end()); };
  // A big heap whose spans of small objects were written whole (as `bench drift`'s
  // 256 B-2 KiB ones), and whose spans of objects of a page or more were written
  // only at their start (its 2-8 KiB ones; here not at all).
  while (ph.stats().segments < PageHeap::kThpMinSegments - 1)
    keep(fill_segment(ph, true, ObjectSize::kSubPage));
  keep(fill_segment(ph, false, ObjectSize::kPageOrMore));
  auto fresh_segment = [&](ObjectSize objects) {
    Span* s = ph.alloc(1, 1, SpanKind::kSlab, &z, objects);
    REQUIRE(s->first_page == 1);
    spans.push_back(s);
    return s->segment;
  };
  // Small objects map advised segments; the larger objects' measure holds for theirs.
  Segment* small = fresh_segment(ObjectSize::kSubPage);
  CHECK(small->huge);
  CHECK(has_flag(vm_flags(small), "hg"));
  keep({ph.alloc(PageHeap::kMaxPages - 1, 1, SpanKind::kSlab, &z, ObjectSize::kSubPage)});
  REQUIRE(spans.back()->segment == small);
  Segment* large = fresh_segment(ObjectSize::kPageOrMore);
  CHECK_FALSE(large->huge);
  CHECK_FALSE(has_flag(vm_flags(large), "hg"));
  // Once a span of larger objects fills a dense segment, theirs are advised too.
  memset(spans.back()->start, 1, spans.back()->bytes());
  keep({ph.alloc(PageHeap::kMaxPages - 1, 1, SpanKind::kLarge, &z, ObjectSize::kPageOrMore)});
  REQUIRE(spans.back()->segment == large);
  CHECK(large->huge);
  CHECK(fresh_segment(ObjectSize::kPageOrMore)->huge);
  for (Span* s : spans) ph.free(s);
  ph.purge(true);
  CHECK(ph.stats().segments == 0);
}

TEST_CASE("a segment measured sparse is measured again a decay tick later, not sooner") {
  config_init();
  if (!PageHeap::thp_enabled()) return;  // nothing measured
  PageHeap ph{Mutex::kUnranked};
  bool z;
  // Full of spans never written: sparse.
  std::vector<Span*> spans = fill_segment(ph, false);
  Segment* seg = spans[0]->segment;
  REQUIRE_FALSE(seg->huge);
  REQUIRE(seg->sparse_at_ms != 0);
  // Written, emptied and filled again within the tick: not measured, so not advised.
  memset(spans[0]->start, 1, spans[0]->bytes());
  const size_t rest = spans[1]->npages;
  ph.free(spans[1]);
  spans[1] = ph.alloc(rest, 1, SpanKind::kLarge, &z);
  REQUIRE(spans[1]->segment == seg);
  CHECK_FALSE(seg->huge);
  // A tick later the next fill measures it: dense now.
  seg->sparse_at_ms -= decay_tick_ms();
  ph.free(spans[1]);
  spans[1] = ph.alloc(rest, 1, SpanKind::kLarge, &z);
  REQUIRE(spans[1]->segment == seg);
  CHECK(seg->huge);
  CHECK(seg->sparse_at_ms == 0);
  for (Span* s : spans) ph.free(s);
  ph.purge(true);
  REQUIRE(ph.stats().segments == 0);
}

TEST_CASE("alloc_more takes this heap's free spans only, as many as fit") {
  PageHeap ph{Mutex::kUnranked};
  Span* out[4];
  // Nothing free: no segment is mapped for it.
  CHECK(ph.alloc_more(2, SpanKind::kSlab, out, 4) == 0);
  CHECK(ph.stats().segments == 0);
  bool z;
  Span* first = ph.alloc(2, 1, SpanKind::kSlab, &z);  // maps one
  REQUIRE(first != nullptr);
  REQUIRE(ph.alloc_more(2, SpanKind::kSlab, out, 4) == 4);
  std::vector<Span*> spans = {first, out[0], out[1], out[2], out[3]};
  for (size_t i = 0; i < spans.size(); i++) {
    CHECK(spans[i]->npages == 2);
    CHECK(spans[i]->kind == SpanKind::kSlab);
    CHECK(spans[i]->segment == first->segment);
    for (size_t j = 0; j < i; j++)  // disjoint
      CHECK((spans[i]->start + spans[i]->bytes() <= spans[j]->start ||
             spans[j]->start + spans[j]->bytes() <= spans[i]->start));
  }
  // What is left of the segment serves fewer than asked, and no second one is mapped.
  Span* rest = ph.alloc(PageHeap::kMaxPages - 10 - 3, 1, SpanKind::kLarge, &z);
  REQUIRE(rest->segment == first->segment);
  CHECK(ph.alloc_more(2, SpanKind::kSlab, out, 4) == 1);
  spans.push_back(out[0]);
  CHECK(ph.stats().segments == 1);
  spans.push_back(rest);
  for (Span* s : spans) ph.free(s);
  ph.purge(true);
  REQUIRE(ph.stats().segments == 0);
}

TEST_CASE("an aligned mapping needs no more address space than its size") {
  // A segment S, then 2 MiB right below it (mmap places new mappings top-down): the
  // kernel's first choice for the next 4 MiB is then 2 MiB off alignment. With room
  // for 5 MiB under RLIMIT_AS, the aligned neighbour must be taken directly: an
  // over-sized mapping (4 MiB + the alignment) would not fit.
  void* s = os::map_aligned(kSegmentSize, kSegmentSize);
  REQUIRE(s != nullptr);
  void* gap = os::map(size_t{2} << 20);
  REQUIRE(gap != nullptr);
  struct rlimit old;
  REQUIRE(getrlimit(RLIMIT_AS, &old) == 0);
  long vm_kib = 0;
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld", &vm_kib) == 1) break;
  if (f) fclose(f);
  REQUIRE(vm_kib > 0);
  struct rlimit tight = old;
  tight.rlim_cur = (static_cast<rlim_t>(vm_kib) << 10) + (size_t{5} << 20);
  REQUIRE(setrlimit(RLIMIT_AS, &tight) == 0);
  void* p = os::map_aligned(kSegmentSize, kSegmentSize);
  setrlimit(RLIMIT_AS, &old);
  REQUIRE(p != nullptr);
  REQUIRE(reinterpret_cast<uintptr_t>(p) % kSegmentSize == 0);
  os::unmap(p, kSegmentSize);
  os::unmap(gap, size_t{2} << 20);
  os::unmap(s, kSegmentSize);
}

TEST_CASE("the shortest free span that fits is taken, at every length a segment holds") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  // Free spans of 300 and 200 pages (kept apart by live spans), then requests between.
  Span* a = ph.alloc(300, 1, SpanKind::kLarge, &z);
  Span* keep1 = ph.alloc(1, 1, SpanKind::kLarge, &z);
  Span* b = ph.alloc(200, 1, SpanKind::kLarge, &z);
  Span* keep2 = ph.alloc(1, 1, SpanKind::kLarge, &z);
  REQUIRE(ph.stats().segments == 1);  // 502 of 511 pages: one segment
  char* a_start = a->start;
  char* b_start = b->start;
  ph.free(a);
  ph.free(b);
  Span* s = ph.alloc(150, 1, SpanKind::kLarge, &z);
  CHECK(s->start == b_start);  // 200 pages fit better than 300
  Span* t = ph.alloc(250, 1, SpanKind::kLarge, &z);
  CHECK(t->start == a_start);
  Span* u = ph.alloc(100, 1, SpanKind::kLarge, &z);  // the rest of a: 50 pages; b's: 50
  CHECK(ph.stats().segments == 2);  // nothing of 100 pages was free any more
  for (Span* x : {s, t, u, keep1, keep2}) ph.free(x);
  ph.purge(true);
  CHECK(ph.stats().segments == 0);
}

TEST_CASE("a heap that must grow first purges the dirty holes too short for the request") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  // Ten segments in use (never written), then three of one-page spans, every other
  // one freed: 766 dirty one-page holes between live pages, more than the allowance
  // (a segment's worth, 511 pages, above 1/128 of the 5877 pages in use; 1/8 of them
  // would keep 734).
  std::vector<Span*> spans;
  for (int i = 0; i < 10; i++)
    for (Span* s : fill_segment(ph, false)) spans.push_back(s);
  const size_t first = spans.size();
  for (size_t i = 0; i < 3 * PageHeap::kMaxPages; i++) {
    spans.push_back(ph.alloc(1, 1, SpanKind::kLarge, &z));
    REQUIRE(spans.back() != nullptr);
    spans.back()->start[0] = 1;
  }
  REQUIRE(ph.stats().segments == 13);
  for (size_t i = first + 1; i < spans.size(); i += 2) ph.free(spans[i]);
  const size_t holes = (spans.size() - first) / 2;
  PageHeapStats before = ph.stats();
  REQUIRE(before.dirty_bytes == holes * kPageSize);
  // None of the holes holds two pages: the heap maps a segment, and purges the
  // shortest dirty holes first, down to the allowance.
  Span* two = ph.alloc(2, 1, SpanKind::kLarge, &z);
  REQUIRE(two != nullptr);
  PageHeapStats after = ph.stats();
  REQUIRE(after.segments == 14);
  // One-page holes between live pages lie on OS pages those share when OS pages are
  // larger than 8 KiB: none can go then.
  const bool whole = os::page_size() <= kPageSize;
  REQUIRE(after.dirty_bytes == (whole ? PageHeap::kMaxPages : holes) * kPageSize);
  REQUIRE(after.purged_bytes - before.purged_bytes ==
          (whole ? holes - PageHeap::kMaxPages : 0) * kPageSize);
  // A request the holes could serve maps nothing and purges nothing.
  Span* one = ph.alloc(1, 1, SpanKind::kLarge, &z);
  REQUIRE(ph.stats().purged_bytes == after.purged_bytes);
  ph.free(one);
  ph.free(two);
  for (size_t i = 0; i < spans.size(); i++)
    if (i < first || (i - first) % 2 == 0) ph.free(spans[i]);
  ph.purge(true);
  CHECK(ph.stats().segments == 0);
}

TEST_CASE("a page heap's backlog holds its dirty pages until they are purged") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  size_t dirty = 1;
  REQUIRE_FALSE(ph.backlog(&dirty));
  REQUIRE(dirty == 0);
  Span* keep = ph.alloc(keep_pages(), 1, SpanKind::kLarge, &z);
  Span* s = ph.alloc(8, 1, SpanKind::kLarge, &z);
  memset(s->start, 1, s->bytes());
  ph.free(s);
  REQUIRE(ph.backlog(&dirty));
  REQUIRE(dirty == 8 * kPageSize);
  ph.purge(true);
  // Purged, but a clean segment with a live page and no empty descriptor page: nothing.
  REQUIRE_FALSE(ph.backlog(&dirty));
  REQUIRE(dirty == 0);
  ph.free(keep);
  REQUIRE(ph.backlog(&dirty));  // the page just freed
  ph.purge(true);
  REQUIRE_FALSE(ph.backlog(&dirty));  // the segment unmapped, its descriptors purged
}

TEST_CASE("a huge segment mostly in use keeps its free pages until memory is short", "[kernel]") {
  config_init();
  if (!PageHeap::thp_enabled()) {
    WARN("transparent huge pages off here: no segment is advised");
    return;
  }
  const uint64_t saved = g_config.decay_ms;
  g_config.decay_ms = 1;  // every free page old enough for a decay purge at once
  PageHeap ph{Mutex::kUnranked};
  std::vector<Span*> spans = fill_segment(ph, true);
  Segment* seg = spans[0]->segment;
  REQUIRE(seg->huge);
  bool z;
  // Split the second half into spans of 8 pages, all written.
  ph.free(spans[1]);
  spans.pop_back();
  const size_t rest = PageHeap::kMaxPages - seg->used_pages;
  for (size_t n = 0; n + 8 <= rest; n += 8) {
    Span* s = ph.alloc(8, 1, SpanKind::kLarge, &z);
    REQUIRE(s->segment == seg);
    memset(s->start, 1, s->bytes());
    spans.push_back(s);
  }
  while (seg->used_pages < PageHeap::kMaxPages) spans.push_back(ph.alloc(1, 1, SpanKind::kLarge, &z));
  REQUIRE(seg->huge);
  std::vector<bool> gone(spans.size(), false);
  auto give = [&](size_t i) {
    ph.free(spans[i]);
    gone[i] = true;
  };
  const size_t splits = ph.stats().thp_splits;

  // A few holes (a sixteenth of the segment): the decay purge leaves them resident.
  size_t freed = 0;
  for (size_t i = 2; freed < PageHeap::kMaxPages / 16; i += 2, freed += 8) give(i);
  CHECK(ph.purge(false) == 0);
  CHECK(seg->huge);
  CHECK(has_flag(vm_flags(seg), "hg"));
  CHECK(ph.stats().thp_splits == splits);
  CHECK(ph.stats().thp_kept_bytes == freed * kPageSize);
  CHECK(ph.stats().dirty_bytes == freed * kPageSize);
  size_t dirty;
  CHECK_FALSE(ph.backlog(&dirty));  // nothing for the background thread to do
  CHECK(dirty == 0);

  SECTION("pages freed since count as work until a purge keeps them again") {
    give(3);
    // No stale count left: none, or the free's own purge (a tick is 1 ms here) kept
    // them with the others; and the backlog is work unless they are kept.
    const size_t kept_now = ph.stats().thp_kept_bytes;
    CHECK((kept_now == 0 || kept_now == (freed + 8) * kPageSize));
    CHECK(ph.backlog(&dirty) == (kept_now == 0));
    CHECK(ph.purge(false) == 0);
    CHECK_FALSE(ph.backlog(&dirty));
    freed += 8;
    CHECK(ph.stats().thp_kept_bytes == freed * kPageSize);
  }
  SECTION("a trim returns them") {
    CHECK(ph.purge(true) == freed * kPageSize);
    CHECK_FALSE(seg->huge);
    CHECK(ph.stats().thp_splits == splits + 1);
    CHECK(ph.stats().dirty_bytes == 0);
  }
  SECTION("a heap that must grow purges the other holes too short, not these") {
    g_config.decay_ms = saved;  // no decay purge of the holes below meanwhile
    // Three segments of 12-page spans, every other one freed (the last of each kept,
    // so that no hole meets its segment's clean tail): 63 dirty holes, past the
    // allowance (a segment's worth), and the huge segment's 8-page holes, which no
    // 12-page request fits. A 16-page request fits none of them: the heap maps a
    // segment and purges the holes too short for it, shortest first, but the huge
    // segment's, which are kept as the decay clock keeps them.
    std::vector<Span*> others;
    for (size_t seg_n = 0; seg_n < 3; seg_n++)
      for (size_t i = 0; i < PageHeap::kMaxPages / 12; i++) {
        others.push_back(ph.alloc(12, 1, SpanKind::kLarge, &z));
        REQUIRE(others.back()->segment != seg);
      }
    for (size_t i = 0; i < others.size(); i += 2) ph.free(others[i]);
    const size_t holes = (others.size() + 1) / 2;
    const PageHeapStats before = ph.stats();
    REQUIRE(before.dirty_bytes == (freed + 12 * holes) * kPageSize);
    Span* big = ph.alloc(16, 1, SpanKind::kLarge, &z);
    REQUIRE(big != nullptr);
    CHECK(ph.stats().segments == before.segments + 1);
    // The 12-page holes only, shortest first, until a segment's worth is left dirty.
    const size_t over = before.dirty_bytes / kPageSize - PageHeap::kMaxPages;
    CHECK(ph.stats().purged_bytes - before.purged_bytes == (over + 11) / 12 * 12 * kPageSize);
    CHECK(seg->huge);
    CHECK(has_flag(vm_flags(seg), "hg"));
    CHECK(ph.stats().thp_splits == splits);
    ph.free(big);
    for (size_t i = 1; i < others.size(); i += 2) ph.free(others[i]);
  }
  SECTION("a segment grown sparse returns them at the next decay purge") {
    size_t more = 0;
    for (size_t i = 3; freed + more <= PageHeap::kMaxPages / 8; i += 2, more += 8) give(i);
    CHECK(ph.purge(false) == (freed + more) * kPageSize);
    CHECK_FALSE(seg->huge);
    CHECK(ph.stats().thp_kept_bytes == 0);
  }
  g_config.decay_ms = saved;
  for (size_t i = 0; i < spans.size(); i++)
    if (!gone[i]) ph.free(spans[i]);
  ph.purge(true);
  CHECK(ph.stats().segments == 0);
}

// --- OS pages larger than uslab's (16 and 64 KiB kernels; the unit suite runs again
// with os_page=16k and 64k, and under QEMU at those pages) ---

namespace {
// Whether page i of seg lies on an OS page all of whose uslab pages are in [lo, hi).
bool os_page_within(size_t i, size_t lo, size_t hi) {
  const size_t r = pages_per_os_page(), first = i / r * r;
  return first >= lo && first + r <= hi;
}
bool all_bytes(const char* p, size_t n, char v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return false;
  return true;
}
}  // namespace

TEST_CASE("a purge returns whole OS pages only: pages on one a span in use shares stay") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  const size_t r = pages_per_os_page();
  Span* a = ph.alloc(1, 1, SpanKind::kLarge, &z);  // page 1, beside the header
  REQUIRE(a->first_page == 1);
  Span* s = ph.alloc(3 * r, 1, SpanKind::kLarge, &z);
  Span* b = ph.alloc(1, 1, SpanKind::kLarge, &z);
  REQUIRE(s->first_page == 2);
  REQUIRE(b->first_page == 2 + 3 * r);
  memset(a->start, 0xcd, kPageSize);
  memset(b->start, 0xcd, kPageSize);
  char* p = s->start;
  memset(p, 0xab, s->bytes());
  Segment* seg = s->segment;
  ph.free(s);
  const size_t lo = 2, hi = 2 + 3 * r;
  size_t whole = 0;
  for (size_t i = lo; i < hi; i++) whole += os_page_within(i, lo, hi);
  REQUIRE(ph.purge(true) == whole * kPageSize);
  // The neighbours in use keep their data (a purge rounded out would wipe it on a
  // kernel with such pages); the free pages on their OS pages keep theirs too.
  CHECK(all_bytes(a->start, kPageSize, static_cast<char>(0xcd)));
  CHECK(all_bytes(b->start, kPageSize, static_cast<char>(0xcd)));
  for (size_t i = lo; i < hi; i++) {
    const char* page = seg->page_addr(i);
    INFO("page " << i << " of " << r << " a page");
    CHECK(all_bytes(page, kPageSize, os_page_within(i, lo, hi) ? 0 : static_cast<char>(0xab)));
  }
  const size_t kept = (3 * r - whole) * kPageSize;
  CHECK(ph.stats().dirty_bytes == kept);
  // Nothing the next purges could return: the background thread may sleep (the
  // second purge sees the pages the first split off).
  ph.purge(true);
  size_t waiting = 1;
  ph.backlog(&waiting);
  CHECK(waiting == 0);
  // b freed: the pages beside it are now on a wholly free OS page, and go.
  ph.free(b);
  ph.purge(true);
  for (size_t i = lo; i < hi + 1; i++) {
    INFO("page " << i);
    const bool beside_a = !os_page_within(i, lo, hi + 1) && i / r * r <= 1;
    if (!beside_a) CHECK(all_zero(seg->page_addr(i), kPageSize));
  }
  CHECK(all_bytes(a->start, kPageSize, static_cast<char>(0xcd)));
  ph.free(a);
  ph.purge(true);
  CHECK(ph.stats().segments == 0);
}

TEST_CASE("a dirty span purges the OS page it shares with a clean free neighbour") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  const size_t r = pages_per_os_page();
  Span* x = ph.alloc(1, 1, SpanKind::kLarge, &z);  // page 1
  Span* y = ph.alloc(1, 1, SpanKind::kLarge, &z);  // page 2; the segment's rest is clean
  REQUIRE(y->first_page == 2);
  char* p = y->start;
  memset(p, 0xab, kPageSize);
  ph.free(y);
  // Page 2's OS page holds pages in use (the header, x) only when it starts below 2.
  const bool whole = 2 / r * r >= 2;
  REQUIRE(ph.purge(true) == (whole ? os::page_size() > kPageSize ? os::page_size() : kPageSize : 0));
  CHECK(all_bytes(p, kPageSize, whole ? 0 : static_cast<char>(0xab)));
  CHECK(ph.stats().dirty_bytes == (whole ? 0 : kPageSize));
  // Whatever stayed dirty, a request for the whole rest is served from this segment.
  Span* rest = ph.alloc(PageHeap::kMaxPages - 1, 1, SpanKind::kLarge, &z);
  REQUIRE(rest != nullptr);
  CHECK(rest->start == p);
  CHECK(z == whole);  // the dirty page makes the merged span dirty: not known zero
  CHECK(ph.stats().segments == 1);
  ph.free(rest);
  ph.free(x);
  ph.purge(true);
  CHECK(ph.stats().segments == 0);
}
