// core/alloc/huge_cache.h: freed huge blocks are kept and reused without new pages,
// grown in place, zeroed for calloc, and not kept when guarded.
#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/core.h"
#include "test/unit/vm_flags.h"

using namespace uslab;

TEST_CASE("freed huge blocks are reused without new pages, grown, zeroed for calloc, and guarded") {
  heap::trim();  // empty the huge cache
  constexpr size_t kMiB = size_t{1} << 20;
  auto* p = static_cast<unsigned char*>(heap::alloc(9 * kMiB));
  REQUIRE(p != nullptr);
  memset(p, 0xab, 9 * kMiB);
  heap::free(p);
  REQUIRE(huge_cache_bytes() >= 9 * kMiB);
  // A smaller huge block takes the cached segment: same address, no fresh mapping.
  auto* q = static_cast<unsigned char*>(heap::alloc(6 * kMiB));
  REQUIRE(q == p);
  REQUIRE(heap::usable_size(q) >= 6 * kMiB);
  REQUIRE(huge_cache_bytes() == 0);
  // Freed again, the object is guarded while cached: a second free is reported.
  heap::free(q);
  g_config.abort_on_error = false;
  uint64_t before = g_bad_free_reports.load();
  heap::free(q);
  REQUIRE(g_bad_free_reports.load() == before + 1);
  g_config.abort_on_error = true;
  // calloc from the dirty cached segment still reads as zero.
  auto* z = static_cast<unsigned char*>(heap::alloc_zeroed(7 * kMiB));
  REQUIRE(z == p);
  bool zero = true;
  for (size_t i = 0; i < 7 * kMiB; i += 4096) zero = zero && z[i] == 0 && z[i + 4095] == 0;
  REQUIRE(zero);
  heap::free(z);
  heap::trim();
  REQUIRE(huge_cache_bytes() == 0);
  // A block larger than every cached segment grows the largest into it (mremap: its
  // pages reused, nothing kept beside the new block), as a doubling vector asks: the
  // next block while the last is live, then the last freed.
  auto* a = static_cast<unsigned char*>(heap::alloc(8 * kMiB));
  auto* b = static_cast<unsigned char*>(heap::alloc(16 * kMiB));
  memset(a, 0xcd, 8 * kMiB);
  memset(b, 0xcd, 16 * kMiB);
  heap::free(a);
  REQUIRE(huge_cache_bytes() >= 8 * kMiB);
  size_t mapped = segment_mapped_bytes();
  auto* c = static_cast<unsigned char*>(heap::alloc_zeroed(32 * kMiB));
  REQUIRE(c != nullptr);
  REQUIRE(huge_cache_bytes() == 0);
  REQUIRE(segment_mapped_bytes() < mapped + 32 * kMiB);  // a fresh one: 32 MiB + a page more
  REQUIRE(heap::usable_size(c) >= 32 * kMiB);
  zero = true;
  for (size_t i = 0; i < 32 * kMiB; i += 4096) zero = zero && c[i] == 0 && c[i + 4095] == 0;
  REQUIRE(zero);
  heap::free(b);
  heap::free(c);
  heap::trim();
  REQUIRE(huge_cache_bytes() == 0);
  // Kept blocks are bounded by a share of the rest of the heap (at least 32 MiB):
  // four 20 MiB blocks freed in a small heap leave one kept, not four.
  std::vector<void*> blocks(4);
  for (void*& blk : blocks) blk = heap::alloc(20 * kMiB);
  for (void* blk : blocks) heap::free(blk);
  const size_t kept = huge_cache_bytes();
  const size_t rest = segment_mapped_bytes() - kept;
  INFO("kept " << kept << " of a heap of " << rest << " bytes besides");
  REQUIRE(kept > 0);
  CHECK(kept <= std::max(kHugeCacheMinBytes, rest / kHugeCacheHeapShare));
  if (rest / kHugeCacheHeapShare < 40 * kMiB) CHECK(kept < 40 * kMiB);
  heap::trim();
}
