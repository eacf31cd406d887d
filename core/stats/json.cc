// core/stats/json.cc — the statistics as one JSON document (uslab_stats_json,
// uslab_stats_print_json, malloc_stats_print with "J", USLAB_STATS=json at exit):
// the same numbers as the table of table.cc, read through the same StatsView,
// in the schema docs/STATS.md documents ("schema": 1; fields are only ever added).
// Allocates nothing: the document goes out through the caller's callback in pieces.
// Locking: none of its own; the sums are racy, as the table's.
#include <sys/syscall.h>

#include "core/deferred/deferred.h"
#include "core/foreign/foreign.h"
#include "core/guard/guard.h"
#include "core/prof/prof.h"
#include "core/stats/stats.h"
#include "core/stats/view.h"
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

const char* thp_system_name(os::ThpMode m) {
  return m == os::ThpMode::kNever ? "never" : m == os::ThpMode::kMadvise ? "madvise" : "always";
}

}  // namespace

void stats_print_json(void (*write)(void*, const char*), void* opaque, bool smaps) {
  config_init();
  percpu_decide();  // a process that never allocated still shows its mode
  StatsView view;
  Json j(write, opaque);
  j.num("schema", 1);
  j.str("version", USLAB_VERSION);
  j.num("pid", static_cast<uint64_t>(os::syscall6(SYS_getpid)));

  j.begin_object("mode");
  if (g_percpu) {
    PerCpuStats pc = percpu_stats();
    j.str("fast_path", "percpu");
    j.str("rseq", rseq_mode() == RseqMode::kOwn ? "own" : "glibc");  // whose registration
    j.str("addressing", sheaf_form_name());
    j.num("cpus_used", pc.cpus_used);
    j.num("cpus_possible", pc.cpus_possible);
    j.num("capacity_per_cpu", pc.budget);
    j.num("thread_caches", view.thread_caches());
    j.num("sheaf_grows", pc.grows);
    j.num("sheaf_grows_past_budget", pc.borrows);
    j.num("sheaf_steals", pc.steals);
    j.num("cpu_drains", pc.drains);
  } else {
    j.str("fast_path", "per-thread");
    j.str("why", g_config.poison ? "poison" : g_config.percpu ? "no rseq" : "percpu=false");
    j.num("thread_caches", view.thread_caches());
  }
  j.boolean("poison", g_config.poison);
  j.boolean("guard", g_config.guard);
  j.end_object();

  const Topology& topo = topology_in_use();
  RemoteNodeStats rs;
  percpu_remote_stats(&rs);
  j.begin_object("topology");
  j.num("cpus_possible", topo.cpus_possible);
  j.boolean("synthetic", topo.synthetic);
  j.num("shards", shard_count());
  j.num("cpus_per_shard", shard_cpus());
  j.num("l2_bytes", topo.l2.bytes);
  j.str("source", topo.source);
  j.num("remote_node_pending", rs.pending);
  j.num("remote_node_flushes", rs.flushes);
  j.begin_array("nodes");
  for (unsigned n = 0; n < topo.nodes; n++) {
    unsigned first;
    j.begin_object(nullptr);
    j.num("node", n);
    j.num("cpus", topo.cpus_of_node(n));
    j.num("shards", shards_of_node(n, &first));
    j.num("remote_frees_received", rs.received[n]);
    j.end_object();
  }
  j.end_array();
  j.end_object();

  j.begin_array("classes");
  for (unsigned c = 1; c < kNumClasses; c++) {
    ClassRow r;
    if (!view.class_row(c, &r)) continue;
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
    const StatsView& view;
  } caches{j, view};
  j.begin_array("caches");
  obj_cache_for_each(
      [](const ObjCache* c, void* arg) {
        auto& k = *static_cast<Caches*>(arg);
        CacheRow r = k.view.cache_row(c);
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

  Stats st = stats();
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
  j.num("huge_kept", huge_cache_bytes());
  j.num("free", st.free_bytes);
  j.num("dirty", st.dirty_bytes);
  j.num("returned", st.purged_bytes);
  j.num("pending_return", decay_backlog().bytes);
  j.end_object();

  j.begin_array("shards");
  for_each_shard_used([&](unsigned sh) {
    PageHeapStats ph = g_page_heap[sh].stats();
    j.begin_object(nullptr);
    j.num("shard", sh);
    j.num("node", node_of_shard(sh));
    j.num("segments", ph.segments);
    j.num("mapped", ph.segments * kSegmentSize);
    j.num("large", ph.large_bytes);
    j.num("free", ph.free_bytes);
    j.num("dirty", ph.dirty_bytes);
    j.num("returned", ph.purged_bytes);
    j.end_object();
  });
  j.end_array();
  j.num("huge_objects", st.huge_count);

  j.begin_object("thp");
  j.boolean("enabled", PageHeap::thp_enabled());
  j.str("system", thp_system_name(os::thp_mode()));
  j.num("segments", st.huge_segments);
  j.num("collapses", st.thp_collapses);
  j.num("splits", st.thp_splits);
  j.num("kept_bytes", st.thp_kept_bytes);
  if (long b = smaps ? os::thp_resident_bytes() : -1; b >= 0)
    j.num("process_bytes", static_cast<uint64_t>(b));
  else
    j.null("process_bytes");
  j.end_object();

  const DeferredStats& d = view.deferred();
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

  BackgroundStats bg = background_stats();
  j.begin_object("background");
  j.str("state", background_state_name(bg.state));
  j.num("ticks", bg.ticks);
  j.num("wakeups", bg.wakeups);
  j.num("sleeps", bg.sleeps);
  j.end_object();

  MemoryLimit lim = memory_limit(false);
  LimitStats ls = memory_limit_stats();
  j.begin_object("memory_limit");
  j.boolean("decided", lim.decided);
  j.num("bytes", lim.bytes);
  j.boolean("hard", lim.hard);
  j.str("source", lim.source);
  j.num("releases", ls.releases);
  j.num("refusals", ls.refusals);
  j.end_object();

  j.num("foreign_frees_forwarded", foreign::forwarded());

  if (prof::enabled()) {
    prof::Stats ps = prof::stats();
    j.begin_object("prof");
    j.boolean("active", prof::active());
    j.num("sample_bytes", prof::sample_bytes());
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

  guard::Stats gs = guard::stats();
  j.begin_object("guarded");
  j.num("sample_bytes", sample_client_bytes(SampleClient::kGuard));
  j.num("allocations", gs.allocations);
  j.num("slots", gs.slots ? gs.slots : g_config.guard_slots);
  j.num("live", gs.live);
  j.num("quarantined", gs.quarantined);
  j.num("reports", gs.reports);
  j.end_object();
  j.finish();
}

}  // namespace uslab::heap
