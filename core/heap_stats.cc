// core/heap_stats.cc — the Heap facade's statistics (uslab_stats_get, mallctl's
// stats.*) and its printed reports: the slabinfo-style table (USLAB_STATS=1, at exit
// on the duplicate of stderr init() keeps) and what the topology providers see.
// Locking: topology printing has its own lock (kTopologyPrint: hwloc, which it may
// load, allocates); the statistics are racy sums read without locks of their own.
#include "core/heap.h"

#include "core/heap_parts.h"

namespace uslab::heap {

namespace {

// Objects of each class held in the caches in front of the slabs (racy sums).
struct CachedCounts {
  size_t thread[kMaxClasses];
  size_t ncaches;
  PerCpuClassStats cpu[kMaxClasses];
  DepotStats depot[kMaxClasses];
  uint64_t hits[kMaxClasses];  // of the CPU sheaves and the thread caches

  CachedCounts() {
    thread_cache_counts(thread, &ncaches);
    percpu_class_stats(cpu);
    thread_cache_hits(hits);
    for (unsigned c = 1; c < kMaxClasses; c++) {
      depot[c] = depot_stats(c);
      hits[c] += cpu[c].hits;
    }
  }
  size_t total(unsigned c) const { return thread[c] + cpu[c].cpu_objects + depot[c].objects; }
};

}  // namespace

Stats stats() {
  Stats st{};
  CachedCounts cached;
  RemoteNodeStats rs;
  percpu_remote_stats(&rs);
  st.thread_caches = cached.ncaches;
  for (unsigned c = 1; c < kMaxClasses; c++) {
    CentralStats cs = central_stats(c);
    size_t live = cs.objects - cs.free_objects;
    const size_t held = cached.total(c) + rs.pending_by_class[c];  // free, in caches and buffers
    live = live > held ? live - held : 0;
    st.small_slab_bytes += cs.slabs * class_info(c).slab_pages * kPageSize;
    st.small_allocated += live * class_size(c);
    st.thread_cached += cached.thread[c] * class_size(c);
    st.cpu_cached += (cached.cpu[c].cpu_objects + rs.pending_by_class[c]) * class_size(c);
    st.depot_cached += cached.depot[c].objects * class_size(c);
  }
  PageHeapStats ph = page_heap_stats();
  st.huge_count = g_huge_count.load(std::memory_order_relaxed);
  st.huge_allocated = g_huge_bytes.load(std::memory_order_relaxed);
  st.mapped = segment_mapped_bytes();
  // Descriptors and pools, the shards' arrays made resident, the CPUs' header pages.
  st.metadata = g_meta_arena.mapped() + g_paged_pool_bytes.load(std::memory_order_relaxed) +
                prepared_shard_bytes() + percpu_header_bytes();
  st.large_allocated = ph.large_bytes;
  st.free_bytes = ph.free_bytes;
  st.dirty_bytes = ph.dirty_bytes;
  st.purged_bytes = ph.purged_bytes;
  st.huge_segments = ph.huge_segments;
  st.thp_splits = ph.thp_splits;
  st.thp_collapses = ph.thp_collapses;
  st.thp_kept_bytes = ph.thp_kept_bytes;
  st.allocated = st.small_allocated + st.large_allocated + st.huge_allocated;
  st.active = st.small_slab_bytes + st.large_allocated + st.huge_allocated;
  st.resident = st.mapped - (st.free_bytes - st.dirty_bytes) + st.metadata;
  st.nodes = node_count();
  for (unsigned n = 0; n < kTopoMaxNodes; n++) st.remote_node_frees += rs.received[n];
  st.remote_node_pending = rs.pending;
  switch (background_state()) {  // as uslab.h numbers them
    case BackgroundState::kIdle:
      st.background = 0;
      break;
    case BackgroundState::kWanted:
    case BackgroundState::kStarting:
      st.background = 1;
      break;
    case BackgroundState::kRunning:
      st.background = 2;
      break;
    case BackgroundState::kFailed:
      st.background = 3;
      break;
  }
  return st;
}

int mode() {
  percpu_decide();
  return g_percpu ? static_cast<int>(rseq_mode()) : 0;
}

unsigned cpus_in_use() { return g_percpu ? percpu_stats().cpus_used : 0; }

void stats_print(void (*write)(void*, const char*), void* opaque) {
  char line[256];
  auto out = [&](const char* fmt, auto... args) {
    os::format(line, sizeof line, fmt, args...);
    write(opaque, line);
  };
  config_init();
  percpu_decide();  // a process that never allocated still shows its mode
  CachedCounts cached;
  if (g_percpu) {
    PerCpuStats pc = percpu_stats();
    out("uslab stats (mode: %s, %s addressing; %u of %u CPUs used, %zu bytes of capacity per "
        "CPU, %zu thread caches)\n",
        rseq_mode_name(rseq_mode()), sheaf_form_name(), pc.cpus_used, pc.cpus_possible, pc.budget,
        cached.ncaches);
    out("sheaf capacity: %zu grows (%zu past a CPU's budget), %zu steals, %zu CPU drains\n",
        (size_t)pc.grows, (size_t)pc.borrows, (size_t)pc.steals, (size_t)pc.drains);
  } else {
    out("uslab stats (mode: per-thread caches (%s); %zu thread caches)\n",
        g_config.poison   ? "none: poison=true sends every object through its slab"
        : g_config.percpu ? "rseq unavailable"
                          : "forced by percpu=false",
        cached.ncaches);
  }
  if (g_config.poison || g_config.guard)
    out("checks: poison %s (freed small objects, checked when allocated again), guard pages "
        "%s (around large objects)\n",
        g_config.poison ? "on" : "off", g_config.guard ? "on" : "off");
  const Topology& topo = topology_in_use();
  out("topology: %u possible CPUs, %u NUMA node%s%s, %u shards of %u CPUs, L2 %zu KiB (%s)\n",
      topo.cpus_possible, topo.nodes, topo.nodes == 1 ? "" : "s",
      topo.synthetic ? " (synthetic)" : "", shard_count(), shard_cpus(),
      static_cast<size_t>(topo.l2.bytes >> 10), topo.source);
  if (topo.nodes > 1) {
    RemoteNodeStats rs;
    percpu_remote_stats(&rs);
    for (unsigned n = 0; n < topo.nodes; n++) {
      unsigned first;
      out("node %u: %u CPUs, %u shards, %zu remote-node frees received\n", n, topo.cpus_of_node(n),
          shards_of_node(n, &first), static_cast<size_t>(rs.received[n]));
    }
    out("remote-node buffers: %zu objects pending, %zu flushes\n", rs.pending,
        static_cast<size_t>(rs.flushes));
  }
  size_t deferred[kMaxClasses];
  DeferredStats d = deferred_stats(deferred);
  out("%5s %7s %6s %9s %9s %8s %8s %8s %9s %11s %9s %9s %9s %9s %9s %9s %9s\n", "class", "size",
      "slabs", "objects", "active", "cpu", "depot", "thread", "free", "hits", "refills", "drains",
      "depot-hit", "slab-out", "slab-in", "deferred", "remote");
  for (unsigned c = 1; c < kNumClasses; c++) {
    CentralStats cs = central_stats(c);
    if (cs.slabs == 0 && cs.batches_out == 0) continue;
    size_t used = cs.objects - cs.free_objects;
    size_t active = used > cached.total(c) ? used - cached.total(c) : 0;
    const DepotStats& dp = cached.depot[c];
    out("%5u %7u %6zu %9zu %9zu %8zu %8zu %8zu %9zu %11zu %9zu %9zu %9zu %9zu %9zu %9zu %9zu\n", c,
        (unsigned)class_size(c), cs.slabs, cs.objects, active, cached.cpu[c].cpu_objects,
        dp.objects, cached.thread[c], cs.free_objects, (size_t)cached.hits[c],
        (size_t)cached.cpu[c].refills, (size_t)cached.cpu[c].drains, (size_t)dp.hits,
        (size_t)cs.batches_out, (size_t)cs.batches_in, deferred[c],
        (size_t)(dp.remote + cs.remote));
  }
  struct CacheLines {
    decltype(out)& print;
    const CachedCounts& cached;
    const size_t* deferred;
  } lines{out, cached, deferred};
  obj_cache_for_each(
      [](const ObjCache* c, void* arg) {
        auto& l = *static_cast<CacheLines*>(arg);
        CentralStats cs = central_stats(c->cls);
        size_t used = cs.objects - cs.free_objects;
        size_t active = used > l.cached.total(c->cls) ? used - l.cached.total(c->cls) : 0;
        active += guard::live_in_class(c->cls);  // served from guarded slots
        l.print(
            "cache %-24s size %6u align %4u slabs %6zu objects %9zu active %9zu deferred %zu%s\n",
            c->name, c->size, c->align, cs.slabs, cs.objects, active, l.deferred[c->cls],
            c->retired ? " (destroyed)" : "");
      },
      &lines);
  Stats st = stats();
  out("cached: %zu bytes in CPU sheaves, %zu in depots, %zu in thread caches\n", st.cpu_cached,
      st.depot_cached, st.thread_cached);
  out("small: %zu bytes in slabs, %zu allocated\n", st.small_slab_bytes, st.small_allocated);
  out("large: %zu bytes allocated; huge: %zu objects, %zu bytes, %zu bytes of freed ones "
      "kept for reuse\n",
      st.large_allocated, st.huge_count, st.huge_allocated, huge_cache_bytes());
  out("pages: %zu mapped, %zu resident (estimate), %zu free (%zu dirty), %zu returned to the "
      "OS, %zu metadata\n",
      st.mapped, st.resident, st.free_bytes, st.dirty_bytes, st.purged_bytes, st.metadata);
  char thp_bytes[32] = "unknown";
  if (long b = os::thp_resident_bytes(); b >= 0)
    os::format(thp_bytes, sizeof thp_bytes, "%zu", static_cast<size_t>(b));
  out("huge pages (THP %s): %zu segments advised, %zu collapsed, %zu times a return took "
      "one off them, %zu free bytes kept inside them; %s bytes of the process in huge pages "
      "(smaps_rollup)\n",
      !g_config.thp                             ? "off: thp=false"
      : os::thp_mode() == os::ThpMode::kNever   ? "off: the system's setting is never"
      : os::thp_mode() == os::ThpMode::kMadvise ? "on, system setting madvise"
                                                : "on, system setting always",
      st.huge_segments, st.thp_collapses, st.thp_splits, st.thp_kept_bytes, thp_bytes);
  out("deferred: %zu objects pending (%zu bytes in %zu sealed blocks, %zu chained), "
      "%zu freed in %zu blocks, %zu grace periods (%s)\n",
      d.objects_pending, d.bytes_waiting, d.blocks, d.emergency_objects, (size_t)d.objects_freed,
      (size_t)d.blocks_freed, (size_t)d.grace_periods,
      d.membarrier ? "membarrier" : "reader fences");
  background_describe(line, sizeof line);
  write(opaque, line);
  memory_limit_describe(line, sizeof line, false);
  write(opaque, line);
  if (size_t n = foreign::forwarded())
    out("foreign: %zu frees of glibc's blocks (RTLD_DEEPBIND libraries, launchers) forwarded "
        "to glibc\n",
        n);
  if (prof::enabled()) {
    prof::Stats ps = prof::stats();
    out("prof: %s, a sample every %zu bytes on average: %zu samples, %zu live (%zu bytes "
        "estimated live, %zu at the peak), %zu stacks, %zu profiles written; %zu bytes of "
        "its own\n",
        prof::active() ? "active" : "inactive", static_cast<size_t>(prof::sample_bytes()),
        static_cast<size_t>(ps.samples), ps.live_samples, static_cast<size_t>(ps.live_bytes),
        static_cast<size_t>(ps.peak_bytes), ps.stacks, static_cast<size_t>(ps.dumps), ps.mapped);
  }
  if (uint64_t mean = sample_client_bytes(SampleClient::kGuard)) {
    guard::Stats gs = guard::stats();
    out("guarded: an allocation every %zu bytes on average: %zu so far, %u slots of %zu (%u "
        "live, %u freed and inaccessible), %zu errors reported\n",
        static_cast<size_t>(mean), static_cast<size_t>(gs.allocations), gs.live + gs.quarantined,
        static_cast<size_t>(gs.slots ? gs.slots : g_config.guard_slots), gs.live, gs.quarantined,
        static_cast<size_t>(gs.reports));
  } else {
    out("%s", "guarded: off (guard_sample=0)\n");
  }
}

namespace {
constinit Mutex topology_print_lock_;
USLAB_LOCK_ONE(kTopologyPrint, topology_print_lock_);
}  // namespace

void topology_print(void (*write)(void*, const char*), void* opaque) {
  // Two records of 4 KiB each: static, behind a lock, rather than on the caller's stack.
  USLAB_LARGE_ZERO static Topology probe, hw;
  USLAB_LARGE_ZERO static char text[8192];
  LockGuard g(topology_print_lock_);
  auto out = [&](const char* fmt, auto... args) {
    os::format(text, sizeof text, fmt, args...);
    write(opaque, text);
  };
  auto describe = [&](const Topology& t) {
    topology_format(t, text, sizeof text);
    write(opaque, text);
  };
  topology_probe(&probe, true);
  out("The probe (sysfs, sched_getaffinity, cpuid) sees:\n");
  describe(probe);
  char why[160];
  if (topology_hwloc(&hw, why, sizeof why)) {
    out("hwloc sees:\n");
    describe(hw);
    char diff[512];
    if (topology_diff(probe, hw, diff, sizeof diff))
      out("The providers differ: %s\n", diff);
    else
      out("The providers agree.\n");
  } else {
    out("hwloc: not available (%s)\n", why);
  }
  config_init();
  percpu_decide();
  const Topology& t = topology_in_use();
  const char* how = g_config.topology == TopologySource::kHwloc   ? "topology=hwloc"
                    : g_config.topology == TopologySource::kProbe ? "topology=probe"
                                                                  : "topology=auto";
  out("uslab uses (%s):\n", how);
  describe(t);
  out("  %u shards of %u CPUs:", shard_count(), shard_cpus());
  for (unsigned n = 0; n < t.nodes; n++) {
    unsigned first, count = shards_of_node(n, &first);
    if (count) out(" node %u: %u (from %u)%s", n, count, first, n + 1 < t.nodes ? ";" : "");
  }
  NodeBinding b = node_binding();
  out("\n  memory bound to nodes: %s\n",
      b == NodeBinding::kBound       ? "yes (mbind, preferred)"
      : b == NodeBinding::kSynthetic ? "no (synthetic nodes)"
      : b == NodeBinding::kTaskPolicy
          ? "no (the process has a memory policy: the kernel applies it)"
          : "no (one node)");
  if (g_percpu) {
    PerCpuStats pc = percpu_stats();
    out("  mode: %s, %s addressing; sheaves for CPU ids below %u; %zu bytes of sheaf capacity "
        "per CPU\n",
        rseq_mode_name(rseq_mode()), sheaf_form_name(), pc.cpus_possible, pc.budget);
  } else {
    out("  mode: per-thread caches\n");
  }
  write(opaque, "  ");
  memory_limit_describe(text, sizeof text, true);
  write(opaque, text);
}

int g_report_fd = 2;

void stats_print_stderr() {
  stats_print(
      [](void*, const char* t) {
        size_t n = 0;
        while (t[n]) n++;
        os::write_fd(g_report_fd, t, n);
      },
      nullptr);
}

USLAB_STARTUP_TEXT bool stats_at_exit() {
  config_init();
  return g_config.stats_at_exit;
}

}  // namespace uslab::heap
