// core/heap_parts.h — what the Heap facade's files (heap.cc, heap_bulk.cc,
// heap_stats.cc, heap_report.cc, heap_stats_json.cc, heap_fork.cc) share; not for
// preload/ or compat/.
// Locking: the counters are relaxed atomics; the report's descriptor is set once, by
// init() in the library's constructor.
#pragma once

#include <atomic>
#include <cstddef>

#include "core/heap.h"

namespace uslab::heap {

// Huge blocks live and their bytes (alloc_large, free, realloc; read by stats()).
extern std::atomic<size_t> g_huge_count;
extern std::atomic<size_t> g_huge_bytes;
// Where the report at exit goes: a duplicate of stderr taken at start when a report
// was asked for, since programs may close stderr before exit (coreutils do).
extern int g_report_fd;

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

// What both reports (the table, heap_report.cc; JSON, heap_stats_json.cc) print per
// class and per cache: the caches' counts read once (racy sums, no lock), the rows
// made from them.
class StatsView {
 public:
  StatsView();
  // False for a class never used (no slab, no batch out).
  bool class_row(unsigned c, ClassRow* row) const;
  CacheRow cache_row(const ObjCache* c) const;
  const DeferredStats& deferred() const { return deferred_; }
  size_t thread_caches() const { return ncaches_; }

 private:
  size_t cached(unsigned c) const { return thread_[c] + cpu_[c].cpu_objects + depot_[c].objects; }
  size_t thread_[kMaxClasses];
  size_t ncaches_;
  PerCpuClassStats cpu_[kMaxClasses];
  DepotStats depot_[kMaxClasses];
  uint64_t hits_[kMaxClasses];  // of the CPU sheaves and the thread caches
  size_t deferred_by_class_[kMaxClasses];
  DeferredStats deferred_;
};

// The background thread's state as uslab.h numbers it (USLAB_BACKGROUND_*).
unsigned background_number(BackgroundState s);

}  // namespace uslab::heap
