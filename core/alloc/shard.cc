// core/alloc/shard.cc — CPU → shard map; see shard.h.
#include "core/alloc/shard.h"

#include <atomic>

#include "core/platform/config.h"
#include "core/platform/cpu_probe.h"

namespace uslab {

namespace {

constinit std::atomic<uint32_t> count_{0};
constinit std::atomic<uint32_t> cpus_per_shard_{1};
constinit std::atomic<uint32_t> next_thread_{0};

uint32_t init() {
  config_init();
  uint32_t per = g_config.shard_cpus ? static_cast<uint32_t>(g_config.shard_cpus) : 1;
  uint32_t n = (possible_cpus() + per - 1) / per;
  if (n > kMaxShards) n = kMaxShards;
  if (n == 0) n = 1;
  cpus_per_shard_.store(per, std::memory_order_relaxed);
  count_.store(n, std::memory_order_release);
  return n;
}

}  // namespace

unsigned shard_count() {
  uint32_t n = count_.load(std::memory_order_acquire);
  return n ? n : init();
}

unsigned shard_cpus() {
  shard_count();
  return cpus_per_shard_.load(std::memory_order_relaxed);
}

unsigned shard_of_cpu(uint32_t c) {
  uint32_t n = shard_count();
  return c / cpus_per_shard_.load(std::memory_order_relaxed) % n;
}

unsigned shard_for_new_thread() {
  return next_thread_.fetch_add(1, std::memory_order_relaxed) % shard_count();
}

}  // namespace uslab
