// The topology: the two providers agree on this machine, hwloc's synthetic
// topologies give the expected nodes, the CPU → shard → node map never lets a shard
// span two nodes, memory binding reaches the kernel, and objects freed on a CPU of
// another node go back to their node.
#include <catch2/catch.hpp>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/core.h"
#include "test/unit/synthetic.h"

using namespace uslab;

namespace {

Topology g_a, g_b;  // 4 KiB each: not on the stack

bool pin_to(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace

TEST_CASE("CPU lists parse as sysfs writes them") {
  std::vector<uint32_t> ids;
  auto collect = [](uint32_t id, void* arg) { static_cast<std::vector<uint32_t>*>(arg)->push_back(id); };
  REQUIRE(cpulist_parse("0-3,8,10-11\n", 64, collect, &ids) == 12);
  REQUIRE(ids == std::vector<uint32_t>{0, 1, 2, 3, 8, 10, 11});
  ids.clear();
  REQUIRE(cpulist_parse("0-3,8", 2, collect, &ids) == 9);  // ids at or above the limit: not visited
  REQUIRE(ids == std::vector<uint32_t>{0, 1});
  REQUIRE(cpulist_span("5") == 6);
  REQUIRE(cpulist_span("3-1") == 0);
  REQUIRE(cpulist_span("a") == 0);
  REQUIRE(cpulist_span("1-") == 0);
}

TEST_CASE("the start-up probe and the full probe agree") {
  topology_probe(&g_a, false);
  topology_probe(&g_b, true);
  char diff[512] = "";
  REQUIRE(topology_diff(g_a, g_b, diff, sizeof diff) == 0);
  INFO(diff);
  REQUIRE(g_a.cpus_possible >= 1);
  REQUIRE(g_a.nodes >= 1);
  REQUIRE(g_b.cpus_online >= 1);
  REQUIRE(g_b.cpus_online <= g_b.cpus_possible);
  REQUIRE(g_b.cpus_allowed >= 1);
  REQUIRE(g_b.cpus_allowed <= g_b.cpus_possible);
  REQUIRE(static_cast<long>(g_b.cpus_online) == sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  REQUIRE(static_cast<int>(g_b.cpus_allowed) == CPU_COUNT(&set));
  // x86-64 reads the caches from cpuid; elsewhere from sysfs, which a machine may not
  // fill (QEMU's arm64 virt board gives no cache sizes: Linux 6.12 lists its caches
  // with no size file; the budget then takes its floor).
#if defined(__x86_64__)
  REQUIRE(g_b.l2.bytes > 0);
#else
  if (access("/sys/devices/system/cpu/cpu0/cache/index2/size", R_OK) == 0)
    REQUIRE(g_b.l2.bytes > 0);
#endif
  REQUIRE(topology_in_use().l2.bytes == g_b.l2.bytes);  // the per-CPU budget's source
}

TEST_CASE("the probe and hwloc agree on this machine") {
  topology_probe(&g_a, true);
  char why[160] = "";
  bool ok = topology_hwloc(&g_b, why, sizeof why);
  INFO(why);
  REQUIRE(ok);  // libhwloc15 comes with the build dependencies
  REQUIRE_FALSE(g_b.synthetic);
  char diff[512];
  size_t n = topology_diff(g_a, g_b, diff, sizeof diff);
  INFO(diff);
  REQUIRE(n == 0);
  // Fields the diff skips when one side does not know them: both know them here.
  REQUIRE(g_b.l1d.bytes == g_a.l1d.bytes);
  REQUIRE(g_b.l2.shared_cpus == g_a.l2.shared_cpus);
  // Every id the kernel may bring online, present or not (hwloc alone sees only the
  // present ones: the guest's --possible shape had 8 of 12).
  REQUIRE(g_b.cpus_possible >= kernel_possible_cpus());
}

TEST_CASE("a differing topology is described") {
  topology_probe(&g_a, false);
  g_b = g_a;
  g_b.nodes = g_a.nodes + 1;
  g_b.cpu_node[0] = static_cast<uint8_t>(g_a.nodes);
  char diff[512];
  REQUIRE(topology_diff(g_a, g_b, diff, sizeof diff) > 0);
  REQUIRE(std::string(diff).find("nodes") != std::string::npos);
  REQUIRE(std::string(diff).find("node of CPU 0") != std::string::npos);
}

TEST_CASE("hwloc's synthetic 2 packages x 2 nodes x 8 cores x 2 threads") {
  REQUIRE(hwloc_synthetic("pack:2 numa:2 core:8 pu:2", &g_a));
  REQUIRE(g_a.synthetic);
  REQUIRE(g_a.cpus_possible == 64);
  REQUIRE(g_a.nodes == 4);
  for (uint32_t c = 0; c < 64; c++) REQUIRE(g_a.cpu_node[c] == c / 16);
  for (uint32_t n = 0; n < 4; n++) REQUIRE(g_a.cpus_of_node(n) == 16);

  RestoreTopology restore;
  topology_adopt(g_a);
  REQUIRE(node_count() == 4);
  REQUIRE(shard_count() == 64);  // one CPU each
  REQUIRE(shard_cpus() == 1);
  for (uint32_t c = 0; c < 64; c++) REQUIRE(node_of_cpu(c) == c / 16);
  unsigned per_node[4] = {};
  for (unsigned sh = 0; sh < 64; sh++) per_node[node_of_shard(sh)]++;
  for (unsigned n = 0; n < 4; n++) REQUIRE(per_node[n] == 16);
  // CPU ids beyond the topology still map somewhere valid.
  for (uint32_t c = 64; c < 5000; c += 7) REQUIRE(shard_of_cpu(c) < shard_count());
}

TEST_CASE("with more CPUs than shards, a shard takes several CPUs of one node") {
  REQUIRE(hwloc_synthetic("numa:2 core:32 pu:2", &g_a));
  REQUIRE(g_a.cpus_possible == 128);
  RestoreTopology restore;
  topology_adopt(g_a);
  REQUIRE(shard_cpus() == 2);
  for (uint32_t c = 0; c < 128; c++) {
    REQUIRE(node_of_cpu(c) == c / 64);
    REQUIRE(shard_of_cpu(c) == c / 2);
  }

  // Nodes whose CPU ids interleave (0, 2, 4 … on node 0): shards follow the nodes,
  // not the ids.
  topology_probe(&g_b, false);
  g_b.cpus_possible = 200;
  g_b.nodes = 2;
  for (uint32_t c = 0; c < 200; c++) g_b.cpu_node[c] = static_cast<uint8_t>(c % 2);
  topology_adopt(g_b);
  REQUIRE(shard_cpus() == 4);  // 2 x 25 shards fit in 64; 2 x 34 with 3 CPUs each do not
  std::vector<unsigned> cpus_in(kMaxShards);
  for (uint32_t c = 0; c < 200; c++) {
    REQUIRE(node_of_shard(shard_of_cpu(c)) == c % 2);
    cpus_in[shard_of_cpu(c)]++;
  }
  for (unsigned sh = 0; sh < kMaxShards; sh++) REQUIRE(cpus_in[sh] <= 4);
}

TEST_CASE("the nodes a process may use, from one system call", "[kernel]") {
  topology_probe(&g_a, false);
  unsigned n = os::allowed_nodes();
  REQUIRE(n >= 1);
  REQUIRE(n <= g_a.nodes);  // a cpuset may allow fewer nodes than the machine has
}

TEST_CASE("memory is bound to a node through mbind", "[kernel]") {
  size_t len = 1 << 20;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  REQUIRE(os::bind_node(p, len, 0));
  int mode = -1;
  unsigned long mask[4] = {};
  REQUIRE(syscall(SYS_get_mempolicy, &mode, mask, sizeof mask * 8 + 1, p, 2 /* MPOL_F_ADDR */) == 0);
  REQUIRE(mode == 1);  // MPOL_PREFERRED
  REQUIRE(mask[0] == 1);
  REQUIRE_FALSE(os::bind_node(p, len, 200));  // beyond the mask: refused, nothing changed
  memset(p, 1, len);  // the pages fault in under the policy
  munmap(p, len);
}

TEST_CASE("a memory policy of the process's own (numactl) is seen, so uslab binds nothing",
          "[kernel]") {
  // Under numactl --membind=1, uslab's preferred-node ranges overrode the process's
  // policy: 1797 of the pages it handed out in a 2-node guest were on node 0.
  REQUIRE_FALSE(os::task_memory_policy());  // the test runs with no policy
  unsigned long node0 = 1;
  for (int mode : {1 /* MPOL_PREFERRED */, 2 /* MPOL_BIND */, 3 /* MPOL_INTERLEAVE */}) {
    REQUIRE(syscall(SYS_set_mempolicy, mode, &node0, sizeof node0 * 8 + 1) == 0);
    CHECK(os::task_memory_policy());
  }
  REQUIRE(syscall(SYS_set_mempolicy, 4 /* MPOL_LOCAL */, nullptr, 0) == 0);
  CHECK_FALSE(os::task_memory_policy());  // the default placement, said explicitly
  REQUIRE(syscall(SYS_set_mempolicy, 0 /* MPOL_DEFAULT */, nullptr, 0) == 0);
  CHECK_FALSE(os::task_memory_policy());
}

TEST_CASE("objects freed on a CPU of another node go back to their node") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
  struct RestoreAffinity {
    cpu_set_t* set;
    ~RestoreAffinity() { sched_setaffinity(0, sizeof *set, set); }
  } restore_affinity{&saved};
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || !pin_to(0) || !pin_to(1)) {
    WARN("needs CPUs 0 and 1");
    return;
  }
  REQUIRE(hwloc_synthetic("numa:2 pu:1", &g_a));  // CPU 0 on node 0, CPU 1 on node 1
  RestoreTopology restore;
  topology_adopt(g_a);
  percpu_nodes_changed();
  REQUIRE(node_count() == 2);
  REQUIRE(node_of_cpu(0) == 0);
  REQUIRE(node_of_cpu(1) == 1);

  heap::trim();  // CPU sheaves empty: CPU 0 refills from its own shard only
  constexpr size_t kObjects = 5000;
  static void* objs[kObjects];
  uint64_t before0 = remote_node_frees(0), before1 = remote_node_frees(1);
  // The allocating thread on CPU 0, the freeing one on CPU 1; fresh threads, so that
  // in the per-thread mode their caches take shards of the nodes they run on.
  auto run_on = [](unsigned cpu, void* (*body)(void*)) {
    pthread_t t;
    struct Arg {
      unsigned cpu;
      void* (*body)(void*);
    } arg{cpu, body};
    REQUIRE(pthread_create(&t, nullptr, [](void* a) -> void* {
      auto* x = static_cast<Arg*>(a);
      if (!pin_to(x->cpu)) return reinterpret_cast<void*>(1);
      return x->body(nullptr);
    }, &arg) == 0);
    void* r;
    REQUIRE(pthread_join(t, &r) == 0);
    REQUIRE(r == nullptr);
  };
  run_on(0, [](void*) -> void* {
    for (size_t i = 0; i < kObjects; i++) {
      objs[i] = heap::alloc(64);
      if (!objs[i]) return reinterpret_cast<void*>(1);
      memset(objs[i], static_cast<int>(i & 0xff), 64);
    }
    return nullptr;
  });
  for (size_t i = 0; i < kObjects; i++) REQUIRE(node_of_shard(PageMap::get(objs[i])->shard) == 0);
  run_on(1, [](void*) -> void* {
    for (size_t i = 0; i < kObjects; i++) {
      if (static_cast<unsigned char*>(objs[i])[63] != (i & 0xff)) return reinterpret_cast<void*>(1);
      heap::free(objs[i]);
    }
    heap::flush_thread_cache();  // per-thread mode: the thread's cache goes back now
    return nullptr;
  });
  heap::trim();  // flushes what waits in the CPUs' remote-node buffers
  RemoteNodeStats rs;
  percpu_remote_stats(&rs);
  REQUIRE(rs.pending == 0);
  REQUIRE(remote_node_frees(0) - before0 >= kObjects);
  REQUIRE(remote_node_frees(1) - before1 < kObjects / 10);
  REQUIRE(heap::stats().remote_node_frees >= kObjects);
}
