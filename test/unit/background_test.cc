// The decay's backlog, a thread's own cache given back by the tick, the
// background_thread option, and the caller test that decides where the background
// thread may be started (core/alloc/decay.h, background.h, platform/helper_thread.h).
// The thread itself and the caller test are tested through the preloaded library
// (conformance/background.c, stress/idle_return.c).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "core/heap.h"

using namespace uslab;

TEST_CASE("background_thread takes auto, true and false, and is auto by default") {
  Config cfg;
  REQUIRE(cfg.background_thread == Config::Background::kAuto);
  config_parse(cfg, "background_thread=false", "test");
  REQUIRE(cfg.background_thread == Config::Background::kOff);
  config_parse(cfg, "background_thread=true", "test");
  REQUIRE(cfg.background_thread == Config::Background::kOn);
  config_parse(cfg, "background_thread=auto", "test");
  REQUIRE(cfg.background_thread == Config::Background::kAuto);
  config_parse(cfg, "background_thread=off", "test");
  REQUIRE(cfg.background_thread == Config::Background::kOff);
  config_parse(cfg, "background_thread=sometimes", "test");  // warned, left as it was
  REQUIRE(cfg.background_thread == Config::Background::kOff);
}

TEST_CASE("a page heap's backlog holds its dirty pages until they are purged") {
  PageHeap ph{Mutex::kUnranked};
  bool z;
  size_t dirty = 1;
  REQUIRE_FALSE(ph.backlog(&dirty));
  REQUIRE(dirty == 0);
  Span* keep = ph.alloc(1, 1, SpanKind::kLarge, &z);
  Span* s = ph.alloc(8, 1, SpanKind::kLarge, &z);
  memset(s->start, 1, s->bytes());
  ph.free(s);
  REQUIRE(ph.backlog(&dirty));
  REQUIRE(dirty == 8 * kPageSize);
  ph.purge(true);
  // Purged, but a clean segment with a live page and no empty descriptor page: nothing.
  REQUIRE_FALSE(ph.backlog(&dirty));
  REQUIRE(dirty == 0);
  ph.free(keep);
  REQUIRE(ph.backlog(&dirty));  // the page just freed
  ph.purge(true);
  REQUIRE_FALSE(ph.backlog(&dirty));  // the segment unmapped, its descriptors purged
}

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

TEST_CASE("a thread's own cache goes back once per decay tick") {
  heap::free(heap::alloc(64));  // the mode is chosen on the first slow path
  if (g_percpu) return;  // per-CPU sheaves: the tick itself empties them (heap_test)
  auto cached = [] {
    size_t counts[kMaxClasses], n;
    thread_cache_counts(counts, &n);
    size_t total = 0;
    for (size_t c : counts) total += c;
    return total;
  };
  std::vector<void*> objs(50);
  for (void*& p : objs) p = heap::alloc(64);
  for (void* p : objs) heap::free(p);
  REQUIRE(cached() > 0);
  // A real tick, so that the slow paths below (a hit counter's carry, a drain) pass
  // this thread the tick it already has: a made-up number would differ from the
  // clock's, and their decay notice would empty the cache again (a flaky failure in
  // the ThreadSanitizer run). The clock's next tick is a whole period away.
  decay_tick_now();
  decay_notice();  // what a slow path does: the thread's cache goes back at the tick
  REQUIRE(cached() == 0);
  uint64_t tick = t_cache->decay_ticks;
  // Once per tick: the same count again leaves what the thread cached since.
  for (void*& p : objs) p = heap::alloc(64);
  for (void* p : objs) heap::free(p);
  size_t kept = cached();
  REQUIRE(kept > 0);
  thread_cache_decay(tick);
  REQUIRE(cached() == kept);
  thread_cache_decay(tick + 1);
  REQUIRE(cached() == 0);
}

TEST_CASE("a wanted background thread is not started before the library's constructor") {
  // The unit tests never run the constructor (background_init): here the caller test
  // could not be trusted (this binary mixes the core with code built without frame
  // pointers), so the thread must stay unstarted, whatever is freed.
  config_init();
  if (g_config.background_thread == Config::Background::kOff) return;
  background_want();
  REQUIRE(background_state() == BackgroundState::kWanted);
  REQUIRE((g_background_poke.load() & kPokeStart) != 0);
  background_poke();
  REQUIRE(background_state() == BackgroundState::kWanted);
  REQUIRE(background_stats().veto == os::ThreadVeto::kNotReady);
  char line[256];
  background_describe(line, sizeof line);
  REQUIRE(strstr(line, "before the library's constructor") != nullptr);
}
