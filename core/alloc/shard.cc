// core/alloc/shard.cc — the CPU → shard → node map; see shard.h.
#include "core/alloc/shard.h"

#include <sys/syscall.h>

#include <atomic>

// The linker's bounds of the tables' registry (hidden: this library's own).
extern "C" const uslab::ShardTable* const __start_uslab_shard_tables[]
    __attribute__((visibility("hidden")));
extern "C" const uslab::ShardTable* const __stop_uslab_shard_tables[]
    __attribute__((visibility("hidden")));

namespace uslab {

USLAB_LARGE_ZERO constinit uint8_t g_cpu_shard[kTopoMaxCpus];
constinit uint8_t g_shard_node[kMaxShards];
constinit uint32_t g_cpu_shard_span = 0;
constinit uint8_t g_shard_used[kMaxShards] = {};
constinit uint32_t g_shards_used = 0;

namespace {

constinit Mutex map_lock_;
USLAB_LOCK_ONE(kShardMap, map_lock_);
constinit std::atomic<uint32_t> count_{0};  // 0 until the first map is built
constinit std::atomic<uint32_t> per_{1};
constinit std::atomic<uint32_t> nodes_{1};
constinit std::atomic<uint32_t> next_thread_{0};
constinit std::atomic<NodeBinding> binding_{NodeBinding::kOneNode};
constinit std::atomic<bool> caches_known_{false};  // topo_'s cache sizes filled
USLAB_LARGE_ZERO constinit std::atomic<uint64_t> remote_frees_[kTopoMaxNodes];
USLAB_LARGE_ZERO Topology topo_;      // zero-initialised; written under map_lock_
uint8_t node_first_[kTopoMaxNodes];   // the node's first shard
uint8_t node_shards_[kTopoMaxNodes];  // and how many it has (0: no CPUs)

bool tables_uncharged_ = false;           // map_lock_
// Shards whose entries are writable (written under map_lock_); 0 until
// tables_uncharge: all of them (zero-initialised, so that it takes no page of .data).
uint32_t tables_committed_ = 0;

uint32_t committed() {
  uint32_t n = __atomic_load_n(&tables_committed_, __ATOMIC_RELAXED);
  return n ? n : kMaxShards;
}

// The whole pages past shard 0's entries of every registered table.
USLAB_STARTUP_TEXT void tables_uncharge() USLAB_REQUIRES(map_lock_) {
  if (tables_uncharged_) return;
  tables_uncharged_ = true;
  for (const ShardTable* const* t = __start_uslab_shard_tables; t < __stop_uslab_shard_tables; t++)
    os::uncharge_zero(static_cast<char*>((*t)->base) + (*t)->stride,
                      (kMaxShards - 1) * (*t)->stride);
  __atomic_store_n(&tables_committed_, 1u, __ATOMIC_RELAXED);
}

// The pages of shards [have, n) that are still read-only: from the first page past
// shard have - 1's entries (that one is writable) to the last of shard n - 1's,
// inside the pages tables_uncharge replaced.
bool tables_commit(unsigned n) USLAB_REQUIRES(map_lock_) {
  uint32_t have = committed();
  if (n <= have) return true;
  for (const ShardTable* const* t = __start_uslab_shard_tables; t < __stop_uslab_shard_tables;
       t++) {
    uintptr_t base = reinterpret_cast<uintptr_t>((*t)->base);
    uintptr_t lo = os::page_up(base + have * (*t)->stride);
    uintptr_t hi = os::page_up(base + n * (*t)->stride);
    uintptr_t end = os::page_down(base + kMaxShards * (*t)->stride);
    if (hi > end) hi = end;
    if (hi > lo && !os::charge_zero(reinterpret_cast<void*>(lo), hi - lo)) return false;
  }
  __atomic_store_n(&tables_committed_, n, __ATOMIC_RELAXED);
  return true;
}

template <typename T>
void store(T& x, T v) {
  __atomic_store_n(&x, v, __ATOMIC_RELAXED);
}
template <typename T>
T load(const T& x) {
  return __atomic_load_n(&x, __ATOMIC_RELAXED);
}

// Builds the map from topo_ (map_lock_ held). A shard gets CPUs only once its
// entries of the shard tables are writable (shard.h); where the kernel refuses that
// (the commit limit of strict overcommit), the shards it has take every node, as
// past kMaxShards.
void build() USLAB_REQUIRES(map_lock_) {
  config_init();
  const uint32_t span = topo_.cpus_possible < kTopoMaxCpus ? topo_.cpus_possible : kTopoMaxCpus;
  uint32_t ncpu[kTopoMaxNodes] = {};
  for (uint32_t c = 0; c < span; c++) ncpu[topo_.cpu_node[c]]++;
  // Every node with CPUs gets whole shards; more CPUs per shard until they fit.
  uint32_t limit = kMaxShards, per;
  for (;;) {
    uint32_t total;
    for (per = g_config.shard_cpus ? static_cast<uint32_t>(g_config.shard_cpus) : 1;; per++) {
      total = 0;
      for (uint32_t n = 0; n < kTopoMaxNodes; n++) total += (ncpu[n] + per - 1) / per;
      if (total <= limit || per >= span) break;
    }
    if (tables_commit(total < 1 ? 1 : total < limit ? total : limit)) break;
    limit = committed();
  }
  uint32_t next = 0;
  for (uint32_t n = 0; n < kTopoMaxNodes; n++) {
    uint32_t k = (ncpu[n] + per - 1) / per;
    store(node_first_[n], static_cast<uint8_t>(next % limit));
    store(node_shards_[n], static_cast<uint8_t>(k < limit ? k : limit));
    for (uint32_t i = 0; i < k; i++)
      store(g_shard_node[(next + i) % limit], static_cast<uint8_t>(n));
    next += k;
  }
  uint32_t seen[kTopoMaxNodes] = {};
  for (uint32_t c = 0; c < span; c++) {
    uint32_t n = topo_.cpu_node[c];
    store(g_cpu_shard[c], static_cast<uint8_t>((node_first_[n] + seen[n]++ / per) % limit));
  }
  uint32_t count = next < limit ? next : limit;
  if (count == 0) count = 1;
  __atomic_store_n(&g_cpu_shard_span, span, __ATOMIC_RELAXED);
  per_.store(per, std::memory_order_relaxed);
  nodes_.store(topo_.nodes, std::memory_order_relaxed);
  binding_.store(topo_.nodes <= 1           ? NodeBinding::kOneNode
                 : topo_.synthetic          ? NodeBinding::kSynthetic
                 : os::task_memory_policy() ? NodeBinding::kTaskPolicy
                                            : NodeBinding::kBound,
                 std::memory_order_relaxed);
  // Shards of an earlier map that this one does not use keep their objects; they
  // are given the node of a shard that is used.
  uint32_t old = count_.load(std::memory_order_relaxed);
  for (uint32_t sh = count; sh < old; sh++) store(g_shard_node[sh], load(g_shard_node[sh % count]));
  count_.store(count > old ? count : old, std::memory_order_release);
}

uint32_t init() {
  LockGuard g(map_lock_);
  if (uint32_t n = count_.load(std::memory_order_acquire)) return n;
  // The first use of the heap's arrays (.lbss; topo_ is one): the shard tables'
  // unused pages uncharged, then small pages (the new mappings are advised too).
  tables_uncharge();
  os::advise_bss_small_pages();
  topology_probe(&topo_, false);
  build();
  return count_.load(std::memory_order_relaxed);
}

}  // namespace

USLAB_STARTUP_TEXT void shard_tables_uncharge_at_start() {
  LockGuard g(map_lock_);
  tables_uncharge();
}

unsigned shard_tables_committed() { return committed(); }

bool shard_tables_commit(unsigned n) {
  LockGuard g(map_lock_);
  return tables_commit(n);
}

unsigned shard_count() {
  uint32_t n = count_.load(std::memory_order_acquire);
  return n ? n : init();
}

unsigned shard_count_now() {
  uint32_t n = count_.load(std::memory_order_acquire);
  return n ? n : 1;
}

unsigned shard_cpus() {
  shard_count();
  return per_.load(std::memory_order_relaxed);
}

unsigned shard_of_cpu_beyond(uint32_t c) {
  uint32_t n = shard_count();  // builds the map on first use
  if (c < __atomic_load_n(&g_cpu_shard_span, __ATOMIC_RELAXED)) return load(g_cpu_shard[c]);
  return c % n;
}

unsigned shard_for_new_thread() {
  uint32_t i = next_thread_.fetch_add(1, std::memory_order_relaxed);
  if (node_count() == 1) return i % shard_count();
  unsigned cpu = 0;
  if (os::syscall6(SYS_getcpu, reinterpret_cast<long>(&cpu), 0, 0) != 0) cpu = 0;
  unsigned node = node_of_cpu(cpu);
  uint32_t k = load(node_shards_[node]);
  // Past the shards the map could have (folded nodes), within those it has.
  return k ? (load(node_first_[node]) + i % k) % committed() : i % shard_count();
}

unsigned node_count() {
  shard_count();
  return nodes_.load(std::memory_order_relaxed);
}

unsigned shards_of_node(unsigned n, unsigned* first) {
  unsigned count = 0;
  *first = kMaxShards;
  for (unsigned sh = 0; sh < shard_count(); sh++)
    if (node_of_shard(sh) == n) {
      if (count++ == 0) *first = sh;
    }
  return count;
}

NodeBinding node_binding() {
  shard_count();
  return binding_.load(std::memory_order_relaxed);
}

void bind_to_shard_node(void* p, size_t bytes, unsigned sh) {
  if (binding_.load(std::memory_order_relaxed) == NodeBinding::kBound)
    os::bind_node(p, bytes, node_of_shard(sh));
}

bool same_memory_node(unsigned a, unsigned b) {
  return binding_.load(std::memory_order_relaxed) != NodeBinding::kBound ||
         node_of_shard(a) == node_of_shard(b);
}

void note_remote_node_frees(unsigned node, uint64_t n) {
  remote_frees_[node % kTopoMaxNodes].fetch_add(n, std::memory_order_relaxed);
}

uint64_t remote_node_frees(unsigned node) {
  return remote_frees_[node % kTopoMaxNodes].load(std::memory_order_relaxed);
}

const Topology& topology_in_use() {
  shard_count();
  if (!caches_known_.load(std::memory_order_acquire)) {
    LockGuard g(map_lock_);
    if (!caches_known_.load(std::memory_order_relaxed)) {
      if (!topo_.l2.bytes) topology_probe_caches(&topo_, 0, false);
      caches_known_.store(true, std::memory_order_release);
    }
  }
  return topo_;
}

void topology_adopt(const Topology& t) {
  shard_count();
  LockGuard g(map_lock_);
  topo_ = t;
  caches_known_.store(false, std::memory_order_release);  // unknown sizes are probed
  build();
}

USLAB_STARTUP_TEXT bool topology_adopt_hwloc() {
  config_init();
  if (g_config.topology == TopologySource::kProbe) return false;
  // auto: the probe's map, which comes from the sysfs files hwloc reads too; hwloc
  // only where the kernel allows several nodes and the probe cannot see them (no
  // sysfs node directory). Loading hwloc in every process of a 2-node machine cost
  // /bin/true 190 page faults more than an empty preloaded library (6 on one node),
  // and hwloc allocates through the process's malloc; building the probe's map here
  // cost 14 (the map waits for the first allocation). One or two system calls, no
  // file read; get_mempolicy only where sysfs hides the nodes (a filter that kills
  // at calls it does not list may leave it out: a process on one node never makes it).
  static USLAB_STARTUP_STRING(kNodeDir, "/sys/devices/system/node/node0");
  if (g_config.topology == TopologySource::kAuto &&
      (os::path_exists(kNodeDir) || os::allowed_nodes() <= 1))
    return false;
  USLAB_LARGE_ZERO static Topology t;  // 4 KiB: not on the constructor's stack
  char why[160];
  if (!topology_hwloc(&t, why, sizeof why)) {
    if (g_config.topology == TopologySource::kHwloc)
      os::print_stderr("uslab: topology=hwloc: %s; using the probe's topology\n", why);
    return false;
  }
  topology_adopt(t);  // a synthetic topology may describe no caches: they are probed
  return true;
}

}  // namespace uslab
