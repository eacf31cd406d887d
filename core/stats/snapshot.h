// core/stats/snapshot.h — the statistics read once: every number the reports print
// (the table, table.cc; the JSON document, json.cc; the live region, live.cc, which
// publishes both from one snapshot), gathered by one constructor (numbers.cc), so
// that two renderings of a snapshot cannot disagree and a new statistic is gathered
// in one place. Not for preload/ or compat/.
// Locking: none; the counts are racy sums read without locks, each lock taken by the
// layer that owns it.
#pragma once

#include <cstddef>

#include "core/deferred/deferred.h"
#include "core/guard/guard.h"
#include "core/prof/prof.h"
#include "core/stats/stats.h"

namespace uslab::heap {

// One size class's row of the statistics (the table's columns, the JSON's fields).
struct ClassRow {
  unsigned cls, size;
  size_t slabs, objects, active, cpu, depot, thread, free, hits, refills, drains, depot_hits,
      slab_out, slab_in, deferred, remote;
};
// One object cache's.
struct CacheRow {
  const char* name;
  unsigned size, align;
  size_t slabs, objects, active, deferred;
  bool destroyed;
};

// Objects of each class held in the caches in front of the slabs (racy sums, no
// lock): stats() and Snapshot read them.
struct CachedCounts {
  size_t thread[kMaxClasses];
  size_t ncaches;
  PerCpuClassStats cpu[kMaxClasses];
  DepotStats depot[kMaxClasses];
  uint64_t hits[kMaxClasses];  // of the CPU sheaves and the thread caches
  CachedCounts();
  size_t total(unsigned c) const { return thread[c] + cpu[c].cpu_objects + depot[c].objects; }
};

// Everything the reports print, read once. Large (a row per class, the shards' page
// heaps: about 25 KiB), made on the stack of a reader, never kept; the background
// thread's 64 KiB stack holds one while it writes the live region.
struct Snapshot {
  // smaps: read the process's bytes in huge pages from smaps_rollup (the kernel walks
  // every mapping: the live region leaves it to its reader).
  explicit Snapshot(bool smaps);
  // False for a class never used (no slab, no batch out).
  bool class_row(unsigned c, ClassRow* row) const;
  // An object cache's row: its slabs read now (caches come and go: read as the
  // reports walk them), its cached and deferred counts from the snapshot.
  CacheRow cache_row(const ObjCache* c) const;
  size_t thread_caches() const { return ncaches_; }

  // Which front end serves the program, and why per thread when it is not per CPU.
  enum class Front : uint8_t { kPerCpu, kPoison, kNoRseq, kForced };
  Front front;
  RseqMode rseq;
  const char* addressing;  // the sheaves' form (sheaf_addressing)
  PerCpuStats cpus;        // with kPerCpu
  bool poison, guard_pages;

  const Topology* topology;
  unsigned shards, cpus_per_shard;
  unsigned node_shards[kTopoMaxNodes];  // shards of each node
  RemoteNodeStats remote;

  Stats totals;  // stats()'s numbers, made from the same counts as the rows
  size_t huge_kept;       // bytes of freed huge blocks kept for reuse
  size_t pending_return;  // bytes the decay clock has yet to return
  unsigned nshards_used;
  struct ShardHeap {
    unsigned shard, node;
    PageHeapStats heap;
  } shard_heaps[kMaxShards];

  bool thp_option;  // thp=true
  bool thp_enabled;
  bool thp_fits;    // a huge page fits a segment
  os::ThpMode thp_system;
  long thp_process_bytes;  // from smaps_rollup; kUnknown or kUnread when there is none
  static constexpr long kUnknown = -1, kUnread = -2;

  DeferredStats deferred;
  BackgroundStats background;
  os::RefusedCalls refused;  // system calls a sandbox (or the kernel) refused
  size_t purge_refused_bytes;  // purges the kernel refused (locked pages), cumulative
  MemoryLimit limit;
  LimitStats limit_stats;
  size_t limit_resident;  // the heap's resident estimate, as the limit counts it
  size_t foreign_forwarded;

  bool prof_enabled, prof_active;
  uint64_t prof_sample_bytes;
  prof::Stats prof_stats;
  uint64_t guard_sample_bytes;  // 0: guarded sampling off
  guard::Stats guard_stats;
  size_t guard_slots;

 private:
  ClassRow rows_[kMaxClasses];
  bool used_[kMaxClasses];
  size_t held_[kMaxClasses];  // objects of the class in the caches (CachedCounts::total)
  size_t deferred_by_class_[kMaxClasses];
  size_t ncaches_;
};

// The heap's totals from counts already read (stats() reads its own).
Stats totals_of(const CachedCounts& cached, const RemoteNodeStats& remote);
// The table and the JSON document of a snapshot, through `write` (no allocation).
void print_table(const Snapshot& s, void (*write)(void* opaque, const char* text), void* opaque);
void print_json(const Snapshot& s, void (*write)(void* opaque, const char* text), void* opaque);

// The background thread's state as uslab.h numbers it (USLAB_BACKGROUND_*).
unsigned background_number(BackgroundState s);

}  // namespace uslab::heap
