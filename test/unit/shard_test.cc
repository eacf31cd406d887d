// Shards: slabs belong to the shard that carved them; frees from anywhere go back
// to that shard's central list and depot; a page heap with no room takes another
// heap's free pages before it maps a segment. These need two shards: on a machine
// with one CPU, a synthetic one of two is adopted (test/unit/synthetic.h). Then first touch (core/alloc/first_touch.h):
// a shard's and a CPU's metadata are pages of their own, never the zero page, before
// anything reads them (checked through /proc/self/pagemap).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include "core/alloc/first_touch.h"
#include "core/alloc/percpu.h"
#include "core/heap.h"
#include "test/unit/synthetic.h"

using namespace uslab;

TEST_CASE("CPUs map onto the shards in groups of shard_cpus") {
  REQUIRE(shard_count() >= 1);
  REQUIRE(shard_count() <= kMaxShards);
  for (uint32_t c = 0; c < 4 * kMaxShards; c++) REQUIRE(shard_of_cpu(c) < shard_count());
  const uint32_t k = shard_cpus();
  if (topology_in_use().cpus_possible > k) REQUIRE(shard_of_cpu(0) != shard_of_cpu(k));
  if (k > 1) REQUIRE(shard_of_cpu(0) == shard_of_cpu(k - 1));
}

TEST_CASE("objects freed in a mixed batch go back to their own shard's slabs") {
  ensure_two_shards();
  unsigned cls = size_to_class(96);
  size_t n = 2 * kClassInfo[cls].objects;
  std::vector<void*> a(n), b(n);
  CentralStats a0 = g_central[0][cls].stats(cls), b0 = g_central[1][cls].stats(cls);
  REQUIRE(g_central[0][cls].alloc_batch(cls, a.data(), n) == n);
  REQUIRE(g_central[1][cls].alloc_batch(cls, b.data(), n) == n);
  for (size_t i = 0; i < n; i++) {
    REQUIRE(PageMap::get(a[i])->shard == 0);
    REQUIRE(PageMap::get(b[i])->shard == 1);
  }
  // Interleaved, as a CPU's sheaf holds objects of whoever allocated them.
  std::vector<void*> mixed;
  for (size_t i = 0; i < n; i++) {
    mixed.push_back(a[i]);
    mixed.push_back(b[n - 1 - i]);
  }
  // A shard's free_batch stops at the first object it does not own.
  REQUIRE(g_central[0][cls].free_batch(cls, mixed.data(), 2) == 1);
  central_free(cls, mixed.data() + 1, mixed.size() - 1);
  // Every object is free again in the slabs of the shard that carved it (the spare
  // empty slab of each shard counts among the slabs).
  CentralStats a1 = g_central[0][cls].stats(cls), b1 = g_central[1][cls].stats(cls);
  REQUIRE(a1.objects - a1.free_objects == a0.objects - a0.free_objects);
  REQUIRE(b1.objects - b1.free_objects == b0.objects - b0.free_objects);
}

TEST_CASE("a drain leaves objects in the depot of the shard that owns them") {
  ensure_two_shards();
  unsigned cls = size_to_class(80);
  size_t n = batch_size(cls);
  std::vector<void*> objs(n);
  REQUIRE(g_central[1][cls].alloc_batch(cls, objs.data(), n) == n);
  size_t d0 = g_depot[0][cls].stats().objects, d1 = g_depot[1][cls].stats().objects;
  depot_give(current_shard(), cls, objs.data(), n);
  REQUIRE(g_depot[0][cls].stats().objects == d0);
  REQUIRE(g_depot[1][cls].stats().objects == d1 + n);
  // Shard 1's next refill gets them back, hot.
  std::vector<void*> back(n);
  REQUIRE(g_depot[1][cls].take(cls, back.data(), n) == n);
  std::sort(objs.begin(), objs.end());
  std::sort(back.begin(), back.end());
  REQUIRE(objs == back);
  central_free(cls, back.data(), n);
}

TEST_CASE("a drain of interleaved owners makes one sheaf per owner, not one per run") {
  ensure_two_shards();
  unsigned cls = size_to_class(112);
  size_t half = batch_size(cls) / 2;
  std::vector<void*> a(half), b(half), mixed;
  REQUIRE(g_central[0][cls].alloc_batch(cls, a.data(), half) == half);
  REQUIRE(g_central[1][cls].alloc_batch(cls, b.data(), half) == half);
  for (size_t i = 0; i < half; i++) {
    mixed.push_back(a[i]);
    mixed.push_back(b[i]);
  }
  depot_give(current_shard(), cls, mixed.data(), mixed.size());
  // Each owner's next refill gets all of its objects in one take.
  std::vector<void*> back(batch_size(cls));
  REQUIRE(g_depot[0][cls].take(cls, back.data(), back.size()) == half);
  central_free(cls, back.data(), half);
  REQUIRE(g_depot[1][cls].take(cls, back.data(), back.size()) == half);
  central_free(cls, back.data(), half);
}

