// core/stats/view.h — what the two reports (the table, table.cc; the JSON document,
// json.cc) print per class and per cache, read once (numbers.cc); not for preload/
// or compat/.
// Locking: none; the counts are racy sums read without locks.
#pragma once

#include <cstddef>

#include "core/deferred/deferred.h"
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
// lock): stats() and StatsView read them.
struct CachedCounts {
  size_t thread[kMaxClasses];
  size_t ncaches;
  PerCpuClassStats cpu[kMaxClasses];
  DepotStats depot[kMaxClasses];
  uint64_t hits[kMaxClasses];  // of the CPU sheaves and the thread caches
  CachedCounts();
  size_t total(unsigned c) const { return thread[c] + cpu[c].cpu_objects + depot[c].objects; }
};

// What both reports (the table, table.cc; JSON, json.cc) print per
// class and per cache: the caches' counts read once, the rows made from them.
class StatsView {
 public:
  StatsView();
  // False for a class never used (no slab, no batch out).
  bool class_row(unsigned c, ClassRow* row) const;
  CacheRow cache_row(const ObjCache* c) const;
  const DeferredStats& deferred() const { return deferred_; }
  size_t thread_caches() const { return cached_.ncaches; }

 private:
  CachedCounts cached_;
  size_t deferred_by_class_[kMaxClasses];
  DeferredStats deferred_;
};

// The background thread's state as uslab.h numbers it (USLAB_BACKGROUND_*).
unsigned background_number(BackgroundState s);

}  // namespace uslab::heap
