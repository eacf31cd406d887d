// core/alloc/percpu.h: what the decay does to the per-CPU sheaves: a tick empties
// the sheaves of classes that served from them without a miss, keeps those of classes
// that missed, drains those idle for kCacheIdleTicks ticks, and a CPU whose sheaves
// were all drained gives its slot pages back (those of its empty deferred-free and
// remote-node sheaves too) and uses them again; how much a drain past the depot's
// bound and a refill move; another CPU's sheaves emptied where a filter refuses
// membarrier after start. (The rseq sections: percpu_rseq_test.cc; the capacity
// policy: capacity_test.cc.) Per-CPU mode only: in the per-thread mode the thread
// caches' rules apply (thread_cache_test.cc).
#include <catch2/catch.hpp>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/alloc/percpu_meta.h"
#include "core/core.h"
#include "test/unit/synthetic.h"

using namespace uslab;

#include "test/unit/filtered_child.h"
#include "test/unit/own_ticks.h"
#include "test/unit/pinned_cpu.h"

size_t cpu_cached(unsigned cls) {
  PerCpuClassStats st[kMaxClasses];
  percpu_class_stats(st);
  return st[cls].cpu_objects;
}

TEST_CASE("the decay tick empties the CPU sheaves of classes that served without a miss") {
  // Objects a class keeps cached through light use are scattered over slabs a peak
  // left otherwise free; the tick gives them back (a class in use kept a batch: 2.2
  // MB of slabs stayed pinned by 175 KB of cached objects after a peak).
  heap::free(heap::alloc(1000));  // the mode is chosen on the first slow path
  if (!g_percpu || !rseq_fence_available()) return;  // per-thread caches: their own rules
  // On one CPU: the last round below must be served from the sheaf the misses before
  // it grew (a thread that moved missed on the other CPU, whose sheaf rightly stays).
  PinnedToOneCpu pinned;
  OwnTicks ticks;
  const unsigned cls = size_to_class(1000);
  std::vector<void*> objs(12);
  for (int round = 0; round < 3; round++) {  // the capacity grows by a batch per miss
    for (void*& p : objs) p = heap::alloc(1000);
    for (void* p : objs) heap::free(p);
  }
  REQUIRE(cpu_cached(cls) >= objs.size());
  decay_tick_now();  // it missed since the last tick: kept
  REQUIRE(cpu_cached(cls) >= objs.size());
  for (void*& p : objs) p = heap::alloc(1000);  // served from the sheaf: no miss
  for (void* p : objs) heap::free(p);
  decay_tick_now();
  CHECK(cpu_cached(cls) == 0);
}

TEST_CASE("a class that missed keeps its sheaf through the tick, until idle for kCacheIdleTicks") {
  // A server that goes quiet between requests: when the first tick after a request
  // emptied every sheaf it had cycled through, and a tick with no request drained
  // them, each request after a pause of a tick or more started cold (bench requests).
  heap::free(heap::alloc(1500));
  if (!g_percpu || !rseq_fence_available()) return;
  PinnedToOneCpu pinned;
  OwnTicks ticks;
  percpu_drain_all();  // an empty sheaf: the first allocation misses
  const unsigned cls = size_to_class(1500);
  REQUIRE(cpu_cached(cls) == 0);
  std::vector<void*> objs(64);
  for (void*& p : objs) p = heap::alloc(1500);
  for (void* p : objs) heap::free(p);
  const size_t kept = cpu_cached(cls);
  REQUIRE(kept > 0);
  decay_tick_now();  // it missed since the last tick: what it holds is what it uses next
  CHECK(cpu_cached(cls) == kept);
  for (unsigned t = 1; t < kCacheIdleTicks; t++) {
    decay_tick_now();  // unused, but not yet for kCacheIdleTicks ticks
    CHECK(cpu_cached(cls) == kept);
  }
  decay_tick_now();
  CHECK(cpu_cached(cls) == 0);
}

