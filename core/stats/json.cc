// core/stats/json.cc — the statistics as one JSON document (uslab_stats_json,
// uslab_stats_print_json, malloc_stats_print with "J", USLAB_STATS=json at exit):
// the same numbers as the table of table.cc, from the same snapshot (snapshot.h),
// in the schema docs/STATS.md documents ("schema": 1; fields are only ever added).
// Allocates nothing: the document goes out through the caller's callback in pieces.
// Locking: none of its own; the sums are racy, as the table's.
#include <sys/syscall.h>

#include "core/stats/snapshot.h"
#include "core/stats/stats.h"
#include "include/uslab.h"  // USLAB_VERSION

namespace uslab::heap {

namespace {

// A streaming writer: keys, values and nesting, with the commas and indentation a
// reader expects. Strings are escaped (cache names come from the program).
class Json {
 public:
  Json(void (*write)(void*, const char*), void* opaque) : write_(write), opaque_(opaque) {
    put("{");
  }
  void finish() { put("\n}\n"); }
  void begin_object(const char* key) { open(key, '{'); }
  void begin_array(const char* key) { open(key, '['); }
  void end_object() { close('}'); }
  void end_array() { close(']'); }
  void num(const char* key, uint64_t v) {
    start(key);
    char b[24];
    os::format(b, sizeof b, "%llu", static_cast<unsigned long long>(v));
    put(b);
  }
  // Estimated bytes, rounded: os::format has no %f, and bytes need no fraction.
  void real(const char* key, double v) { num(key, v > 0 ? static_cast<uint64_t>(v + 0.5) : 0); }
  void boolean(const char* key, bool v) {
    start(key);
    put(v ? "true" : "false");
  }
  void null(const char* key) {
    start(key);
    put("null");
  }
  void str(const char* key, const char* v) {
    start(key);
    quoted(v);
  }

 private:
  void put(const char* s) { write_(opaque_, s); }
  void quoted(const char* s) {
    char b[64];
    size_t n = 0;
    b[n++] = '"';
    for (; *s; s++) {
      if (n + 8 > sizeof b) {
        b[n] = 0;
        put(b);
        n = 0;
      }
      const unsigned char c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        b[n++] = '\\';
        b[n++] = static_cast<char>(c);
      } else if (c < 0x20) {
        static const char kHex[] = "0123456789abcdef";
        b[n++] = '\\';
        b[n++] = 'u';
        b[n++] = '0';
        b[n++] = '0';
        b[n++] = kHex[c >> 4];
        b[n++] = kHex[c & 15];
      } else {
        b[n++] = static_cast<char>(c);
      }
    }
    b[n++] = '"';
    b[n] = 0;
    put(b);
  }
  // The separator and indentation before a member, then its key (none in arrays).
  void start(const char* key) {
    put(first_[depth_] ? "\n" : ",\n");
    first_[depth_] = false;
    indent(depth_ + 1);
    if (key) {
      quoted(key);
      put(": ");
    }
  }
  void indent(unsigned level) {
    static const char kSpaces[] = "                ";  // 8 levels
    put(kSpaces + sizeof kSpaces - 1 - 2 * (level < 8 ? level : 8));
  }
  void open(const char* key, char bracket) {
    start(key);
    const char b[2] = {bracket, 0};
    put(b);
    depth_++;
    first_[depth_] = true;
  }
  void close(char bracket) {
    const bool empty = first_[depth_];
    depth_--;
    if (!empty) {
      put("\n");
      indent(depth_ + 1);  // under its key
    }
    const char b[2] = {bracket, 0};
    put(b);
  }

  void (*write_)(void*, const char*);
  void* opaque_;
  unsigned depth_ = 0;
  bool first_[16] = {true};
};

const char* background_state_name(BackgroundState s) {
  switch (background_number(s)) {
    case 1:
      return "wanted";
    case 2:
      return "running";
    case 3:
      return "failed";
    default:
      return "idle";
  }
}

}  // namespace