TEST_CASE("a page heap with no room takes another heap's free pages, which go back there") {
  ensure_two_shards();
  PageHeap& lender = g_page_heap[1];
  PageHeap& borrower = g_page_heap[0];
  bool z;
  page_heap_purge_all(true);  // no wholly free segment anywhere: the next one is new
  // The lender gets a wholly free segment.
  Span* whole = lender.alloc(PageHeap::kMaxPages, 1, SpanKind::kLarge, &z);
  REQUIRE(whole != nullptr);
  REQUIRE(whole->segment->heap == 1);
  lender.free(whole);
  size_t lender_free = lender.stats().free_bytes;
  // The borrower uses up its own spans that fit, then borrows instead of mapping.
  size_t mapped = segment_mapped_bytes();
  std::vector<Span*> taken;
  Span* borrowed = nullptr;
  for (int i = 0; i < 64 && !borrowed; i++) {
    Span* s = borrower.alloc(300, 1, SpanKind::kLarge, &z);
    REQUIRE(s != nullptr);
    taken.push_back(s);
    if (s->segment->heap == 1) borrowed = s;
  }
  REQUIRE(borrowed != nullptr);
  REQUIRE(segment_mapped_bytes() == mapped);
  REQUIRE(lender.stats().free_bytes == lender_free - 300 * kPageSize);
  REQUIRE(borrower.stats().large_bytes >= (taken.size() - 1) * 300 * kPageSize);
  // Freed through the segment's owner: the lender has its pages back.
  for (Span* s : taken) page_heap_of(s).free(s);
  REQUIRE(lender.stats().free_bytes == lender_free);
}

TEST_CASE("a heap that cannot lend a span that fits purges its holes for the growing heap") {
  // A program that moved to another CPU grows that CPU's heap: the holes of the heap
  // it left, too short for the request, are purged as the growing heap's own are
  // (they stayed resident: fragmentation peak +30 MiB after a migration).
  ensure_two_shards();
  PageHeap& lender = g_page_heap[1];
  PageHeap& grower = g_page_heap[0];
  bool z;
  page_heap_purge_all(true);  // no dirty page, no wholly free segment anywhere
  // Two of the lender's segments cut into 1-page spans, two of every three freed:
  // holes of 2 pages, more of them dirty than a heap keeps.
  Span* whole[2];
  for (Span*& w : whole) {
    w = lender.alloc(PageHeap::kMaxPages, 1, SpanKind::kLarge, &z);
    REQUIRE(w != nullptr);
    REQUIRE(w->segment->heap == 1);
  }
  for (Span* w : whole) lender.free(w);
  std::vector<Span*> pages;
  for (size_t i = 0; i < 2 * PageHeap::kMaxPages; i++) {
    Span* s = lender.alloc(1, 1, SpanKind::kLarge, &z);
    REQUIRE(s != nullptr);
    REQUIRE(s->segment->heap == 1);
    memset(s->start, 1, kPageSize);
    pages.push_back(s);
  }
  std::vector<Span*> kept;
  for (size_t i = 0; i < pages.size(); i++)
    if (i % 3 == 0)
      kept.push_back(pages[i]);
    else
      lender.free(pages[i]);
  const size_t keeps = PageHeap::kMaxPages * kPageSize;  // what a heap not growing keeps
  REQUIRE(lender.stats().dirty_bytes > keeps);
  size_t purged = lender.stats().purged_bytes;
  // A request no heap of the node can serve: the grower maps a segment.
  Span* big = grower.alloc(PageHeap::kMaxPages, 1, SpanKind::kLarge, &z);
  REQUIRE(big != nullptr);
  REQUIRE(big->segment->heap == 0);
  CHECK(lender.stats().dirty_bytes <= keeps);
  CHECK(lender.stats().purged_bytes > purged);
  grower.free(big);
  for (Span* s : kept) lender.free(s);
  page_heap_purge_all(true);
}

