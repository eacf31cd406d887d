// core/alloc/decay.h: the decay's backlog (what a tick could still give back, which the
// background thread sleeps on) counts a freed peak and is empty after a trim. What
// each layer gives back on a tick is tested with the layer (depot, thread cache,
// per-CPU sheaves, central lists, page heap).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "core/heap.h"

using namespace uslab;

TEST_CASE("the decay backlog counts a freed peak and is empty after a trim") {
  heap::trim();
  std::vector<void*> objs(40000);
  for (void*& p : objs) {
    p = heap::alloc(200);
    memset(p, 1, 200);
  }
  for (void* p : objs) heap::free(p);
  DecayBacklog b = decay_backlog();
  REQUIRE(b.work);
  // The slabs emptied by the frees are free dirty pages (or cached objects) now.
  REQUIRE(b.bytes >= objs.size() * 200 / 2);
  heap::trim();
  b = decay_backlog();
  // malloc_trim gives back everything a tick would (deferred frees aside: none here).
  REQUIRE(b.bytes == 0);
}
