// core/alloc/shard.h — nodes and shards: which CPUs share depots, central lists and
// a page heap, and on which NUMA node their memory lives.
//
// With one depot and one central slab list per class for the whole process, every
// refill and drain of every CPU takes the same lock: on 16 CPUs a concurrent test
// (every CPU allocates then frees its objects) spent most of its time waiting for it. A shard is a group of `shard_cpus` CPUs of one NUMA node with its
// own depot and central list per class (g_depot[shard][cls], g_central[shard][cls])
// and its own page heap (g_page_heap[shard]), as SLUB gives each CPU its own partial
// slabs and jemalloc spreads threads over arenas. A Node is the set of shards of
// one NUMA node: a shard never spans two nodes, its segments are bound to its node
// (mbind, on a machine with several real nodes, unless the process runs under a
// memory policy of its own, which the kernel then applies), and a page heap borrows
// free pages only from heaps of its own node (from any, once no segment can be
// mapped). A slab belongs to the shard that carved it for
// its whole life (Span::shard); its objects go back to that shard's depot
// (depot_give) or central list (central_free) from any CPU, so a depot holds only
// its own shard's objects. Per-thread caches (the fallback mode) are given the
// shards of the node they start on round robin.
//
// The map comes from the topology (core/platform/topology.h): the probe's at the
// first call, hwloc's when the constructor adopts it (topology_adopt_hwloc). The
// map may change once, while other threads read it: every entry is a single byte
// read and written atomically, and both maps are valid (a CPU that takes another
// shard's depot meanwhile only allocates from that shard). shard_count() only
// grows, so the shards of the first map are still visited afterwards.
//
// Locking: map_lock_ (shard.cc) serialises building the map, probing the cache
// sizes of the topology in use (done once, by topology_in_use) and uncharging and
// committing the shard tables' entries (below); readers of the map take none.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/platform/platform.h"

