// core/alloc/thread_cache.h: a thread's cache made on its first call, bins that refill
// and flush half their capacity, the double free at a bin's top, the decay's once
// per tick, and a thread's exit that gives everything back. Each case runs in a
// thread of its own (a fresh cache), calling the bins directly in every mode.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "core/alloc/decay.h"
#include "core/alloc/thread_cache.h"
#include "core/core.h"
#include "test/unit/own_ticks.h"

using namespace uslab;

namespace {
// Runs body in a new thread and waits for it. The process's first allocation (the
// per-CPU decision) is made first, so that the bins' slow path makes a cache.
template <class Body>
void in_thread(Body body) {
  heap::free(heap::alloc(64));
  OwnTicks ticks;  // a tick due on a slow path would empty the bins under test
  std::thread(body).join();
}

size_t live_objects(unsigned cls) {
  CentralStats s = central_stats(cls);
  return s.objects - s.free_objects;
}
}  // namespace

TEST_CASE("a thread's first call makes its cache, whose bins refill and flush by halves") {
  REQUIRE(g_config.tcache);
  const unsigned cls = size_to_class(136);
  in_thread([cls] {
    REQUIRE(t_cache == &g_empty_cache);
    size_t counts[kMaxClasses], caches_before, caches;
    thread_cache_counts(counts, &caches_before);
    void* p = thread_cache_alloc(cls);
    REQUIRE(p != nullptr);
    ThreadCache* tc = t_cache;
    REQUIRE(tc != &g_empty_cache);
    CacheBin& b = tc->bins[cls];
    REQUIRE(b.cap >= 4);
    CHECK(b.count == b.cap / 2 - 1u);  // one batch of half the capacity, one handed out
    CHECK(tc->refills == 1);
    thread_cache_counts(counts, &caches);
    CHECK(caches == caches_before + 1);
    CHECK(counts[cls] >= b.count);
    // Frees fill the bin; the one past its capacity sends the older half to the slabs.
    std::vector<void*> more(b.cap - b.count);
    REQUIRE(g_central[tc->shard][cls].alloc_batch(cls, more.data(), more.size() - 1) ==
            more.size() - 1);
    more.back() = p;
    for (void* q : more) thread_cache_free(q, cls);
    CHECK(b.count == b.cap);
    CHECK(tc->flushes == 0);
    void* extra;
    REQUIRE(g_central[tc->shard][cls].alloc_batch(cls, &extra, 1) == 1);
    thread_cache_free(extra, cls);
    CHECK(tc->flushes == 1);
    REQUIRE(b.count == b.cap - b.cap / 2 + 1u);
    CHECK(b.slots[b.count - 1] == extra);  // the newest stay, hot
    thread_cache_flush_mine();
    CHECK(b.count == 0);
  });
}

TEST_CASE("freeing the object at the top of a bin again is reported as a double free") {
  const unsigned cls = size_to_class(152);
  g_config.abort_on_error = false;
  const uint64_t before = g_bad_free_reports.load();
  in_thread([cls] {
    void* p = thread_cache_alloc(cls);
    thread_cache_free(p, cls);
    const uint32_t count = t_cache->bins[cls].count;
    thread_cache_free(p, cls);
    CHECK(t_cache->bins[cls].count == count);  // not pushed twice
  });
  g_config.abort_on_error = true;
  CHECK(g_bad_free_reports.load() == before + 1);
}

TEST_CASE("the decay empties a thread's bins once per tick") {
  const unsigned cls = size_to_class(168);
  in_thread([cls] {
    void* p = thread_cache_alloc(cls);
    thread_cache_free(p, cls);
    ThreadCache* tc = t_cache;
    REQUIRE(tc->bins[cls].count > 0);
    // A tick, then what a slow path does: its decay notice gives the bins back.
    decay_tick_now();
    decay_notice();
    CHECK(tc->bins[cls].count == 0);
    const uint64_t tick = tc->decay_ticks;
    CHECK(tick == decay_ticks_run());
    p = thread_cache_alloc(cls);
    thread_cache_free(p, cls);
    const uint32_t count = tc->bins[cls].count;
    REQUIRE(count > 0);
    thread_cache_decay(tick);  // the same tick again: already done
    CHECK(tc->bins[cls].count == count);
    thread_cache_decay(tick + 1);
    CHECK(tc->bins[cls].count == 0);
  });
}

TEST_CASE("a thread's exit gives its objects back and its cache up; its hits stay counted") {
  const unsigned cls = size_to_class(184);
  heap::free(heap::alloc(64));
  size_t counts[kMaxClasses], caches_before, caches_after;
  thread_cache_counts(counts, &caches_before);
  uint64_t hits_before[kMaxClasses], hits_after[kMaxClasses];
  thread_cache_hits(hits_before);
  const size_t live = live_objects(cls);
  in_thread([cls] {
    for (int i = 0; i < 1000; i++) thread_cache_free(thread_cache_alloc(cls), cls);
    CHECK(t_cache->bins[cls].count > 0);
  });
  thread_cache_counts(counts, &caches_after);
  thread_cache_hits(hits_after);
  CHECK(caches_after == caches_before);
  CHECK(live_objects(cls) == live);
  // Every allocation but the first (the refill on the slow path) was a hit.
  CHECK(hits_after[cls] - hits_before[cls] == 999);
}
