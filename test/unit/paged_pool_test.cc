// PagedPool: records are reused from pages in use first, pages left wholly free go
// back to the OS after the decay time (and read as zero when carved again), a chunk
// left wholly clean is unmapped, and the metadata figure follows.
#include <catch2/catch.hpp>
#include <sys/mman.h>

#include <cerrno>

#include <cstring>
#include <vector>

#include "core/alloc/alloc.h"

using namespace uslab;

namespace {

struct alignas(128) Record {
  unsigned char bytes[256];
};
const size_t kPerPage = os::page_size() / sizeof(Record);

bool resident(const void* p) {
  unsigned char v = 0;
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(os::kernel_page_size() - 1));
  REQUIRE(mincore(page, os::kernel_page_size(), &v) == 0);
  return v & 1;
}

}  // namespace

TEST_CASE("a paged pool reuses pages in use first and purges pages left free") {
  size_t at_start = g_paged_pool_bytes.load();
  PagedPool<Record> pool;
  std::vector<Record*> recs;
  for (size_t i = 0; i < 4 * kPerPage; i++) {
    Record* r = pool.alloc();
    REQUIRE(r != nullptr);
    memset(r, 0xab, sizeof *r);
    recs.push_back(r);
  }
  // Records of one page are contiguous: the first four pages' worth.
  char* page2 = reinterpret_cast<char*>(recs[2 * kPerPage]);
  REQUIRE(reinterpret_cast<uintptr_t>(page2) % os::page_size() == 0);
  for (size_t i = 2 * kPerPage; i < 4 * kPerPage; i++) pool.free(recs[i]);
  pool.free(recs[5]);
  // The record freed in a page still in use comes back before any of the free pages'.
  REQUIRE(pool.alloc() == recs[5]);
  size_t before = g_paged_pool_bytes.load();
  uint64_t now = os::now_ms();
  REQUIRE(pool.purge(now, 1000, false) == 0);  // not free for long enough yet
  REQUIRE(resident(page2));
  REQUIRE(pool.purge(now + 1000, 1000, false) == 2 * os::page_size());
  REQUIRE(!resident(page2));
  REQUIRE(!resident(page2 + os::page_size()));
  REQUIRE(g_paged_pool_bytes.load() == before - 2 * os::page_size());
  // Carved again, the purged pages' records read as zero past their link word.
  bool zero = true;
  for (size_t i = 0; i < 2 * kPerPage; i++) {
    Record* r = pool.alloc();
    REQUIRE(r != nullptr);
    for (size_t b = sizeof(void*); b < sizeof *r; b++) zero = zero && r->bytes[b] == 0;
    recs[2 * kPerPage + i] = r;
  }
  REQUIRE(zero);
  REQUIRE(g_paged_pool_bytes.load() == before);
  for (Record* r : recs) pool.free(r);
  // All four pages purged: the chunk is wholly clean and goes, bookkeeping and all.
  REQUIRE(pool.purge(0, 0, true) > 4 * os::page_size());
  REQUIRE(g_paged_pool_bytes.load() == at_start);
  unsigned char v;
  REQUIRE(mincore(page2, os::kernel_page_size(), &v) == -1);  // unmapped (ENOMEM)
  REQUIRE(errno == ENOMEM);
  // And a new chunk serves the next record.
  Record* again = pool.alloc();
  REQUIRE(again != nullptr);
  pool.free(again);
}

TEST_CASE("a page heap's descriptors go back with its pages") {
  // Many small spans need many descriptors; once they are all free and purged, the
  // descriptor pages are returned too.
  PageHeap ph{Mutex::kUnranked};
  bool z;
  std::vector<Span*> spans;
  // 40 pages of descriptors.
  for (size_t i = 0; i < 40 * os::page_size() / sizeof(Span); i++)
    spans.push_back(ph.alloc(1, 1, SpanKind::kLarge, &z));
  size_t during = g_paged_pool_bytes.load();
  for (Span* s : spans) ph.free(s);
  ph.purge(true);
  REQUIRE(g_paged_pool_bytes.load() + 20 * os::page_size() <= during);
}

TEST_CASE("a page heap's descriptor pages go back a tick after they empty, not a decay") {
  // They hold no program data, and the pool fills its pages in use first: waiting a
  // whole decay after the spans' own purge made them the last of a peak to go back
  // (1.8 s after the frees with decay_ms=1000).
  if (os::page_size() / sizeof(Span) >= PageHeap::kMaxPages) {
    // Each page of descriptors then holds one of every segment's, which lives as long
    // as its segment: no page empties before the segments go, a decay later.
    WARN("a page of descriptors spans a segment's spans here: not checked");
    return;
  }
  const uint64_t saved = g_config.decay_ms;
  g_config.decay_ms = 1600;  // a tick every 100 ms; pages purged 1200 ms old
  PageHeap ph{Mutex::kUnranked};
  bool z;
  Span* keep = ph.alloc(1, 1, SpanKind::kLarge, &z);
  std::vector<Span*> spans;
  for (size_t i = 0; i < 40 * os::page_size() / sizeof(Span); i++)
    spans.push_back(ph.alloc(1, 1, SpanKind::kLarge, &z));
  for (Span* s : spans) ph.free(s);  // they merge: their descriptors are freed now
  size_t before = g_paged_pool_bytes.load();
  os::sleep_ns(150'000'000);
  ph.purge(false);  // the spans are not old enough; their descriptor pages are
  CHECK(g_paged_pool_bytes.load() + 20 * os::page_size() <= before);
  g_config.decay_ms = saved;
  ph.free(keep);
  ph.purge(true);
}
