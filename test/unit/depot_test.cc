// core/alloc/depot.h: full sheaves in and out whole or in part, the bound on what a
// depot keeps, the decay of sheaves nobody took for a whole tick, and drains that
// leave objects in their owners' depots (the last two need two shards: a synthetic
// machine of two is adopted where this one has one, test/unit/synthetic.h).
#include <catch2/catch.hpp>
#include <algorithm>
#include <csignal>
#include <vector>

#include "core/alloc/obj_cache.h"
#include "core/alloc/percpu.h"
#include "core/core.h"
#include "test/unit/child.h"
#include "test/unit/own_ticks.h"
#include "test/unit/synthetic.h"

using namespace uslab;

namespace {
// n objects of class cls from shard 0's slabs.
std::vector<void*> from_slabs(unsigned cls, size_t n) {
  std::vector<void*> v(n);
  REQUIRE(g_central[0][cls].alloc_batch(cls, v.data(), n) == n);
  return v;
}

// Objects out of shard 0's slabs (held by the test or by the depot). Free ones are no
// measure: a slab that becomes wholly free goes back to the page heap.
size_t out_of_slabs(unsigned cls) {
  CentralStats s = g_central[0][cls].stats(cls);
  return s.objects - s.free_objects;
}

// Shard 0's depot of cls, emptied, and asked by a refill (a class in use: not stale).
Depot& empty_depot_in_use(unsigned cls) {
  Depot& d = g_depot[0][cls];
  d.flush(cls);
  d.asked();
  return d;
}
}  // namespace

TEST_CASE("a sheaf given to the depot comes back whole, or in part to a smaller take") {
  OwnTicks ticks;  // no tick but the test's own empties the depot
  const unsigned cls = size_to_class(72);
  Depot& d = empty_depot_in_use(cls);
  const size_t n = batch_size(cls);
  std::vector<void*> objs = from_slabs(cls, n);
  const uint64_t hits = d.stats().hits;
  d.give(cls, objs.data(), n, false);
  CHECK(d.stats().objects == n);
  // A take of fewer objects than the sheaf holds (the bulk API) gets the newest ones.
  std::vector<void*> part(5);
  REQUIRE(d.take(cls, part.data(), 5) == 5);
  CHECK(std::equal(part.begin(), part.end(), objs.end() - 5));
  CHECK(d.stats().objects == n - 5);
  // A take of a sheaf's worth gets what is left of it.
  std::vector<void*> rest(n);
  REQUIRE(d.take(cls, rest.data(), n) == n - 5);
  CHECK(std::equal(objs.begin(), objs.end() - 5, rest.begin()));
  CHECK(d.stats().objects == 0);
  CHECK(d.stats().hits == hits + 2);
  // An empty depot refills from its shard's slabs: a batch, not a hit, of other
  // objects than those held.
  std::vector<void*> fresh(n);
  REQUIRE(d.take(cls, fresh.data(), n) == n);
  CHECK(d.stats().hits == hits + 2);
  std::vector<void*> all = objs;
  all.insert(all.end(), fresh.begin(), fresh.end());
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  central_free(cls, objs.data(), n);
  central_free(cls, fresh.data(), n);
}

TEST_CASE("a depot keeps at most depot_max_full sheaves; the rest go to the slabs") {
  OwnTicks ticks;  // no tick but the test's own empties the depot
  const unsigned cls = size_to_class(176);
  Depot& d = empty_depot_in_use(cls);
  const size_t n = batch_size(cls), max = depot_max_full(cls);
  REQUIRE(max >= 1);
  std::vector<std::vector<void*>> batches;
  for (size_t i = 0; i < max + 2; i++) batches.push_back(from_slabs(cls, n));
  const size_t out = out_of_slabs(cls);
  for (auto& b : batches) d.give(cls, b.data(), n, false);
  CHECK(d.stats().objects == max * n);
  CHECK(out_of_slabs(cls) == out - 2 * n);  // the two over the bound
  d.flush(cls);
  CHECK(d.stats().objects == 0);
  CHECK(out_of_slabs(cls) == out - (max + 2) * n);
}

