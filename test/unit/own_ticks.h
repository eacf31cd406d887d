// test/unit/own_ticks.h — a test that runs the decay ticks itself.
#pragma once

#include "core/alloc/decay.h"
#include "core/platform/config.h"

// For its lifetime, no decay tick comes due on its own (decay_ms of an hour), so a
// test's caches and depots hold what it put there until it ticks (decay_tick_now).
// kCacheIdleTicks + 1 ticks first: no earlier test's activity counts in the next one,
// and what earlier tests left in caches they stopped using is drained. At the end,
// the next tick is due an ordinary interval later. A tick that comes due on a slow
// path in the middle of a test would empty the caches it is checking.
struct OwnTicks {
  uint64_t saved = uslab::g_config.decay_ms;
  OwnTicks() {
    uslab::g_config.decay_ms = 3'600'000;
    for (unsigned t = 0; t <= uslab::kCacheIdleTicks; t++) uslab::decay_tick_now();
  }
  ~OwnTicks() {
    uslab::g_config.decay_ms = saved;
    uslab::decay_tick_now();
  }
};