void print_json(const Snapshot& s, void (*write)(void*, const char*), void* opaque) {
  Json j(write, opaque);
  j.num("schema", 1);
  j.str("version", USLAB_VERSION);
  j.num("pid", static_cast<uint64_t>(os::syscall6(SYS_getpid)));

  j.begin_object("mode");
  if (s.front == Snapshot::Front::kPerCpu) {
    const PerCpuStats& pc = s.cpus;
    j.str("fast_path", "percpu");
    j.str("rseq", s.rseq == RseqMode::kOwn ? "own" : "glibc");  // whose registration
    j.str("addressing", s.addressing);
    j.num("cpus_used", pc.cpus_used);
    j.num("cpus_possible", pc.cpus_possible);
    j.num("capacity_per_cpu", pc.budget);
    j.num("thread_caches", s.thread_caches());
    j.num("sheaf_grows", pc.grows);
    j.num("sheaf_grows_past_budget", pc.borrows);
    j.num("sheaf_steals", pc.steals);
    j.num("cpu_drains", pc.drains);
  } else {
    j.str("fast_path", "per-thread");
    j.str("why", s.front == Snapshot::Front::kPoison   ? "poison"
                 : s.front == Snapshot::Front::kNoRseq ? "no rseq"
                                                       : "percpu=false");
    j.num("thread_caches", s.thread_caches());
  }
  j.boolean("poison", s.poison);
  j.boolean("guard", s.guard_pages);
  j.end_object();

  const Topology& topo = *s.topology;
  const RemoteNodeStats& rs = s.remote;
  j.begin_object("topology");
  j.num("cpus_possible", topo.cpus_possible);
  j.boolean("synthetic", topo.synthetic);
  j.num("shards", s.shards);
  j.num("cpus_per_shard", s.cpus_per_shard);
  j.num("l2_bytes", topo.l2.bytes);
  j.str("source", topo.source);
  j.num("remote_node_pending", rs.pending);
  j.num("remote_node_flushes", rs.flushes);
  j.begin_array("nodes");
  for (unsigned n = 0; n < topo.nodes; n++) {
    j.begin_object(nullptr);
    j.num("node", n);
    j.num("cpus", topo.cpus_of_node(n));
    j.num("shards", s.node_shards[n]);
    j.num("remote_frees_received", rs.received[n]);
    j.end_object();
  }
  j.end_array();
  j.end_object();

  j.begin_array("classes");
  for (unsigned c = 1; c < kNumClasses; c++) {
    ClassRow r;
    if (!s.class_row(c, &r)) continue;
    j.begin_object(nullptr);
    j.num("class", r.cls);
    j.num("size", r.size);
    j.num("slabs", r.slabs);
    j.num("objects", r.objects);
    j.num("active", r.active);
    j.num("cpu", r.cpu);
    j.num("depot", r.depot);
    j.num("thread", r.thread);
    j.num("free", r.free);
    j.num("hits", r.hits);
    j.num("refills", r.refills);
    j.num("drains", r.drains);
    j.num("depot_hits", r.depot_hits);
    j.num("slab_out", r.slab_out);
    j.num("slab_in", r.slab_in);
    j.num("deferred", r.deferred);
    j.num("remote", r.remote);
    j.end_object();
  }
  j.end_array();

  struct Caches {
    Json& j;
    const Snapshot& snap;
  } caches{j, s};
  j.begin_array("caches");
  obj_cache_for_each(
      [](const ObjCache* c, void* arg) {
        auto& k = *static_cast<Caches*>(arg);
        CacheRow r = k.snap.cache_row(c);
        k.j.begin_object(nullptr);
        k.j.str("name", r.name);
        k.j.num("size", r.size);
        k.j.num("align", r.align);
        k.j.num("slabs", r.slabs);
        k.j.num("objects", r.objects);
        k.j.num("active", r.active);
        k.j.num("deferred", r.deferred);
        k.j.boolean("destroyed", r.destroyed);
        k.j.end_object();
      },
      &caches);
  j.end_array();

  const Stats& st = s.totals;
  j.begin_object("bytes");
  j.num("allocated", st.allocated);
  j.num("active", st.active);
  j.num("resident", st.resident);
  j.num("mapped", st.mapped);
  j.num("metadata", st.metadata);
  j.num("cached_cpu", st.cpu_cached);
  j.num("cached_depot", st.depot_cached);
  j.num("cached_thread", st.thread_cached);
  j.num("small_slabs", st.small_slab_bytes);
  j.num("small_allocated", st.small_allocated);
  j.num("large_allocated", st.large_allocated);
  j.num("huge_allocated", st.huge_allocated);
  j.num("huge_kept", s.huge_kept);
  j.num("free", st.free_bytes);
  j.num("dirty", st.dirty_bytes);
  j.num("returned", st.purged_bytes);
  j.num("pending_return", s.pending_return);
  j.end_object();

  j.begin_array("shards");
  for (unsigned i = 0; i < s.nshards_used; i++) {
    const PageHeapStats& ph = s.shard_heaps[i].heap;
    j.begin_object(nullptr);
    j.num("shard", s.shard_heaps[i].shard);
    j.num("node", s.shard_heaps[i].node);
    j.num("segments", ph.segments);
    j.num("mapped", ph.segments * kSegmentSize);
    j.num("large", ph.large_bytes);
    j.num("free", ph.free_bytes);
    j.num("dirty", ph.dirty_bytes);
    j.num("returned", ph.purged_bytes);
    j.end_object();
  }
  j.end_array();
  j.num("huge_objects", st.huge_count);

  j.begin_object("thp");
  j.boolean("enabled", s.thp_enabled);
  j.str("system", os::thp_mode_name(s.thp_system));
  j.num("segments", st.huge_segments);
  j.num("collapses", st.thp_collapses);
  j.num("splits", st.thp_splits);
  j.num("kept_bytes", st.thp_kept_bytes);
  if (s.thp_process_bytes >= 0)
    j.num("process_bytes", static_cast<uint64_t>(s.thp_process_bytes));
  else
    j.null("process_bytes");
  j.end_object();

  const DeferredStats& d = s.deferred;
  j.begin_object("deferred");
  j.num("pending", d.objects_pending);
  j.num("bytes_waiting", d.bytes_waiting);
  j.num("blocks", d.blocks);
  j.num("chained", d.emergency_objects);
  j.num("freed", d.objects_freed);
  j.num("blocks_freed", d.blocks_freed);
  j.num("grace_periods", d.grace_periods);
  j.str("writers", d.membarrier ? "membarrier" : "reader fences");
  j.end_object();

  const BackgroundStats& bg = s.background;
  j.begin_object("background");
  j.str("state", background_state_name(bg.state));
  j.num("ticks", bg.ticks);
  j.num("wakeups", bg.wakeups);
  j.num("sleeps", bg.sleeps);
  j.end_object();

  j.begin_object("refused_syscalls");  // name: "EPERM" or "ENOSYS"
  for (unsigned i = 0; const char* name = os::refused_call_name(i); i++)
    if (const char* err = s.refused.error(i)) j.str(name, err);
  j.end_object();
  j.num("purge_refused_bytes", s.purge_refused_bytes);

  const MemoryLimit& lim = s.limit;
  const LimitStats& ls = s.limit_stats;
  j.begin_object("memory_limit");
  j.boolean("decided", lim.decided);
  j.num("bytes", lim.bytes);
  j.boolean("hard", lim.hard);
  j.str("source", lim.source);
  j.num("releases", ls.releases);
  j.num("refusals", ls.refusals);
  j.end_object();

  j.num("foreign_frees_forwarded", s.foreign_forwarded);

  if (s.prof_enabled) {
    const prof::Stats& ps = s.prof_stats;
    j.begin_object("prof");
    j.boolean("active", s.prof_active);
    j.num("sample_bytes", s.prof_sample_bytes);
    j.num("samples", ps.samples);
    j.num("live_samples", ps.live_samples);
    j.real("live_bytes", ps.live_bytes);
    j.real("peak_bytes", ps.peak_bytes);
    j.num("stacks", ps.stacks);
    j.num("profiles_written", ps.dumps);
    j.num("own_bytes", ps.mapped);
    j.end_object();
  } else {
    j.null("prof");
  }

  const guard::Stats& gs = s.guard_stats;
  j.begin_object("guarded");
  j.num("sample_bytes", s.guard_sample_bytes);
  j.num("allocations", gs.allocations);
  j.num("slots", s.guard_slots);
  j.num("live", gs.live);
  j.num("quarantined", gs.quarantined);
  j.num("reports", gs.reports);
  j.end_object();
  j.finish();
}

void stats_print_json(void (*write)(void*, const char*), void* opaque, bool smaps) {
  Snapshot s(smaps);
  print_json(s, write, opaque);
}

}  // namespace uslab::heap
