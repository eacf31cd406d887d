// core/platform/os.h: the raw mapping calls' contracts the segments rely on.
#include <catch2/catch.hpp>
#include <sys/mman.h>

#include <cstdint>

#include "core/core.h"

using namespace uslab;

namespace {
// Whether the page at p is mapped (mincore fails with ENOMEM on an unmapped range).
bool mapped(void* p) {
  unsigned char v;
  return mincore(p, os::kernel_page_size(), &v) == 0;
}
}  // namespace

TEST_CASE("a failed move's destination is unmapped only when nobody mapped it since") {
  const size_t bytes = size_t{4} << 20;
  char* p = static_cast<char*>(os::map_aligned(bytes, bytes));
  REQUIRE(p != nullptr);
  // Unmapped already (as a failed MREMAP_FIXED leaves it) and free: claimed, released.
  os::unmap(p, bytes);
  os::unmap_if_unclaimed(p, bytes);
  CHECK_FALSE(mapped(p));
  // Mapped again by someone else meanwhile: left alone, contents kept.
  void* other = mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  REQUIRE(other == p);
  p[100] = 42;
  os::unmap_if_unclaimed(p, bytes);
  REQUIRE(mapped(p));
  CHECK(p[100] == 42);
  munmap(p, bytes);
}
