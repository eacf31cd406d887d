// The lock table (core/platform/lock_table.h): every lock of the core is registered
// with its rank, the registry is in rank order, and in debug-check builds a lock
// taken against the order, or one missing from the registry, is reported.
#include <catch2/catch.hpp>

#include <csignal>
#include <set>
#include <thread>

#include "core/alloc/central.h"
#include "core/alloc/depot.h"
#include "core/alloc/meta_arena.h"
#include "core/alloc/obj_cache.h"
#include "core/alloc/page_heap.h"
#include "core/alloc/segment.h"
#include "core/core.h"
#include "test/unit/child.h"
#include "test/unit/every_kind.h"

using namespace uslab;

namespace {

// Every kind of allocation and the slow paths that make the lock sets that grow
// (per-CPU metadata, deferred-free slots).
void exercise_heap() {
  alloc_and_free_every_kind();
  heap::free_deferred(heap::alloc(64));
  heap::deferred_barrier();
  int err = 0;
  ObjCache* c = obj_cache_create("lock-table", 72, 8, 0, nullptr, &err);
  REQUIRE(c != nullptr);
  obj_cache_destroy(c);
  heap::topology_print([](void*, const char*) {}, nullptr);
  (void)heap::stats();
  heap::decay_now();
}

}  // namespace

TEST_CASE("the core's locks are registered with their ranks, and the registry is in rank order") {
  exercise_heap();
  CHECK(lock_rank_of(&g_page_heap[0].lock()) == LockRank::kPageHeap);
  CHECK(lock_rank_of(&g_depot[0][1].lock()) == LockRank::kDepot);
  CHECK(lock_rank_of(&g_depot[0][kMaxClasses - 1].lock()) == LockRank::kDepot);
  CHECK(lock_rank_of(&g_central[0][7].lock()) == LockRank::kCentral);
  CHECK(lock_rank_of(&g_meta_arena.lock()) == LockRank::kMetaArena);
  CHECK(lock_rank_of(&g_span_pool.lock()) == LockRank::kMetaPool);
  CHECK(lock_rank_of(&PageMap::lock()) == LockRank::kPageMap);
  Mutex outside{Mutex::kUnranked};
  CHECK(lock_rank_of(&outside) == LockRank::kNone);

  uint32_t n = 0;
  const LockSet* const* sets = lock_sets(&n);
  REQUIRE(n > 0);
  std::set<LockRank> ranks;
  size_t locks = 0;
  for (uint32_t k = 0; k < n; k++) {
    if (k) CHECK(sets[k - 1]->rank <= sets[k]->rank);
    ranks.insert(sets[k]->rank);
    uint32_t count = sets[k]->count();
    locks += count;
    for (uint32_t i = 0; i < count; i++) CHECK(lock_rank_of(sets[k]->at(i)) == sets[k]->rank);
  }
  // Every rank of the table has its locks here, but mallctl's (compat/, not in the
  // core these tests link).
  for (auto r = static_cast<unsigned>(LockRank::kTopologyPrint);
       r <= static_cast<unsigned>(LockRank::kProfiler); r++) {
    INFO("rank " << r << " (" << lock_rank_name(static_cast<LockRank>(r)) << ")");
    CHECK(ranks.count(static_cast<LockRank>(r)) == 1);
  }
  CHECK(locks >= 2 * (kMaxClasses - 1) + 10);
}

#if USLAB_DEBUG_CHECKS
// In a child that is to die of a report: the default actions, not Catch's handlers
// (which would report the expected death as a failure, and allocate in a handler).
static void die_plainly() {
  for (int sig : {SIGABRT, SIGILL, SIGTRAP, SIGSEGV}) signal(sig, SIG_DFL);
}

TEST_CASE("debug checks: a lock taken against the rank order is reported and aborts") {
  exercise_heap();
  int st = in_child(fork, [] {
    LockGuard depot(g_depot[0][1].lock());
    LockGuard central(g_central[0][1].lock());  // in order: fine
    return 0;
  });
  CHECK(st == 0);
  st = in_child(fork, [] {
    die_plainly();
    LockGuard central(g_central[0][1].lock());
    LockGuard depot(g_depot[0][1].lock());  // a depot after a central list
    return 0;
  });
  CHECK(st < 0);
}

TEST_CASE("debug checks: an allocator lock missing from the registry is reported") {
  static constinit Mutex stray;  // made as the core's locks are, but not registered
  CHECK(in_child(fork, [] {
          die_plainly();
          LockGuard g(stray);
          return 0;
        }) < 0);
  Mutex outside{Mutex::kUnranked};  // a lock outside the allocator is not checked
  CHECK(in_child(fork, [&] {
          LockGuard g(outside);
          return 0;
        }) == 0);
}

TEST_CASE("debug checks: held() tells the owner from other threads") {
  Mutex& m = g_page_heap[0].lock();
  CHECK_FALSE(m.held());
  {
    LockGuard g(m);
    CHECK(m.held());
    bool other = true;
    std::thread([&] { other = m.held(); }).join();
    CHECK_FALSE(other);
  }
  CHECK_FALSE(m.held());
}
#endif
