// core/stats/stats.h — the statistics of the heap, for the program (uslab_stats_*,
// mallctl's stats.*), the reports (the slabinfo-style table, the JSON document, the
// report at exit) and readers outside the process (the live region).
//
// Owns: the totals (Stats, numbers.cc), the snapshot every report prints, read once
// (snapshot.h), the table and the report at exit (table.cc), the JSON document
// (json.cc), and the live region (live.cc; docs/LIVE.md).
//
// Locking: readers only. The counters are relaxed atomics or racy sums of per-CPU and
// per-thread counts, read with no lock; each lock below is taken by the layer that
// owns it (a central list's, to read its counts).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/heap/heap.h"

namespace uslab::heap {

struct Stats {
  size_t mapped;    // segment bytes mapped
  size_t metadata;  // descriptor and cache bytes mapped (less descriptor pages purged),
                    // the shards' arrays made resident, the CPUs' header pages
  size_t small_slab_bytes;
  size_t small_allocated;  // bytes in live small objects (approximate while running)
  size_t large_allocated;  // bytes in live large spans
  size_t huge_count;
  size_t huge_allocated;
  size_t free_bytes;     // in free spans
  size_t dirty_bytes;    // free but still resident
  size_t purged_bytes;   // returned to the OS so far
  size_t huge_segments;  // segments advised to use transparent huge pages
  size_t thp_splits;     // times a return took a segment off them (cumulative)
  size_t thp_collapses;  // segments collapsed into them (MADV_COLLAPSE, cumulative)
  size_t thp_kept_bytes;  // free pages the decay clock left inside them (last purge)
  size_t thread_caches;
  size_t cpu_cached;     // bytes in per-CPU sheaves
  size_t depot_cached;   // bytes in depot sheaves
  size_t thread_cached;  // bytes in thread caches
  // Derived totals (what jemalloc's stats.* and uslab_stats_get report):
  size_t allocated;            // small + large + huge live bytes
  size_t active;               // slabs, large spans and huge objects holding them
  size_t resident;             // mapped minus purged free pages, plus metadata (estimate)
  unsigned nodes;              // NUMA nodes of the topology in use
  uint64_t remote_node_frees;  // objects flushed to their node from CPUs of other nodes
  size_t remote_node_pending;  // objects waiting in the CPUs' remote-node buffers
  unsigned background;         // USLAB_BACKGROUND_* (uslab.h)
  size_t cached() const { return cpu_cached + depot_cached + thread_cached; }
};
Stats stats();
// The fast-path mode (0 per-thread, 1 per-CPU via glibc's rseq, 2 via uslab's) and
// the number of CPUs whose sheaves are in use.
int mode();
unsigned cpus_in_use();

// Writes the slabinfo-style table through `write` (no allocation). `smaps`: the
// process's bytes in huge pages read from smaps_rollup (the kernel walks every
// mapping: the live snapshots leave it to their reader).
void stats_print(void (*write)(void* opaque, const char* text), void* opaque, bool smaps = true);
// The same numbers as one JSON document (docs/STATS.md; no allocation).
void stats_print_json(void (*write)(void* opaque, const char* text), void* opaque,
                      bool smaps = true);
// The table, or the JSON document with USLAB_STATS=json, on the report descriptor.
void stats_print_stderr();
// What the topology providers see and what uslab uses (uslab_topology_print, `uslab
// topology`). Loads hwloc: not for use inside an allocation.
void topology_print(void (*write)(void* opaque, const char* text), void* opaque);

// Whether USLAB_STATS / stats=1 (or =json) asked for a report at exit.
bool stats_at_exit();
// When a report at exit is asked for, keeps a duplicate of stderr for it: programs
// may close stderr before exit (coreutils do). From the library's constructor.
void stats_report_init();

// The live statistics (live.cc): their hooks set in the constructor; their region
// reset in a forked child.
void live_init();
void live_fork_child();

}  // namespace uslab::heap
