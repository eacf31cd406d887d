// core/stats/table.cc — the printed reports: the slabinfo-style table
// (uslab_stats_print, malloc_stats, USLAB_STATS=1 at exit on the duplicate of stderr
// stats_report_init keeps) and what the topology providers see (uslab_topology_print).
// Locking: topology printing has its own lock (kTopologyPrint: hwloc, which it may
// load, allocates); the table prints a snapshot (snapshot.h); the
// report's descriptor is set once, in the library's constructor.
#include "core/stats/stats.h"

#include "core/stats/snapshot.h"

namespace uslab::heap {

void print_table(const Snapshot& s, void (*write)(void*, const char*), void* opaque) {
  char line[256];
  auto out = [&](const char* fmt, auto... args) {
    os::format(line, sizeof line, fmt, args...);
    write(opaque, line);
  };
  if (s.front == Snapshot::Front::kPerCpu) {
    const PerCpuStats& pc = s.cpus;
    out("uslab stats (mode: %s, %s addressing; %u of %u CPUs used, %zu bytes of capacity per "
        "CPU, %zu thread caches)\n",
        rseq_mode_name(s.rseq), s.addressing, pc.cpus_used, pc.cpus_possible, pc.budget,
        s.thread_caches());
    out("sheaf capacity: %zu grows (%zu past a CPU's budget), %zu steals, %zu CPU drains\n",
        (size_t)pc.grows, (size_t)pc.borrows, (size_t)pc.steals, (size_t)pc.drains);
  } else {
    out("uslab stats (mode: per-thread caches (%s); %zu thread caches)\n",
        s.front == Snapshot::Front::kPoison   ? "none: poison=true sends every object through its slab"
        : s.front == Snapshot::Front::kNoRseq ? "rseq unavailable"
                                              : "forced by percpu=false",
        s.thread_caches());
  }
  if (s.poison || s.guard_pages)
    out("checks: poison %s (freed small objects, checked when allocated again), guard pages "
        "%s (around large objects)\n",
        s.poison ? "on" : "off", s.guard_pages ? "on" : "off");
  const Topology& topo = *s.topology;
  out("topology: %u possible CPUs, %u NUMA node%s%s, %u shards of %u CPUs, L2 %zu KiB (%s)\n",
      topo.cpus_possible, topo.nodes, topo.nodes == 1 ? "" : "s",
      topo.synthetic ? " (synthetic)" : "", s.shards, s.cpus_per_shard,
      static_cast<size_t>(topo.l2.bytes >> 10), topo.source);
  if (topo.nodes > 1) {
    for (unsigned n = 0; n < topo.nodes; n++)
      out("node %u: %u CPUs, %u shards, %zu remote-node frees received\n", n, topo.cpus_of_node(n),
          s.node_shards[n], static_cast<size_t>(s.remote.received[n]));
    out("remote-node buffers: %zu objects pending, %zu flushes\n", s.remote.pending,
        static_cast<size_t>(s.remote.flushes));
  }
  out("%5s %7s %6s %9s %9s %8s %8s %8s %9s %11s %9s %9s %9s %9s %9s %9s %9s\n", "class", "size",
      "slabs", "objects", "active", "cpu", "depot", "thread", "free", "hits", "refills", "drains",
      "depot-hit", "slab-out", "slab-in", "deferred", "remote");
  for (unsigned c = 1; c < kNumClasses; c++) {
    ClassRow r;
    if (!s.class_row(c, &r)) continue;
    out("%5u %7u %6zu %9zu %9zu %8zu %8zu %8zu %9zu %11zu %9zu %9zu %9zu %9zu %9zu %9zu %9zu\n",
        r.cls, r.size, r.slabs, r.objects, r.active, r.cpu, r.depot, r.thread, r.free, r.hits,
        r.refills, r.drains, r.depot_hits, r.slab_out, r.slab_in, r.deferred, r.remote);
  }
  struct CacheLines {
    decltype(out)& print;
    const Snapshot& snap;
  } lines{out, s};
  obj_cache_for_each(
      [](const ObjCache* c, void* arg) {
        auto& l = *static_cast<CacheLines*>(arg);
        CacheRow r = l.snap.cache_row(c);
        l.print(
            "cache %-24s size %6u align %4u slabs %6zu objects %9zu active %9zu deferred %zu%s\n",
            r.name, r.size, r.align, r.slabs, r.objects, r.active, r.deferred,
            r.destroyed ? " (destroyed)" : "");
      },
      &lines);
  const Stats& st = s.totals;
  out("cached: %zu bytes in CPU sheaves, %zu in depots, %zu in thread caches\n", st.cpu_cached,
      st.depot_cached, st.thread_cached);
  out("small: %zu bytes in slabs, %zu allocated\n", st.small_slab_bytes, st.small_allocated);
  out("large: %zu bytes allocated; huge: %zu objects, %zu bytes, %zu bytes of freed ones "
      "kept for reuse\n",
      st.large_allocated, st.huge_count, st.huge_allocated, s.huge_kept);
  out("pages: %zu mapped, %zu resident (estimate), %zu free (%zu dirty), %zu returned to the "
      "OS, %zu metadata\n",
      st.mapped, st.resident, st.free_bytes, st.dirty_bytes, st.purged_bytes, st.metadata);
  char thp_bytes[32] = "unknown";
  if (s.thp_process_bytes == Snapshot::kUnread)
    os::format(thp_bytes, sizeof thp_bytes, "%s", "unread (live)");
  else if (s.thp_process_bytes >= 0)
    os::format(thp_bytes, sizeof thp_bytes, "%zu", static_cast<size_t>(s.thp_process_bytes));
  out("huge pages (THP %s): %zu segments advised, %zu collapsed, %zu times a return took "
      "one off them, %zu free bytes kept inside them; %s bytes of the process in huge pages "
      "(smaps_rollup)\n",
      !s.thp_option                                ? "off: thp=false"
      : s.thp_system == os::ThpMode::kNever        ? "off: the system's setting is never"
      : !s.thp_fits                                ? "off: a huge page is larger than a segment"
      : s.thp_system == os::ThpMode::kMadvise      ? "on, system setting madvise"
                                                   : "on, system setting always",
      st.huge_segments, st.thp_collapses, st.thp_splits, st.thp_kept_bytes, thp_bytes);
  const DeferredStats& d = s.deferred;
  out("deferred: %zu objects pending (%zu bytes in %zu sealed blocks, %zu chained), "
      "%zu freed in %zu blocks, %zu grace periods (%s)\n",
      d.objects_pending, d.bytes_waiting, d.blocks, d.emergency_objects, (size_t)d.objects_freed,
      (size_t)d.blocks_freed, (size_t)d.grace_periods,
      d.membarrier ? "membarrier" : "reader fences");
  background_describe(s.background, line, sizeof line);
  write(opaque, line);
  if (s.refused.eperm | s.refused.enosys) {
    // What uslab did instead is in the lines above (the mode, the deferred writers, the
    // background thread, the topology's nodes).
    size_t n = os::format(line, sizeof line, "system calls refused (a sandbox or the kernel):");
    for (unsigned i = 0; const char* name = os::refused_call_name(i); i++)
      if (const char* err = s.refused.error(i))
        n += os::format(line + n, sizeof line - n, " %s (%s)", name, err);
    os::format(line + n, sizeof line - n, "\n");
    write(opaque, line);
  }
  if (s.purge_refused_bytes)
    out("purges refused (locked pages, mlockall): %zu bytes zeroed instead since start\n",
        s.purge_refused_bytes);
  memory_limit_describe(s.limit, s.limit_stats, s.limit_resident, line, sizeof line);
  write(opaque, line);
  if (s.foreign_forwarded)
    out("foreign: %zu frees of glibc's blocks (RTLD_DEEPBIND libraries, launchers) forwarded "
        "to glibc\n",
        s.foreign_forwarded);
  if (s.prof_enabled) {
    const prof::Stats& ps = s.prof_stats;
    out("prof: %s, a sample every %zu bytes on average: %zu samples, %zu live (%zu bytes "
        "estimated live, %zu at the peak), %zu stacks, %zu profiles written; %zu bytes of "
        "its own\n",
        s.prof_active ? "active" : "inactive", static_cast<size_t>(s.prof_sample_bytes),
        static_cast<size_t>(ps.samples), ps.live_samples, static_cast<size_t>(ps.live_bytes),
        static_cast<size_t>(ps.peak_bytes), ps.stacks, static_cast<size_t>(ps.dumps), ps.mapped);
  }
  if (s.guard_sample_bytes) {
    const guard::Stats& gs = s.guard_stats;
    out("guarded: an allocation every %zu bytes on average: %zu so far, %u slots of %zu (%u "
        "live, %u freed and inaccessible), %zu errors reported\n",
        static_cast<size_t>(s.guard_sample_bytes), static_cast<size_t>(gs.allocations),
        gs.live + gs.quarantined, s.guard_slots, gs.live, gs.quarantined,
        static_cast<size_t>(gs.reports));
  } else {
    out("%s", "guarded: off (guard_sample=0)\n");
  }
}

void stats_print(void (*write)(void*, const char*), void* opaque, bool smaps) {
  Snapshot s(smaps);
  print_table(s, write, opaque);
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
  memory_limit_describe(memory_limit(true), memory_limit_stats(), heap_resident_estimate(), text,
                        sizeof text);
  write(opaque, text);
  // Each feature with the release that added it: an older kernel's "no" is expected.
  os::KernelFeatures k;
  os::kernel_features(&k);
  out("Kernel %s offers:\n", k.release);
  out("  rseq: %s; its mm_cid field (Linux 6.3): %s (feature size %u)\n", os::offered_name(k.rseq),
      k.rseq_mm_cid ? "yes" : "no", k.rseq_feature_size);
  out("  madvise: MADV_FREE (4.5) %s, MADV_POPULATE_WRITE (5.14) %s, MADV_COLLAPSE (6.1) %s, "
      "guard regions (6.13) %s\n",
      os::offered_name(k.madv_free), os::offered_name(k.madv_populate),
      os::offered_name(k.madv_collapse), os::offered_name(k.madv_guard));
  out("  membarrier's rseq fences (5.10): %s\n", os::offered_name(k.membarrier_rseq));
  out("  transparent huge pages: %s\n", os::thp_mode_name(os::thp_mode()));
  if (k.cgroup_version)
    out("  memory controller: cgroup v%d\n", k.cgroup_version);
  else
    out("  memory controller: none mounted\n");
  out("  seccomp filter: %s\n", k.seccomp ? "yes" : "no");
}

namespace {

// Where the report at exit goes: a duplicate of stderr taken at start when a report
// was asked for, since programs may close stderr before exit (coreutils do).
int g_report_fd = 2;

}  // namespace

USLAB_STARTUP_TEXT void stats_report_init() {
  if (g_config.stats_at_exit && g_report_fd == 2) {
    int fd = os::dup_high(2);
    if (fd >= 0) g_report_fd = fd;
  }
}

void stats_print_stderr() {
  auto to_fd = [](void*, const char* t) {
    size_t n = 0;
    while (t[n]) n++;
    os::write_fd(g_report_fd, t, n);
  };
  config_init();
  if (g_config.stats_json)
    stats_print_json(to_fd, nullptr);
  else
    stats_print(to_fd, nullptr);
}

USLAB_STARTUP_TEXT bool stats_at_exit() {
  config_init();
  return g_config.stats_at_exit;
}

}  // namespace uslab::heap
