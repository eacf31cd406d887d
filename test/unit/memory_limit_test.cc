// core/alloc/memory_limit.h: the memory limit's options and the heap's resident
// estimate it compares with the limit (the control group's limit: cgroup_test.cc).
// The limit's behaviour is tested through the preloaded library (stress/memory_limit.c).
#include <catch2/catch.hpp>

#include "core/core.h"

using namespace uslab;

TEST_CASE("memory_limit takes bytes with a binary suffix, or none; memory_limit_hard a bool") {
  Config cfg;
  REQUIRE(cfg.memory_limit == 0);
  REQUIRE_FALSE(cfg.memory_limit_hard);
  config_parse(cfg, "memory_limit=64m", "test");
  REQUIRE(cfg.memory_limit == (uint64_t{64} << 20));
  config_parse(cfg, "memory_limit=3G,memory_limit_hard=true", "test");
  REQUIRE(cfg.memory_limit == (uint64_t{3} << 30));
  REQUIRE(cfg.memory_limit_hard);
  config_parse(cfg, "memory_limit=123456", "test");
  REQUIRE(cfg.memory_limit == 123456);
  config_parse(cfg, "memory_limit=none", "test");
  REQUIRE(cfg.memory_limit == kMemoryLimitNone);
  config_parse(cfg, "memory_limit=12x", "test");  // warned, left as it was
  REQUIRE(cfg.memory_limit == kMemoryLimitNone);
  config_parse(cfg, "memory_limit=99999999999t", "test");  // overflows: warned
  REQUIRE(cfg.memory_limit == kMemoryLimitNone);
}

TEST_CASE("the heap's resident estimate is sane") {
  heap::free(heap::alloc(100));
  size_t est = heap_resident_estimate();
  REQUIRE(est > 0);
  REQUIRE(est <= segment_mapped_bytes() + (size_t{256} << 20));
}
