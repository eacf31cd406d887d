// core/alloc/decay.h: the decay's backlog (what a tick could still give back, which the
// background thread sleeps on) counts a freed peak and is empty after a trim; huge-page
// collapses run on the background thread's ticks and explicit ones only. What
// each layer gives back on a tick is tested with the layer (depot, thread cache,
// per-CPU sheaves, central lists, page heap).
#include <catch2/catch.hpp>

#include <sys/utsname.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "core/alloc/alloc.h"
#include "core/core.h"

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

TEST_CASE("huge-page collapses run on the background thread, never on a slow path's tick") {
  config_init();
  struct utsname u;
  int major = 0, minor = 0;
  REQUIRE(uname(&u) == 0);
  sscanf(u.release, "%d.%d", &major, &minor);
  if (!PageHeap::thp_enabled() || major * 100 + minor < 601)
    return;  // no MADV_COLLAPSE here: nothing is queued
  // The thread stops while the test ticks, and runs on its own at the end.
  const Config::Background saved_option = g_config.background_thread;
  background_enable(false);
  const uint64_t saved = g_config.decay_ms;
  g_config.decay_ms = 160;  // a tick every 10 ms, the next one 10 ms from now
  decay_tick_now();
  auto collapses = [] { return page_heap_stats().thp_collapses; };
  // 40 MiB of 40 KiB blocks, written: full segments measured dense, queued (in a heap
  // that earlier tests made big, new segments are advised when made, but one in
  // PageHeap::kThpProbeEvery is measured).
  std::vector<void*> blocks(1000);
  for (void*& p : blocks) {
    p = heap::alloc(40 << 10);
    memset(p, 1, 40 << 10);
  }
  const size_t before = collapses();
  const uint64_t ticks = decay_ticks_run();
  for (int i = 0; i < 5; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    decay_maybe_tick();
  }
  REQUIRE(decay_ticks_run() > ticks);
  CHECK(collapses() == before);  // the allocations and the slow paths' ticks: none
  background_enable(true);
  for (int i = 0; i < 300 && collapses() == before; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(collapses() > before);
  background_enable(false);
  for (void* p : blocks) heap::free(p);
  g_config.decay_ms = saved;
  g_config.background_thread = saved_option;
  heap::trim();
}