namespace uslab {

constexpr unsigned kMaxShards = 64;  // more CPUs per shard beyond; nodes beyond fold

// The map's tables (shard.cc), read lock-free with single-byte loads; all zero (one
// shard of node 0 for every CPU) until the map is first built.
extern uint8_t g_cpu_shard[kTopoMaxCpus] USLAB_HIDDEN;
extern uint8_t g_shard_node[kMaxShards] USLAB_HIDDEN;
extern uint32_t g_cpu_shard_span USLAB_HIDDEN;  // CPU ids g_cpu_shard covers

// Shards in use (1 … kMaxShards); never shrinks.
unsigned shard_count();
// The shards in use now, without making the map (shard 0 serves before it is made):
// for the lock registry, whose walks take no lock.
unsigned shard_count_now();
// CPUs per shard (shard_cpus, raised until every node's shards fit in kMaxShards).
unsigned shard_cpus();
// The shard of CPU c (any id: ids beyond the topology wrap around the shards).
unsigned shard_of_cpu_beyond(uint32_t c);
inline unsigned shard_of_cpu(uint32_t c) {
  if (c < __atomic_load_n(&g_cpu_shard_span, __ATOMIC_RELAXED))
    return __atomic_load_n(&g_cpu_shard[c], __ATOMIC_RELAXED);
  return shard_of_cpu_beyond(c);
}
// The shard of a new per-thread cache: round robin among the shards of the node the
// thread runs on.
unsigned shard_for_new_thread();

// NUMA nodes of the topology in use (at least 1), the node of a shard and of a CPU.
unsigned node_count();
inline unsigned node_of_shard(unsigned sh) {
  return __atomic_load_n(&g_shard_node[sh % kMaxShards], __ATOMIC_RELAXED);
}
inline unsigned node_of_cpu(uint32_t c) { return node_of_shard(shard_of_cpu(c)); }
// How many of the shards in use belong to node n; *first gets the lowest of them
// (kMaxShards when none).
unsigned shards_of_node(unsigned n, unsigned* first);
// Whether memory is bound to the shards' nodes, or why not.
enum class NodeBinding : uint8_t {
  kOneNode,     // one node
  kSynthetic,   // hwloc's HWLOC_SYNTHETIC nodes do not exist
  kTaskPolicy,  // the process has a memory policy (numactl): the kernel applies it
  kBound,       // each shard's segments and CPU regions are bound to its node
};
NodeBinding node_binding();
// Binds [p, p + bytes) to the node of shard sh when kBound (a no-op otherwise).
void bind_to_shard_node(void* p, size_t bytes, unsigned sh);
// Whether memory made for shard a serves shard b without crossing nodes (always
// true unless kBound).
bool same_memory_node(unsigned a, unsigned b);

// Remote-node frees: objects returned to node `node`'s shards by CPUs (or thread
// caches) of another node. Relaxed counters.
void note_remote_node_frees(unsigned node, uint64_t n);
uint64_t remote_node_frees(unsigned node);

// The topology in use (read-only; stable once the constructor ran).
const Topology& topology_in_use();
// Run by the allocator's constructor: loads hwloc when the configuration asks for
// it (topology=hwloc, or auto with several nodes) and rebuilds the map from its
// answer; true when the map changed. A failure keeps the probe's map (with a
// warning when hwloc was asked for by name).
bool topology_adopt_hwloc();
// Shard-indexed tables: arrays of kMaxShards entries (a page heap, a row of central
// lists or depots), registered by their owners with USLAB_SHARD_TABLE. Strict
// overcommit (vm.overcommit_memory=2, many database hosts' setting) charges every
// writable private page when it is mapped, touched or not: in .lbss, the tables (3
// MiB) would charge every process, and each forked child once more, for the shards
// of a machine far larger than its own. So the entries past shard 0 are read-only
// zero pages (os::uncharge_zero) from the constructor or the first map, whichever
// comes first, and the map commits a shard's entries before it gives the shard CPUs;
// where the kernel refuses (the commit limit), the shards it has take every node, as
// past kMaxShards. Nothing writes a shard's entries before then: every index comes
// from the map (a CPU's shard, a slab's, a thread cache's), and shard 0 serves before
// the map exists. Readers of any shard read zeros.
struct ShardTable {
  void* base;
  size_t stride;  // bytes of one shard's entry
};
// At namespace scope, after the array's definition: USLAB_SHARD_TABLE(g_page_heap).
// The section holds pointers, as the lock table's does (lock_table.h says why).
#define USLAB_SHARD_TABLE_NAME2(a, b) a##b
#define USLAB_SHARD_TABLE_NAME(a, n) USLAB_SHARD_TABLE_NAME2(a, n)
#define USLAB_SHARD_TABLE_AT(n, array)                                                  \
  constinit const ::uslab::ShardTable USLAB_SHARD_TABLE_NAME(uslab_shard_table_, n) = { \
      &(array), sizeof(array)[0]};                                                      \
  static_assert(sizeof(array) / sizeof(array)[0] == ::uslab::kMaxShards);               \
  [[gnu::used, gnu::retain,                                                             \
    gnu::section("uslab_shard_tables")]] constinit const ::uslab::ShardTable* const     \
  USLAB_SHARD_TABLE_NAME(uslab_shard_table_ref_, n) =                                   \
      &USLAB_SHARD_TABLE_NAME(uslab_shard_table_, n)
#define USLAB_SHARD_TABLE(array) USLAB_SHARD_TABLE_AT(__COUNTER__, array)
// Run by the allocator's constructor: the tables' entries past shard 0 uncharged in
// a process that has not allocated yet, which may never.
void shard_tables_uncharge_at_start();
// How many shards' entries are writable (kMaxShards until the first uncharge).
unsigned shard_tables_committed();
// Makes the entries of shards [0, n) writable; false when the kernel refused
// (shard_tables_committed() says how many are). The map calls it; tests too.
bool shard_tables_commit(unsigned n);
// Rebuilds the map from t (tests and topology_adopt_hwloc).
void topology_adopt(const Topology& t);

// Shards that ever held memory: marked when their page heap maps a segment or their
// central list carves a slab (all the state a shard can have comes from one of the
// two). Every walk over the shards (decay ticks, trims, statistics) takes these only:
// a shard never used holds nothing, and a walk's locks would write its depots', central
// lists' and page heap's pages and make them resident for nothing (megabytes on a
// machine of many shards, for a program that used one).
extern uint8_t g_shard_used[kMaxShards] USLAB_HIDDEN;
extern uint32_t g_shards_used USLAB_HIDDEN;  // how many are marked
inline void note_shard_used(unsigned sh) {
  if (!__atomic_load_n(&g_shard_used[sh], __ATOMIC_RELAXED) &&
      __atomic_exchange_n(&g_shard_used[sh], 1, __ATOMIC_ACQ_REL) == 0)
    __atomic_add_fetch(&g_shards_used, 1, __ATOMIC_RELAXED);
}
inline bool shard_used(unsigned sh) {
  return __atomic_load_n(&g_shard_used[sh], __ATOMIC_ACQUIRE) != 0;
}
// Shards that ever held memory (at least 1).
inline unsigned shards_used() {
  uint32_t n = __atomic_load_n(&g_shards_used, __ATOMIC_RELAXED);
  return n ? n : 1;
}
// fn(shard) for every shard used.
template <typename Fn>
void for_each_shard_used(Fn fn) {
  for (unsigned sh = 0; sh < shard_count(); sh++)
    if (shard_used(sh)) fn(sh);
}
// fn(shard) summed over the shards used (a statistics struct with +=; zero if none).
template <typename Fn>
auto sum_over_shards(Fn fn) {
  decltype(fn(0u)) sum{};
  for_each_shard_used([&](unsigned sh) { sum += fn(sh); });
  return sum;
}

}  // namespace uslab