TEST_CASE("a CPU's move of several batches is as many sheaves, in and out under one lock") {
  OwnTicks ticks;  // no tick but the test's own empties the depot
  const unsigned cls = size_to_class(600);
  Depot& d = empty_depot_in_use(cls);
  const size_t n = batch_size(cls), max = depot_max_full(cls), k = kSheavesPerMove;
  REQUIRE(k >= 2);
  REQUIRE(k * n <= kMaxRefill);
  if (max < k + 1) {
    // The bound is shared over the shards that held memory (four CPUs of their own
    // in the arm64 guest): below one move and a sheaf, the moves below do not fit.
    WARN("the depot's bound here is " << max << " sheaves over " << shards_used()
                                      << " shards used: not checked");
    return;
  }
  REQUIRE(2 * n <= kMaxBatch);  // one sheaf could hold two batches: the bound counts batches
  std::vector<void*> all = from_slabs(cls, k * n);
  const uint64_t hits = d.stats().hits;
  d.give(cls, all.data(), k * n, false, n);
  CHECK(d.stats().objects == k * n);
  // Every sheaf in one take, the newest first.
  std::vector<void*> out(k * n);
  REQUIRE(d.take(cls, out.data(), k * n, n) == k * n);
  CHECK(d.stats().hits == hits + k);
  for (size_t i = 0; i < k; i++)
    CHECK(std::equal(out.begin() + i * n, out.begin() + (i + 1) * n,
                     all.begin() + (k - 1 - i) * n));
  // One sheaf waits: the take gets it alone, not part of the slabs' too.
  d.give(cls, out.data(), n, false, n);
  REQUIRE(d.take(cls, out.data(), k * n, n) == n);
  // None waits: a batch from the slabs, not k (more raised peaks: slab_drain_size).
  std::vector<void*> fresh(k * n);
  REQUIRE(d.take(cls, fresh.data(), k * n, n) == n);
  // At one sheaf below the bound, k batches keep one sheaf; the others go on to the
  // slabs.
  std::vector<std::vector<void*>> batches;
  for (size_t i = 0; i + 1 < max; i++) batches.push_back(from_slabs(cls, n));
  for (auto& b : batches) d.give(cls, b.data(), n, false, n);
  REQUIRE(d.stats().objects == (max - 1) * n);
  const size_t out_before = out_of_slabs(cls);
  d.give(cls, all.data(), k * n, false, n);
  CHECK(d.stats().objects == max * n);
  CHECK(out_of_slabs(cls) == out_before - (k - 1) * n);
  d.flush(cls);
  central_free(cls, fresh.data(), n);
}

TEST_CASE("a depot no refill asked while its shard allocated gives all it holds back") {
  // A program whose sizes drift frees the objects of classes it no longer allocates;
  // kept here, a few per slab pinned 24 MiB of slabs in bench/drift's 2-8 KiB phase.
  OwnTicks ticks;  // no tick but the test's own empties the depot
  const unsigned cls = size_to_class(184);
  Depot& d = g_depot[0][cls];
  d.flush(cls);
  const size_t n = batch_size(cls);
  REQUIRE(depot_max_full(cls) >= 3);
  std::vector<void*> out(n);
  REQUIRE(d.take(cls, out.data(), n) == n);  // a refill asks: the depot is fresh
  std::vector<std::vector<void*>> batches;
  for (int i = 0; i < 3; i++) batches.push_back(from_slabs(cls, n));
  d.give(cls, out.data(), n, false);
  d.give(cls, batches[0].data(), n, false);
  CHECK(d.stats().objects == 2 * n);
  CHECK_FALSE(d.stale());
  // Allocations of other classes: the epochs pass, and the depot is kept while they
  // stay within kDepotStaleEpochs.
  for (uint32_t e = 0; e < kDepotStaleEpochs; e++) depot_note_epoch(0);
  CHECK_FALSE(d.stale());
  d.give(cls, batches[1].data(), n, false);
  CHECK(d.stats().objects == 3 * n);
  depot_note_epoch(0);
  CHECK(d.stale());
  // The next give sends its batch and every sheaf held to the slabs.
  const size_t before = out_of_slabs(cls);
  d.give(cls, batches[2].data(), n, false);
  CHECK(d.stats().objects == 0);
  CHECK(out_of_slabs(cls) == before - 4 * n);
  // A refill asks again: what is given next is kept.
  REQUIRE(d.take(cls, out.data(), n) == n);
  CHECK_FALSE(d.stale());
  d.give(cls, out.data(), n, false);
  CHECK(d.stats().objects == n);
  d.flush(cls);
}