TEST_CASE("a shard with nothing free borrows another shard's surplus before carving a slab") {
  ensure_two_shards();
  unsigned cls = size_to_class(200);
  const size_t per_slab = kClassInfo[cls].objects;
  auto in_use = [cls](unsigned sh) {
    CentralStats st = g_central[sh][cls].stats(cls);
    return st.objects - st.free_objects;
  };
  const size_t used0 = in_use(0), used1 = in_use(1);
  // Shard 1 uses up exactly what it has free (its partial slabs and its spare).
  std::vector<void*> drained(g_central[1][cls].stats(cls).free_objects);
  if (!drained.empty())
    REQUIRE(g_central[1][cls].alloc_batch(cls, drained.data(), drained.size()) == drained.size());
  REQUIRE(g_central[1][cls].stats(cls).free_objects == 0);
  // Shard 0 gets a surplus: 4 slabs' worth freed again, one object kept in each
  // slab so that none is empty (empty ones go back to the page heap).
  std::vector<void*> a(4 * per_slab);
  REQUIRE(g_central[0][cls].alloc_batch(cls, a.data(), a.size()) == a.size());
  std::vector<void*> kept, freed;
  for (size_t i = 0; i < a.size(); i++) (i % per_slab == 0 ? kept : freed).push_back(a[i]);
  central_free(cls, freed.data(), freed.size());
  CentralStats a0 = g_central[0][cls].stats(cls), b0 = g_central[1][cls].stats(cls);
  REQUIRE(a0.free_objects >= 2 * per_slab + per_slab / 2);
  // Shard 1's next batch comes from shard 0's slabs, and shard 1 carves nothing.
  std::vector<void*> b(per_slab / 2);
  REQUIRE(g_central[1][cls].alloc_batch(cls, b.data(), b.size()) == b.size());
  for (void* p : b) REQUIRE(PageMap::get(p)->shard == 0);
  CentralStats a1 = g_central[0][cls].stats(cls), b1 = g_central[1][cls].stats(cls);
  REQUIRE(b1.slabs == b0.slabs);
  REQUIRE(a1.free_objects == a0.free_objects - b.size());
  REQUIRE(a1.lent == a0.lent + b.size());
  // Without a surplus beyond the reserve, shard 1 carves its own slab instead.
  std::vector<void*> rest(a1.free_objects - 2 * per_slab + 1);
  REQUIRE(g_central[0][cls].alloc_batch(cls, rest.data(), rest.size()) == rest.size());
  void* own;
  REQUIRE(g_central[1][cls].alloc_batch(cls, &own, 1) == 1);
  REQUIRE(PageMap::get(own)->shard == 1);
  // Freed, every object goes back to the shard that carved its slab.
  central_free(cls, b.data(), b.size());
  central_free(cls, rest.data(), rest.size());
  central_free(cls, kept.data(), kept.size());
  central_free(cls, &own, 1);
  if (!drained.empty()) central_free(cls, drained.data(), drained.size());
  REQUIRE(in_use(0) == used0);
  REQUIRE(in_use(1) == used1);
}

// --- first touch (core/alloc/first_touch.h) ---

namespace {

// What /proc/self/pagemap says of the page holding p: present, and mapped by this
// process alone (bit 56). The shared zero page, which a read of a never-written
// anonymous page maps, is present but not exclusive.
struct PageState {
  bool present, exclusive;
};
PageState page_state(const void* p) {
  static int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  uint64_t e = 0;
  off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / os::kOsPage * sizeof e);
  REQUIRE(pread(fd, &e, sizeof e, at) == static_cast<ssize_t>(sizeof e));
  return PageState{(e >> 63 & 1) != 0, (e >> 56 & 1) != 0};
}

// The pages overlapping [p, p + bytes) that are present and exclusive / that read as
// the zero page.
struct PageCount {
  size_t own, zero;
};
PageCount count_pages(const void* p, size_t bytes) {
  PageCount n{0, 0};
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(os::kOsPage - 1);
  for (; a < reinterpret_cast<uintptr_t>(p) + bytes; a += os::kOsPage) {
    PageState s = page_state(reinterpret_cast<void*>(a));
    if (s.present && s.exclusive) n.own++;
    if (s.present && !s.exclusive) n.zero++;
  }
  return n;
}

size_t pages_overlapping(const void* p, size_t bytes) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(os::kOsPage - 1);
  return (reinterpret_cast<uintptr_t>(p) + bytes - a + os::kOsPage - 1) / os::kOsPage;
}

// Reads every page of the range (as the lists' searches do before anything is written).
void read_pages(const void* p, size_t bytes) {
  const volatile char* c = static_cast<const volatile char*>(p);
  for (size_t i = 0; i < bytes; i += os::kOsPage) (void)c[i];
  (void)c[bytes - 1];
}

}  // namespace

