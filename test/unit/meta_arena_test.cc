// core/alloc/meta_arena.h: the metadata arena's alignment, rounding and chunks, and a
// record pool's reuse of what was freed (on the process's own arena and the huge
// segments' descriptor pool: the allocator's locks are registered ones).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/core.h"

using namespace uslab;

namespace {
bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }
}  // namespace

TEST_CASE("the metadata arena hands out zeroed records, aligned and apart") {
  char* a = static_cast<char*>(g_meta_arena.alloc(1));
  char* b = static_cast<char*>(g_meta_arena.alloc(100));
  char* c = static_cast<char*>(g_meta_arena.alloc(10, 4096));
  REQUIRE((a && b && c));
  CHECK(aligned(a, 64));  // at least a cache line, whatever was asked
  CHECK(aligned(b, 64));
  CHECK(aligned(c, 4096));
  // Rounded up to 64 bytes: neighbours do not share a line.
  CHECK((b >= a + 64 || b + 128 <= a));
  bool zero = true;
  for (int i = 0; i < 100; i++) zero &= b[i] == 0;
  CHECK(zero);
  memset(b, 1, 128);  // the whole rounded record is its own
  CHECK(c[0] == 0);
}

TEST_CASE("a record larger than a chunk gets a chunk of its own size") {
  const size_t before = g_meta_arena.mapped();
  const size_t big = (size_t{3} << 20) + 1;
  char* p = static_cast<char*>(g_meta_arena.alloc(big));
  REQUIRE(p != nullptr);
  CHECK(g_meta_arena.mapped() - before >= big);
  CHECK(g_meta_arena.mapped() - before <= big + (size_t{1} << 20));
  p[0] = 1;
  p[big - 1] = 1;
  // The next small record comes from that chunk's rest or a fresh one: never inside it.
  char* q = static_cast<char*>(g_meta_arena.alloc(64));
  REQUIRE(q != nullptr);
  CHECK((q >= p + big || q + 64 <= p));
}

TEST_CASE("a record pool gives back what was freed last, first, and carves the rest") {
  std::vector<Span*> spans;
  for (int i = 0; i < 40; i++) {
    Span* s = g_span_pool.alloc();
    REQUIRE(s != nullptr);
    CHECK(aligned(s, alignof(Span)));
    spans.push_back(s);
  }
  std::vector<Span*> sorted = spans;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  g_span_pool.free(spans[7]);
  g_span_pool.free(spans[3]);
  CHECK(g_span_pool.alloc() == spans[3]);
  CHECK(g_span_pool.alloc() == spans[7]);
  for (Span* s : spans) g_span_pool.free(s);
}