TEST_CASE("the depots' bound is shared over the shards that held memory, not all shards") {
  // A program on one CPU of 16 kept 64 KiB a class in its one depot: what it freed
  // beyond went to the slabs and came back from there on the next request.
  const unsigned cls = size_to_class(1500);
  const size_t sheaf = size_t{batch_size(cls)} * class_size(cls);
  auto expect = [&](unsigned used) {
    size_t bytes = std::max((size_t{256} << 10) / used, size_t{64} << 10);
    return static_cast<uint32_t>(std::max<size_t>(bytes / sheaf, 1));
  };
  const unsigned used = shards_used(), before = shard_count();
  CHECK(depot_max_full(cls) == expect(used));
  RestoreTopology restore;
  if (!adopt_more_shards(4)) return;
  // More shards that hold nothing leave the bound as it was.
  CHECK(shards_used() == used);
  CHECK(depot_max_full(cls) == expect(used));
  // A new shard that carves a slab shares it; marking it again counts it once.
  void* own;
  REQUIRE(g_central[before][cls].alloc_batch(cls, &own, 1) == 1);
  note_shard_used(before);
  CHECK(shards_used() == used + 1);
  CHECK(depot_max_full(cls) == expect(used + 1));
  central_free(cls, &own, 1);
}

TEST_CASE("the decay tick returns the sheaves that no take reached over its last ticks") {
  OwnTicks ticks;  // no tick but the test's own empties the depot
  const unsigned cls = size_to_class(208);
  Depot& d = empty_depot_in_use(cls);
  const size_t n = batch_size(cls);
  REQUIRE(depot_max_full(cls) >= 3);
  std::vector<std::vector<void*>> batches;
  for (int i = 0; i < 3; i++) batches.push_back(from_slabs(cls, n));
  // Ticks with an empty depot: every low-water mark in its window is 0.
  for (unsigned t = 0; t < kCacheIdleTicks; t++) d.decay(cls);
  for (auto& b : batches) d.give(cls, b.data(), n, false);
  // The first tick after the gives: every sheaf arrived within the interval.
  d.decay(cls);
  CHECK(d.stats().objects == 3 * n);
  // One sheaf taken and given back within each of the next intervals: the depot never
  // held fewer than two through them, and two sheaves' worth go once that held for
  // kCacheIdleTicks intervals; one stays.
  std::vector<void*> used(n);
  auto take_and_give_back = [&] {
    REQUIRE(d.take(cls, used.data(), n) == n);
    d.give(cls, used.data(), n, false);
  };
  for (unsigned t = 1; t < kCacheIdleTicks; t++) {
    take_and_give_back();
    d.decay(cls);
    CHECK(d.stats().objects == 3 * n);
  }
  take_and_give_back();
  const size_t out = out_of_slabs(cls);
  d.decay(cls);
  CHECK(d.stats().objects == n);
  CHECK(out_of_slabs(cls) == out - 2 * n);
  // Nobody takes it during the next intervals: it goes after kCacheIdleTicks of them.
  for (unsigned t = 1; t < kCacheIdleTicks; t++) {
    d.decay(cls);
    CHECK(d.stats().objects == n);
  }
  d.decay(cls);
  CHECK(d.stats().objects == 0);
  CHECK(out_of_slabs(cls) == out - 3 * n);
}

TEST_CASE("a drain leaves objects in the depot of the shard that owns them") {
  ensure_two_shards();
  unsigned cls = size_to_class(80);
  size_t n = batch_size(cls);
  std::vector<void*> objs(n);
  REQUIRE(g_central[1][cls].alloc_batch(cls, objs.data(), n) == n);
  g_depot[1][cls].asked();  // shard 1's CPUs use the class
  size_t d0 = g_depot[0][cls].stats().objects, d1 = g_depot[1][cls].stats().objects;
  const uint64_t remote = g_depot[1][cls].stats().remote;
  depot_give(0, cls, objs.data(), n);
  REQUIRE(g_depot[0][cls].stats().objects == d0);
  REQUIRE(g_depot[1][cls].stats().objects == d1 + n);
  CHECK(g_depot[1][cls].stats().remote == remote + n);  // drained on shard 0's CPUs
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
  for (unsigned sh : {0u, 1u}) g_depot[sh][cls].asked();  // both shards use the class
  depot_give(current_shard(), cls, mixed.data(), mixed.size());
  // Each owner's next refill gets all of its objects in one take.
  std::vector<void*> back(batch_size(cls));
  REQUIRE(g_depot[0][cls].take(cls, back.data(), back.size()) == half);
  central_free(cls, back.data(), half);
  REQUIRE(g_depot[1][cls].take(cls, back.data(), back.size()) == half);
  central_free(cls, back.data(), half);
}

