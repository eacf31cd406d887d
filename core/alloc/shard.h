// core/alloc/shard.h — shards: groups of CPUs that share depots, central lists and
// a page heap.
//
// With one depot and one central slab list per class for the whole process, every
// refill and drain of every CPU takes the same lock: on 16 CPUs the seed concurrent
// test (every CPU allocates then frees 10000 objects) spent 2-30x jemalloc's cycles
// waiting for it. A shard is a group of `shard_cpus` consecutive CPU ids with its
// own depot and central list per class (g_depot[shard][cls], g_central[shard][cls])
// and its own page heap (g_page_heap[shard]), as SLUB gives each CPU its own partial
// slabs and jemalloc spreads threads over arenas. A slab belongs to the shard that
// carved it for its whole life (Span::shard); its objects go back to that shard's
// depot (depot_give) or central list (central_free) from any CPU, so a depot holds
// only its own shard's objects.
// Per-thread caches (the fallback mode) are given shards round robin.
//
// Locking: none. The shard count and size are computed once, on first use, from
// the possible CPUs and USLAB_CONF; racing first callers compute the same values.
#pragma once

#include <cstdint>

namespace uslab {

constexpr unsigned kMaxShards = 64;  // CPUs beyond shard_cpus * kMaxShards share shards

// Shards in use (1 … kMaxShards).
unsigned shard_count();
// CPUs per shard (shard_cpus, at least 1).
unsigned shard_cpus();
// The shard of CPU c.
unsigned shard_of_cpu(uint32_t c);
// The shard of a new per-thread cache (round robin).
unsigned shard_for_new_thread();

// fn(shard) summed over the shards in use (a statistics struct with +=).
template <typename Fn>
auto sum_over_shards(Fn fn) {
  auto sum = fn(0u);
  for (unsigned sh = 1; sh < shard_count(); sh++) sum += fn(sh);
  return sum;
}

}  // namespace uslab
