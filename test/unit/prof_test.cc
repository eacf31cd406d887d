// The heap profiler's sampling schedule (core/alloc/sampler.h) and its records
// (core/prof/prof.h), in process: the draws have the mean the weights assume, a
// stream's legs add up to the draw, and a dump names the function that allocated
// with an estimate near the truth.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/heap.h"

using namespace uslab;

namespace {

// Restores the sampling mean and turns sampling back off after a test.
struct MeanGuard {
  uint64_t saved = g_sample_bytes;
  explicit MeanGuard(uint64_t mean) { g_sample_bytes = mean; }
  ~MeanGuard() { g_sample_bytes = saved; }
};

__attribute__((noinline)) void* prof_test_site(size_t n) {
  void* p = heap::alloc(n);
  __asm__ volatile("" ::"r"(p) : "memory");
  return p;
}

// The sum of the last column over lines of `path` that contain `needle`.
double folded_sum(const std::string& path, const char* needle) {
  std::ifstream in(path);
  std::string line;
  double sum = 0;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos) sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

}  // namespace

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

TEST_CASE("a profile dump names the allocating function with its bytes") {
  config_init();  // read once: a later first read would undo the setting below
  if (!prof::enabled()) {
    g_config.prof = true;
    g_config.prof_active = false;  // turned on below
    prof::init();
  }
  REQUIRE(prof::enabled());
  MeanGuard g(16 << 10);
  REQUIRE(prof::set_active(true));
  std::vector<void*> keep;
  size_t truth = 0;
  for (int i = 0; i < 40000; i++) {
    void* p = prof_test_site(i % 2 ? 1000 : 40000);  // a small class and large spans
    REQUIRE(p != nullptr);
    truth += heap::usable_size(p);
    keep.push_back(p);
  }
  char path[64];
  snprintf(path, sizeof path, "/tmp/uslab-prof-unit.%d.pb", getpid());
  REQUIRE(prof::dump(path) == 0);
  std::string inuse = std::string(path) + ".inuse.folded";
  double live = folded_sum(inuse, "prof_test_site");
  INFO("estimate " << live << " truth " << truth);
  CHECK(live == Approx(double(truth)).epsilon(0.05));
  for (void* p : keep) heap::free(p);
  REQUIRE(prof::dump(path) == 0);
  CHECK(folded_sum(inuse, "prof_test_site") == 0);  // freed: nothing live
  CHECK(folded_sum(std::string(path) + ".alloc.folded", "prof_test_site") == Approx(live).epsilon(1e-9));
  prof::set_active(false);
  for (const char* suffix : {"", ".inuse.folded", ".alloc.folded"}) unlink((std::string(path) + suffix).c_str());
}