TEST_CASE("a class one shard carved drains to that shard's depot; a second owner is looked up") {
  ensure_two_shards();
  // A cache's class: no other test carved it (every size class has slabs of both shards
  // by now), and its owners were cleared when it was made.
  int err = 0;
  ObjCache* cache = obj_cache_create("owners", 200, 8, 0, nullptr, &err);
  REQUIRE(cache);
  const unsigned cls = cache->cls;
  REQUIRE(g_central_class_shards[cls].load() == 0);
  size_t n = batch_size(cls);
  std::vector<void*> objs(n);
  REQUIRE(g_central[1][cls].alloc_batch(cls, objs.data(), n) == n);
  CHECK(g_central_class_shards[cls].load() == 2);  // shard 1's bit alone
  for (unsigned sh : {0u, 1u}) g_depot[sh][cls].asked();
  depot_give(0, cls, objs.data(), n);
  REQUIRE(g_depot[0][cls].stats().objects == 0);
  REQUIRE(g_depot[1][cls].stats().objects == n);
  std::vector<void*> back(n);
  REQUIRE(g_depot[1][cls].take(cls, back.data(), n) == n);
  // Shard 0 carves too: drains of both owners' objects go to each owner again.
  std::vector<void*> mine(n);
  REQUIRE(g_central[0][cls].alloc_batch(cls, mine.data(), n) == n);
  CHECK(g_central_class_shards[cls].load() == 3);
  std::vector<void*> mixed;
  for (size_t i = 0; i < n; i++) mixed.push_back(i % 2 ? back[i] : mine[i]);
  depot_give(1, cls, mixed.data(), n);
  CHECK(g_depot[0][cls].stats().objects == (n + 1) / 2);
  CHECK(g_depot[1][cls].stats().objects == n / 2);
  for (unsigned sh : {0u, 1u}) g_depot[sh][cls].flush(cls);
  for (size_t i = 0; i < n; i++) central_free(cls, i % 2 ? &mine[i] : &back[i], 1);
  obj_cache_destroy(cache);
  // Made again, the class starts with no owner.
  ObjCache* again = obj_cache_create("owners", 200, 8, 0, nullptr, &err);
  REQUIRE(again);
  CHECK(again->cls == cls);
  CHECK(g_central_class_shards[cls].load() == 0);
  obj_cache_destroy(again);
}

#if USLAB_DEBUG_CHECKS
TEST_CASE("debug checks: a batch move of no object, or a sheaf or slab take out of bounds, aborts") {
  const unsigned cls = size_to_class(72);
  auto dies = [](auto body) {
    return in_child(fork, [&] {
      signal(SIGABRT, SIG_DFL);  // not Catch2's handler, which reports a failure here
      body();
      return 0;
    });
  };
  void* one[1];
  CHECK(dies([&] { percpu_pop_batch(0, cls, one, 0); }) == -SIGABRT);
  CHECK(dies([&] { percpu_push_batch(0, cls, one, 0); }) == -SIGABRT);
  CHECK(dies([&] { g_depot[0][cls].give(cls, one, 1, false, 0); }) == -SIGABRT);
  CHECK(dies([&] { g_depot[0][cls].take(cls, one, 1, 2); }) == -SIGABRT);
  // The same calls within their bounds go on.
  std::vector<void*> objs = from_slabs(cls, 2);
  CHECK(dies([&] {
          g_depot[0][cls].give(cls, objs.data(), 2, false, 1);
          g_depot[0][cls].take(cls, objs.data(), 2, 1);
        }) == 0);
  central_free(cls, objs.data(), 2);
}
#endif
