// core/alloc/sampler.h: the heap profiler's sampling schedule: the draws have the mean
// the weights assume, and a stream's legs add up to its draw. (The records and the
// dump: prof_test.cc.)
#include <catch2/catch.hpp>

#include <cmath>

#include "core/heap.h"
#include "test/unit/sample_mean.h"

using namespace uslab;

TEST_CASE("sampling draws have the mean the weights assume") {
  MeanGuard g(512 << 10);
  for (size_t size : {8u, 256u, 4096u, 100000u, 2000000u}) {
    double p = sample_probability(size);
    CHECK(p == Approx(1 - std::exp(-double(size) / (512 << 10))).epsilon(1e-6));
    // The count to the next sample is geometric: mean 1/p.
    double sum = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) sum += double(sample_draw_count(size));
    INFO("size " << size);
    CHECK(sum / n == Approx(1 / p).epsilon(0.02));
  }
  // The large allocations' byte countdown: each is sampled with probability p.
  size_t sampled = 0;
  const int n = 100000;
  for (int i = 0; i < n; i++) sampled += sample_large(300000);
  CHECK(double(sampled) / n == Approx(sample_probability(300000)).epsilon(0.03));
}

TEST_CASE("a stream's legs add up to its draw, and its last carry is the sampled one") {
  // Drawn counts beyond one lap of the hit counter (4096 pops) take several carries.
  for (uint64_t n : {1ull, 17ull, 4096ull, 4097ull, 10000ull, 123457ull}) {
    uint64_t left = n;
    // As sample_arm leaves it: the first leg taken from left.
    uint64_t k = left < 4096 ? left : 4096;
    left -= k;
    uint64_t pops = k;
    uint16_t counter = 0;
    int carries = 0;
    while (!sample_on_carry(&left, 1, false, &counter)) {
      uint64_t leg = counter ? (65536 - counter) / kHitStep : 4096;
      pops += leg;
      REQUIRE(++carries < 100);
    }
    INFO("n " << n);
    CHECK(pops == n);
    // The stream is armed again: a fresh draw's first leg.
    CHECK(left + (counter ? (65536 - counter) / kHitStep : 4096) >= 1);
  }
}
