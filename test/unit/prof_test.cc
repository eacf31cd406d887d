// core/prof/prof.h: the heap profiler's records, in process: a dump names the
// function that allocated with an estimate near the truth. (The sampling schedule:
// sampler_test.cc.)
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/core.h"

using namespace uslab;

namespace {

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

TEST_CASE("a profile dump names the allocating function with its bytes") {
  config_init();  // read once: a later first read would undo the setting below
  if (!prof::enabled()) {
    g_config.prof = true;
    g_config.prof_active = false;  // turned on below
    prof::init();
  }
  REQUIRE(prof::enabled());
  // The profiler's own mean, from which sampling sets the schedule's (sampler.h).
  const uint64_t saved_mean = prof::sample_bytes();
  prof::reset(16 << 10);
  std::vector<void*> keep;
  // Put back however the test ends: a sampled object is a span of its own, which the
  // later tests' direct thread-cache calls would take for a small one.
  struct Restore {
    std::vector<void*>& keep;
    uint64_t mean;
    ~Restore() {
      for (void* p : keep) heap::free(p);
      prof::set_active(false);
      prof::reset(mean);
    }
  } restore{keep, saved_mean};
  REQUIRE(prof::set_active(true));
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
  keep.clear();
  REQUIRE(prof::dump(path) == 0);
  CHECK(folded_sum(inuse, "prof_test_site") == 0);  // freed: nothing live
  CHECK(folded_sum(std::string(path) + ".alloc.folded", "prof_test_site") == Approx(live).epsilon(1e-9));
  for (const char* suffix : {"", ".inuse.folded", ".alloc.folded"}) unlink((std::string(path) + suffix).c_str());
}
