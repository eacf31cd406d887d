// core/stats/numbers.cc — the heap's statistics: the totals (uslab_stats_get,
// mallctl's stats.*) and the snapshot every report prints (snapshot.h).
// Locking: none of its own; the statistics are racy sums read without locks.
#include "core/stats/stats.h"

#include "core/foreign/foreign.h"
#include "core/stats/snapshot.h"

namespace uslab::heap {

CachedCounts::CachedCounts() {
  thread_cache_counts(thread, &ncaches);
  percpu_class_stats(cpu);
  thread_cache_hits(hits);
  for (unsigned c = 1; c < kMaxClasses; c++) {
    depot[c] = depot_stats(c);
    hits[c] += cpu[c].hits;
  }
}

namespace {

// Class c's row from the caches' counts, or false for a class never used.
bool make_row(unsigned c, const CachedCounts& cached, const size_t deferred_by_class[],
              ClassRow* r) {
  CentralStats cs = central_stats(c);
  if (cs.slabs == 0 && cs.batches_out == 0) return false;
  size_t used = cs.objects - cs.free_objects, held = cached.total(c);
  const DepotStats& dp = cached.depot[c];
  *r = ClassRow{c, static_cast<unsigned>(class_size(c)), cs.slabs, cs.objects,
                used > held ? used - held : 0, cached.cpu[c].cpu_objects, dp.objects,
                cached.thread[c], cs.free_objects, static_cast<size_t>(cached.hits[c]),
                static_cast<size_t>(cached.cpu[c].refills),
                static_cast<size_t>(cached.cpu[c].drains),
                static_cast<size_t>(dp.hits), static_cast<size_t>(cs.batches_out),
                static_cast<size_t>(cs.batches_in), deferred_by_class[c],
                static_cast<size_t>(dp.remote + cs.remote)};
  return true;
}

}  // namespace

Snapshot::Snapshot(bool smaps) {
  config_init();
  percpu_decide();  // a process that never allocated still shows its mode
  front = g_percpu          ? Front::kPerCpu
          : g_config.poison ? Front::kPoison
          : g_config.percpu ? Front::kNoRseq
                            : Front::kForced;
  rseq = rseq_mode();
  addressing = sheaf_form_name();
  cpus = g_percpu ? percpu_stats() : PerCpuStats{};
  poison = g_config.poison;
  guard_pages = g_config.guard;
  refused = os::refused_calls();
  purge_refused_bytes = os::purge_refused_bytes();

  topology = &topology_in_use();
  shards = shard_count();
  cpus_per_shard = shard_cpus();
  for (unsigned n = 0; n < kTopoMaxNodes; n++) {
    unsigned first;
    node_shards[n] = n < topology->nodes ? shards_of_node(n, &first) : 0;
  }
  percpu_remote_stats(&remote);
  {
    CachedCounts cached;
    deferred = deferred_stats(deferred_by_class_);
    ncaches_ = cached.ncaches;
    for (unsigned c = 0; c < kMaxClasses; c++) {
      held_[c] = c ? cached.total(c) : 0;
      used_[c] = c && c < kNumClasses && make_row(c, cached, deferred_by_class_, &rows_[c]);
    }
    totals = totals_of(cached, remote);
  }
  huge_kept = huge_cache_bytes();
  pending_return = decay_backlog().bytes;
  nshards_used = 0;
  for_each_shard_used([&](unsigned sh) {
    shard_heaps[nshards_used++] = ShardHeap{sh, node_of_shard(sh), g_page_heap[sh].stats()};
  });

  thp_option = g_config.thp;
  thp_enabled = PageHeap::thp_enabled();
  thp_fits = huge_page_fits_segment();
  thp_system = os::thp_mode();
  thp_process_bytes = !smaps ? kUnread : os::thp_resident_bytes();
  if (thp_process_bytes < 0 && thp_process_bytes != kUnread) thp_process_bytes = kUnknown;

  background = background_stats();
  limit = memory_limit(false);
  limit_stats = memory_limit_stats();
  limit_resident = heap_resident_estimate();
  foreign_forwarded = foreign::forwarded();
  prof_enabled = prof::enabled();
  prof_active = prof::active();
  prof_sample_bytes = prof::sample_bytes();
  prof_stats = prof_enabled ? prof::stats() : prof::Stats{};
  guard_sample_bytes = sample_client_bytes(SampleClient::kGuard);
  guard_stats = guard::stats();
  guard_slots = guard_stats.slots ? guard_stats.slots : g_config.guard_slots;
}

bool Snapshot::class_row(unsigned c, ClassRow* r) const {
  if (c >= kMaxClasses || !used_[c]) return false;
  *r = rows_[c];
  return true;
}

CacheRow Snapshot::cache_row(const ObjCache* c) const {
  CentralStats cs = central_stats(c->cls);
  size_t used = cs.objects - cs.free_objects, held = held_[c->cls];
  size_t active = used > held ? used - held : 0;
  active += guard::live_in_class(c->cls);  // served from guarded slots
  return CacheRow{c->name, c->size,      c->align, cs.slabs, cs.objects,
                  active,  deferred_by_class_[c->cls], c->retired};
}

unsigned background_number(BackgroundState s) {
  switch (s) {
    case BackgroundState::kIdle:
      return 0;
    case BackgroundState::kWanted:
    case BackgroundState::kStarting:
      return 1;
    case BackgroundState::kRunning:
      return 2;
    case BackgroundState::kFailed:
      return 3;
  }
  return 0;
}

Stats stats() {
  CachedCounts cached;
  RemoteNodeStats rs;
  percpu_remote_stats(&rs);
  return totals_of(cached, rs);
}

Stats totals_of(const CachedCounts& cached, const RemoteNodeStats& rs) {
  Stats st{};
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
  st.background = background_number(background_state());
  return st;
}

int mode() {
  percpu_decide();
  return g_percpu ? static_cast<int>(rseq_mode()) : 0;
}

unsigned cpus_in_use() { return g_percpu ? percpu_stats().cpus_used : 0; }

}  // namespace uslab::heap
