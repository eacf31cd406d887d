// test/unit/pinned_cpu.h — a test that stays on one CPU (a sheaf is a CPU's).
#pragma once

#include <sched.h>

#include <catch2/catch.hpp>

#include "core/core.h"

// Pins the calling thread to one CPU of its set for its lifetime: one with a region
// in the per-CPU mode, any in the per-thread mode (no regions: g_cpu_count is 0).
struct PinnedToOneCpu {
  cpu_set_t saved;
  int cpu = -1;
  PinnedToOneCpu() {
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    const uint32_t regions = uslab::g_cpu_count;
    for (int c = CPU_SETSIZE - 1; c >= 0 && cpu < 0; c--)
      if (CPU_ISSET(c, &saved) && (regions == 0 || static_cast<uint32_t>(c) < regions)) cpu = c;
    REQUIRE(cpu >= 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  }
  ~PinnedToOneCpu() { sched_setaffinity(0, sizeof saved, &saved); }
};