TEST_CASE("os::populate gives pages read as the zero page their own memory, contents kept") {
  const size_t bytes = 3 * os::kOsPage;
  char* p = static_cast<char*>(os::map(bytes));
  REQUIRE(p);
  p[os::kOsPage + 5] = 42;
  read_pages(p, os::kOsPage);  // page 0 read only: the zero page; page 2 untouched
  PageState zero = page_state(p);
  REQUIRE(zero.present);
  REQUIRE_FALSE(zero.exclusive);
  REQUIRE_FALSE(page_state(p + 2 * os::kOsPage).present);
  os::populate(p + 1, bytes - 2);  // rounded out to whole pages
  PageCount n = count_pages(p, bytes);
  CHECK(n.own == 3);
  CHECK(n.zero == 0);
  CHECK(p[os::kOsPage + 5] == 42);
  for (size_t i = 0; i < bytes; i++)
    if (i != os::kOsPage + 5) REQUIRE(p[i] == 0);
  os::unmap(p, bytes);
}

TEST_CASE("a shard's page heap and central lists get pages of their own at its first use") {
  const unsigned sh = kMaxShards - 1;  // past the shards a machine of this size uses
  if (shard_count() > sh) {
    WARN("every shard is in use on this machine");
    return;
  }
  REQUIRE_FALSE(shard_prepared(sh));
  struct Row {
    const void* p;
    size_t bytes;
  } rows[] = {{&g_page_heap[sh], sizeof g_page_heap[sh]},
              {g_central[sh], sizeof g_central[sh]}};
  // Read first, as the lists are: without preparing, the pages are the zero page.
  size_t zero = 0;
  for (const Row& r : rows) {
    read_pages(r.p, r.bytes);
    zero += count_pages(r.p, r.bytes).zero;
  }
  REQUIRE(zero >= 6);  // the rows span 9-10 pages; only those shared with neighbours may be written
  prepare_shard(sh);
  REQUIRE(shard_prepared(sh));
  for (const Row& r : rows) {
    PageCount n = count_pages(r.p, r.bytes);
    CHECK(n.zero == 0);
    CHECK(n.own == pages_overlapping(r.p, r.bytes));
  }
}

TEST_CASE("the shard an allocation used is prepared") {
  void* p = heap::alloc(200);
  REQUIRE(p);
  heap::free(p);
  CHECK(shard_prepared(current_shard()));
  CHECK(shard_prepared(PageMap::get(p)->shard));
}

TEST_CASE("a CPU's sheaf slots get pages of their own before its capacity reaches them") {
  if (!percpu_decide()) return;  // per-thread caches: no sheaves
  // Pinned, so that the class grown is the one on this CPU.
  cpu_set_t old, one;
  REQUIRE(sched_getaffinity(0, sizeof old, &old) == 0);
  uint32_t c = rseq_cpu_id();
  REQUIRE(c < g_cpu_count);
  CPU_ZERO(&one);
  CPU_SET(c, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  // A size class never used on this CPU whose first slots lie on a page nobody touched.
  void** slots = reinterpret_cast<void**>(g_cpu_region + (size_t{c} << kCpuRegionShift));
  unsigned cls = 0;
  for (unsigned k = kNumClasses - 1; k > 0 && !cls; k--) {
    void** first = slots + kSheafLayout.begin[k];
    size_t bytes = (batch_size(k) + 1) * sizeof(void*);
    if (count_pages(first, bytes).own == 0 && count_pages(first, bytes).zero == 0) cls = k;
  }
  if (!cls) {
    WARN("every size class's first slots are already touched on CPU " << c);
  } else {
    void* obj = nullptr;
    REQUIRE(g_central[shard_of_cpu(c)][cls].alloc_batch(cls, &obj, 1) == 1);
    // A free that finds no capacity: the miss grows the sheaf and moves nothing.
    REQUIRE(percpu_put(cls, &obj, 1) == 0);
    void** first = slots + kSheafLayout.begin[cls];
    size_t bytes = (batch_size(cls) + 1) * sizeof(void*);
    PageCount n = count_pages(first, bytes);
    CHECK(n.zero == 0);
    CHECK(n.own == pages_overlapping(first, bytes));
    heap::free(obj);
  }
  REQUIRE(sched_setaffinity(0, sizeof old, &old) == 0);
}

TEST_CASE("the statistics' metadata counts the shards' prepared arrays and the CPUs' headers") {
  heap::free(heap::alloc(64));  // this CPU's shard is prepared by now
  size_t shards = prepared_shard_bytes(), headers = percpu_header_bytes();
  CHECK(shards >= sizeof g_page_heap[0] + sizeof g_central[0]);
  CHECK(shards % os::kOsPage == 0);
  if (percpu_decided() && percpu_stats().cpus_used > 0) CHECK(headers >= os::kOsPage);
  CHECK(heap::stats().metadata >= shards + headers);
}
