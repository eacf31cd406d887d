// test/unit/sample_mean.h — a test's own sampling mean (core/alloc/sampler.h).
#pragma once

#include <cstdint>

#include "core/core.h"

// Sets the sampling mean for the test; restores it (and so sampling's state) after.
struct MeanGuard {
  uint64_t saved = uslab::g_sample_bytes;
  explicit MeanGuard(uint64_t mean) { uslab::g_sample_bytes = mean; }
  ~MeanGuard() { uslab::g_sample_bytes = saved; }
};
