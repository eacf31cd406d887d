// core/alloc/sampler.h: the heap profiler's sampling schedule: the draws have the mean
// the weights assume, and a stream's legs add up to its draw. (The records and the
// dump: prof_test.cc.)
#include <catch2/catch.hpp>

#include <cmath>

#include "core/core.h"
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

TEST_CASE("a bulk run's objects are sampled as one by one, at any place in the run") {
  MeanGuard g(512 << 10);
  CHECK(sample_large_run(64, 0) == 0);
  for (size_t size : {64u, 4096u, 300000u}) {
    for (size_t n : {1u, 7u, 64u}) {
      // Runs of n objects of size bytes, each sampled one asked again for the rest:
      // the rate per object is p, and every index of a run is reached.
      // About 4000 samples expected: 5 sigma is 8%.
      const size_t runs = size_t(4000 / (double(n) * sample_probability(size))) + 1;
      size_t sampled = 0, first = 0, last = 0;
      for (size_t r = 0; r < runs; r++)
        for (size_t i = sample_large_run(size, n); i < n;
             i += 1 + sample_large_run(size, n - i - 1)) {
          REQUIRE(i < n);
          sampled++;
          first += i == 0;
          last += i == n - 1;
        }
      const double expect = double(runs) * double(n) * sample_probability(size);
      INFO("size " << size << ", runs of " << n << ": " << sampled << " sampled, expected "
                   << expect);
      CHECK(double(sampled) == Approx(expect).epsilon(0.08));
      CHECK(first > 0);
      CHECK(last > 0);
    }
  }
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

// The fast path's counting, as percpu_alloc_tick and thread_cache_alloc_tick do it:
// each allocation adds kHitStep to the 16-bit counter; the one whose add carries
// takes the slow path, which sets the next leg and pops again (adding its step once
// more) unless it is the sampled one. Returns the allocations up to and including
// the sampled one.
static uint64_t allocations_to_sample(uint64_t* left, uint16_t* counter, unsigned cls = 1) {
  uint64_t allocs = 0;
  for (;;) {
    allocs++;
    bool carry = uint32_t{*counter} + kHitStep > 0xffff;
    *counter = static_cast<uint16_t>(*counter + kHitStep);
    while (carry) {  // the slow path, and its retry pop if it is not the sampled one
      if (sample_on_carry(left, cls, true, counter)) return allocs;
      carry = uint32_t{*counter} + kHitStep > 0xffff;
      *counter = static_cast<uint16_t>(*counter + kHitStep);
      REQUIRE(allocs < (uint64_t{1} << 32));
    }
  }
}

TEST_CASE("a stream samples after its drawn count of allocations, retries included") {
  // A leg of a whole lap (4096 pops) made the retry pop carry at once, and the next
  // leg went with no allocation: a stream sampled after its count modulo 4096.
  for (uint64_t n : {1ull, 2ull, 4095ull, 4096ull, 4097ull, 8192ull, 10000ull, 123457ull}) {
    uint64_t left = n;
    uint64_t k = left < 4096 ? left : 4096;  // as sample_arm leaves it
    left -= k;
    uint16_t counter = static_cast<uint16_t>(65536 - k * kHitStep);
    INFO("n " << n);
    CHECK(allocations_to_sample(&left, &counter) == n);
  }
  // At a mean far above the class size (16 MiB, 32-byte objects: draws of about
  // 524,000 allocations), the mean count between samples is the drawn one.
  MeanGuard g(16 << 20);
  uint64_t left = 0, total = 0;
  uint16_t counter = sample_arm(&left, 3);
  const int samples = 200;
  // After each sampled allocation the stream is armed again (sample_on_carry).
  for (int i = 0; i < samples; i++) total += allocations_to_sample(&left, &counter, 3);
  // The counts are geometric: the mean of 200 is off by 7% (one sigma), so 36% is five
  // sigma. The bug above gave a mean 1/256 of the drawn one.
  CHECK(double(total) / samples == Approx(1 / sample_probability(class_size(3))).epsilon(0.36));
}
