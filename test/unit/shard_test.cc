// core/alloc/shard.h: slabs belong to the shard that carved them; frees from anywhere
// go back to that shard's central list (its depot: depot_test.cc); a page heap with
// no room takes another heap's free pages before it maps a segment; a shard with
// nothing free borrows another's surplus. These need two shards: on a machine with one
// CPU, a synthetic one of two is adopted (test/unit/synthetic.h).
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/alloc/first_touch.h"
#include "core/alloc/percpu.h"
#include "core/core.h"
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
    // The page may hold an earlier test's freed large object, which the sanitizer
    // build keeps poisoned (track.h) where a purge could not take its OS page.
    track_open(s->start, kPageSize);
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
  // (Holes of 2 pages are whole OS pages up to 16 KiB: with larger ones, none goes.)
  if (os::page_size() <= 2 * kPageSize) {
    CHECK(lender.stats().dirty_bytes <= keeps);
    CHECK(lender.stats().purged_bytes > purged);
  }
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

TEST_CASE("the walks over the shards leave the shards never used untouched") {
  // A single-threaded program in a 64-CPU guest found 2.5 MiB of uslab's arrays
  // resident after one decay tick: the tick locked every shard's depots and central
  // lists, and the locks' writes backed their pages.
  const unsigned before = shard_count();
  RestoreTopology restore;
  if (!adopt_more_shards(4)) return;
  // Whole OS pages inside one of the shard's arrays that were written: mapped to a
  // page of their own, not the kernel's shared zero page that reads map (other shards
  // read a central list's free count and a page heap's free pages when they look for
  // memory to borrow). From /proc/self/pagemap's frame numbers, which only root sees:
  // -1 when they cannot be read.
  auto frame = [](const void* page) -> uint64_t {
    uint64_t e = 0;
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0) return 0;
    if (pread(fd, &e, sizeof e, static_cast<off_t>(reinterpret_cast<uintptr_t>(page) /
                                                  os::kernel_page_size() * sizeof e)) != sizeof e)
      e = 0;
    close(fd);
    return e >> 63 ? e & ((uint64_t{1} << 55) - 1) : 0;  // present: its frame
  };
  void* fresh = mmap(nullptr, os::kernel_page_size(), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(fresh != MAP_FAILED);
  (void)*static_cast<volatile const char*>(fresh);  // a read maps the zero page
  const uint64_t zero = frame(fresh);
  munmap(fresh, os::kernel_page_size());
  // Whether frame f is part of a transparent huge page (/proc/kpageflags' KPF_THP, bit
  // 22; root only, as the frames are). Under the system setting "always" the unit
  // tests' own statics, written before uslab advises its arrays off huge pages, share
  // a huge page with some of those arrays: such pages are resident with it, not
  // written by a walk.
  auto in_huge_page = [](uint64_t f) {
    uint64_t flags = 0;
    int fd = open("/proc/kpageflags", O_RDONLY);
    if (fd < 0) return false;
    if (pread(fd, &flags, sizeof flags, static_cast<off_t>(f * sizeof flags)) != sizeof flags)
      flags = 0;
    close(fd);
    return (flags >> 22 & 1) != 0;
  };
  auto written = [&](const void* p, size_t bytes) -> long {
    if (zero == 0) return -1;
    // uslab's OS pages (os_page) inside the array: one it shares with a shard in use
    // is made writable with that shard's (os::populate rounds out).
    uintptr_t lo = os::page_up(reinterpret_cast<uintptr_t>(p));
    uintptr_t hi = os::page_down(reinterpret_cast<uintptr_t>(p) + bytes);
    long n = 0;
    for (uintptr_t a = lo; a < hi; a += os::kernel_page_size()) {
      uint64_t f = frame(reinterpret_cast<void*>(a));
      n += f != 0 && f != zero && !in_huge_page(f);
    }
    return n;
  };
  heap::free(heap::alloc(100));
  decay_tick_now();
  heap::stats();
  heap::trim();
  decay_tick_now();
  if (zero == 0) {
    WARN("the frame numbers in /proc/self/pagemap need root: not checked");
    return;
  }
  for (unsigned sh = before; sh < before + 4; sh++) {
    INFO("shard " << sh);
    CHECK_FALSE(shard_used(sh));
    CHECK(written(g_depot[sh], sizeof g_depot[sh]) == 0);
    CHECK(written(g_central[sh], sizeof g_central[sh]) == 0);
    CHECK(written(&g_page_heap[sh], sizeof g_page_heap[sh]) == 0);
  }
}
