// Size-class table properties: coverage, rounding waste, alignment, slab geometry,
// and the exactness of the division magic used to validate freed pointers.
#include <catch2/catch.hpp>

#include "core/ds/ds.h"

using namespace uslab;

TEST_CASE("every size maps to the smallest class that fits") {
  for (size_t size = 1; size <= kMaxSmall; size++) {
    unsigned c = size_to_class(size);
    REQUIRE(c >= 1);
    REQUIRE(c < kNumClasses);
    REQUIRE(class_size(c) >= size);
    if (c > 1) REQUIRE(class_size(c - 1) < size);
  }
  REQUIRE(size_to_class(0) == 1);
}

TEST_CASE("rounding waste is at most 25% above 128 bytes and 12.5% from 1 to 16 KiB") {
  for (size_t size = 129; size <= kMaxSmall; size++) {
    size_t waste = class_size(size_to_class(size)) - size;
    REQUIRE(waste * 4 <= size);
    if (size > 1024 && size <= 16384) REQUIRE(waste * 8 <= size);
  }
  // A page plus a header (SQLite's page cache entries) fits within 6%.
  CHECK(class_size(size_to_class(4096 + 272)) == 4608);
  CHECK(class_size(size_to_class(1024 + 8)) == 1152);
}

TEST_CASE("classes are increasing and 16-byte multiples from 16 up") {
  for (unsigned c = 2; c < kNumClasses; c++) {
    REQUIRE(class_size(c) > class_size(c - 1));
    REQUIRE(class_size(c) % 16 == 0);
  }
}

TEST_CASE("slab geometry fits the bitmap and the slab") {
  for (unsigned c = 1; c < kNumClasses; c++) {
    const SizeClassInfo& i = kClassInfo[c];
    // 8 objects or more, except that objects above 4 KiB get shorter slabs (16 KiB's
    // worth of objects or one: one survivor pins a slab), of at most about 64 KiB.
    REQUIRE(i.objects >= (i.size <= 4096 ? 8u : 1u));
    if (i.size > 4096) {
      REQUIRE(i.objects >= 16384 / i.size);
      REQUIRE(size_t{i.slab_pages} * kPageSize <= 65536 + i.size);
    }
    // Page-sized objects from 16 KiB up are slabs of one: page runs, as jemalloc's.
    if (i.size >= 16384 && i.size % kPageSize == 0) REQUIRE(i.objects == 1);
    REQUIRE(i.objects <= kMaxSlabObjects);
    REQUIRE(size_t{i.objects} * i.size <= size_t{i.slab_pages} * kPageSize);
    REQUIRE(i.slab_pages <= kMaxSlabPages);
    REQUIRE(i.tcache_cap >= 4);
    REQUIRE(i.tcache_cap <= 256);
  }
}

TEST_CASE("exact division finds object starts and rejects everything else") {
  for (unsigned c = 1; c < kNumClasses; c++) {
    const SizeClassInfo& i = kClassInfo[c];
    uint64_t limit = uint64_t{i.slab_pages} * kPageSize;
    for (uint64_t off = 0; off <= limit; off++) {
      uint64_t q = ~uint64_t{0};
      bool found = class_index(c, off, i.objects, &q);
      bool start = off % i.size == 0 && off / i.size < i.objects;
      if (found != start || (start && q != off / i.size)) FAIL("class " << c << " off " << off);
    }
    // Offsets far outside the slab (a pointer below the slab wraps around).
    uint64_t q;
    for (uint64_t off : {~uint64_t{0}, ~uint64_t{0} - i.size + 1, uint64_t{1} << 47})
      REQUIRE_FALSE(class_index(c, off, i.objects, &q));
  }
}