TEST_CASE("a CPU whose sheaves were all drained gives their pages back, and reuses them") {
  // A single-threaded program that moved over the 64 CPUs of a guest kept about 2.7
  // MiB of drained regions' slot pages resident for good.
  heap::free(heap::alloc(64));
  if (!g_percpu || !rseq_fence_available()) return;
  PinnedToOneCpu pinned;
  const int cpu = pinned.cpu;
  const cpu_set_t& saved_set = pinned.saved;
  // Resident pages of the CPU's region past its first (mincore's are the kernel's;
  // the region's first is uslab's, os_page's).
  auto resident = [&] {
    unsigned char v[64];
    char* r = g_cpu_region + (size_t{static_cast<uint32_t>(cpu)} << kCpuRegionShift);
    REQUIRE(mincore(r, size_t{1} << kCpuRegionShift, v) == 0);
    const size_t pages = (size_t{1} << kCpuRegionShift) / os::kernel_page_size();
    int n = 0;
    for (size_t i = os::page_size() / os::kernel_page_size(); i < pages; i++) n += v[i] & 1;
    return n;
  };
  std::vector<void*> objs;
  for (size_t size : {48, 200, 1000, 3000}) {
    for (int i = 0; i < 600; i++) objs.push_back(heap::alloc(size));
    for (void* p : objs) heap::free(p);  // the sheaves grow and fill
    objs.clear();
  }
  // The CPU's remote-node buffer opens too: on a synthetic machine where CPU 0 is on
  // another node, objects allocated there are freed here. Flushed by the ticks, it
  // stays open and empty, and must not keep its page.
  if (cpu >= 1 && CPU_ISSET(0, &saved_set)) {
    static Topology two;
    char description[32];
    snprintf(description, sizeof description, "numa:2 pu:%d", (cpu + 2) / 2);
    REQUIRE(hwloc_synthetic(description, &two));
    RestoreTopology restore;
    topology_adopt(two);
    percpu_nodes_changed();
    REQUIRE(node_of_cpu(0) != node_of_cpu(static_cast<uint32_t>(cpu)));
    std::vector<void*> remote(100);
    std::thread([&] {
      cpu_set_t zero;
      CPU_ZERO(&zero);
      CPU_SET(0, &zero);
      if (sched_setaffinity(0, sizeof zero, &zero) == 0)
        for (void*& p : remote) p = heap::alloc(64);
    }).join();
    for (void* p : remote) REQUIRE(p != nullptr);
    for (void* p : remote) heap::free(p);
    RemoteNodeStats rs;
    percpu_remote_stats(&rs);
    CHECK(rs.pending > 0);  // in this CPU's buffer
  }
  const int before = resident();
  CHECK(before > 2);
  const uint64_t saved = g_config.decay_ms;
  g_config.decay_ms = 4;
  for (int i = 0; i < 200 && resident() > 0; i++) {  // no allocation meanwhile: idle
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    decay_maybe_tick();
  }
  const int after = resident();
  CHECK(after == 0);
  for (int i = 0; i < 600; i++) objs.push_back(heap::alloc(200));  // used again
  for (void* p : objs) heap::free(p);
  PerCpuClassStats st[kMaxClasses];
  percpu_class_stats(st);
  CHECK(st[size_to_class(200)].cpu_objects > 0);
  CHECK(resident() > 0);
  g_config.decay_ms = saved;
  INFO("resident slot pages: " << before << " -> " << after);
}

TEST_CASE("a drain past the depot's bound moves two batches to the slabs, a refill one") {
  // A drain past the depot's bound pays the class lock for what it moves: of 2 KiB, a
  // batch is 8 objects. A refill from the slabs takes one (two held more memory).
  heap::free(heap::alloc(2000));
  if (!g_percpu || !rseq_fence_available()) return;
  PinnedToOneCpu pinned;
  OwnTicks ticks;
  const unsigned cls = size_to_class(2000), shard = shard_of_cpu(static_cast<uint32_t>(pinned.cpu));
  REQUIRE(slab_drain_size(cls) == 2 * batch_size(cls));
  CentralList& central = g_central[shard][cls];
  Depot& depot = g_depot[shard][cls];
  auto out_of_slabs = [&] {
    CentralStats s = central.stats(cls);
    return s.objects - s.free_objects;
  };
  percpu_drain_all();
  depot.flush(cls);
  size_t out = out_of_slabs();
  void* first = heap::alloc(2000);  // an empty sheaf, an empty depot
  CHECK(out_of_slabs() == out + batch_size(cls));
  std::vector<void*> objs(200);
  for (void*& p : objs) p = heap::alloc(2000);
  // The depot at its bound: every drain below goes on to the slabs.
  std::vector<std::vector<void*>> held;
  while (!depot.at_bound(cls)) {
    held.emplace_back(batch_size(cls));
    REQUIRE(central.alloc_batch(cls, held.back().data(), batch_size(cls)) == batch_size(cls));
    depot.give(cls, held.back().data(), batch_size(cls), false);
  }
  out = out_of_slabs();
  const uint64_t batches = central.stats(cls).batches_in;
  for (void* p : objs) heap::free(p);
  const size_t back = out - out_of_slabs();
  const uint64_t calls = central.stats(cls).batches_in - batches;
  INFO(back << " objects back to the slabs in " << calls << " batches");
  REQUIRE(calls > 0);
  CHECK(back / calls > batch_size(cls));
  heap::free(first);
  depot.flush(cls);
}

TEST_CASE("a refill moves up to kSheavesPerMove depot sheaves and half the sheaf at most") {
  // One depot lock for several sheaves (depot.h): N x alloc and N x free of 8-32 B
  // paid it every two batches; a move never empties or fills more than half the sheaf.
  heap::free(heap::alloc(16));
  if (!g_percpu || !rseq_fence_available()) return;
  PinnedToOneCpu pinned;
  OwnTicks ticks;
  const uint32_t c = static_cast<uint32_t>(pinned.cpu);
  const unsigned cls = size_to_class(16), shard = shard_of_cpu(c);
  const size_t batch = batch_size(cls);
  // Misses grow the class's sheaf to its most.
  std::vector<void*> objs(4096);
  for (int r = 0; r < 8; r++) {
    for (void*& p : objs) p = heap::alloc(16);
    for (void* p : objs) heap::free(p);
  }
  REQUIRE(percpu_internal::capacity_of(c, cls) >= 2 * kSheavesPerMove * batch);
  // The sheaf emptied without a miss, the depot holding one sheaf more than a move.
  std::vector<void*> held(percpu_internal::cached_of(c, cls));
  for (void*& p : held) p = heap::alloc(16);
  REQUIRE(percpu_internal::cached_of(c, cls) == 0);
  Depot& depot = g_depot[shard][cls];
  depot.flush(cls);
  depot.asked();
  std::vector<void*> stock((kSheavesPerMove + 1) * batch);
  REQUIRE(g_central[shard][cls].alloc_batch(cls, stock.data(), stock.size()) == stock.size());
  depot.give(cls, stock.data(), stock.size(), false, batch);
  REQUIRE(depot.stats().objects == stock.size());
  const uint64_t hits = depot.stats().hits;
  void* p = heap::alloc(16);  // the miss
  const size_t cap = percpu_internal::capacity_of(c, cls);
  const size_t moved = std::min<size_t>(kSheavesPerMove, cap / (2 * batch));
  INFO("capacity " << cap << ", batch " << batch);
  CHECK(moved == kSheavesPerMove);
  CHECK(depot.stats().hits == hits + moved);
  CHECK(depot.stats().objects == stock.size() - moved * batch);
  CHECK(percpu_internal::cached_of(c, cls) == moved * batch - 1);
  heap::free(p);
  for (void* q : held) heap::free(q);
  percpu_drain_all();
  depot.flush(cls);
}

TEST_CASE(
    "another CPU's sheaves are emptied where a filter installed after start refuses "
    "membarrier") {
  heap::free(heap::alloc(64));
  if (!g_percpu || !rseq_fence_available()) return;
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  int a = -1, b = -1;  // two CPUs with regions
  for (int c = 0; c < CPU_SETSIZE && static_cast<uint32_t>(c) < g_cpu_count; c++)
    if (CPU_ISSET(c, &all)) (a < 0 ? a : b < 0 ? b : c) = c;
  if (b < 0) {
    WARN("one CPU: no other CPU's sheaves to empty");
    return;
  }
  const unsigned cls = size_to_class(200);
  auto run_on = [](int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof one, &one) == 0;
  };
  // In a child: a filter cannot be lifted. Objects cached on CPU a, then emptied
  // from CPU b: the fence is refused (EPERM), so b's thread visits a instead. Before,
  // the sheaves stayed full.
  int status = in_filtered_child({{SYS_membarrier, EPERM}}, [&] {
    if (!run_on(a)) return false;
    std::vector<void*> objs;
    for (int i = 0; i < 200; i++) objs.push_back(heap::alloc(200));
    for (void* p : objs) heap::free(p);
    if (cpu_cached(cls) == 0) return false;
    if (!run_on(b)) return false;
    percpu_drain_all();
    cpu_set_t now;
    bool restored = sched_getaffinity(0, sizeof now, &now) == 0 && CPU_COUNT(&now) == 1 &&
                    CPU_ISSET(b, &now);  // the visit put its CPU set back
    return cpu_cached(cls) == 0 && restored;
  });
  if (status == 2) {
    WARN("no seccomp filter could be installed here");
    return;
  }
  CHECK(status == 0);
}
