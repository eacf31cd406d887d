// core/heap_parts.h — what the Heap facade's files (heap.cc, heap_bulk.cc,
// heap_stats.cc, heap_fork.cc) share; not for preload/ or compat/.
// Locking: the counters are relaxed atomics; the report's descriptor is set once, by
// init() in the library's constructor.
#pragma once

#include <atomic>
#include <cstddef>

namespace uslab::heap {

// Huge blocks live and their bytes (alloc_large, free, realloc; read by stats()).
extern std::atomic<size_t> g_huge_count;
extern std::atomic<size_t> g_huge_bytes;
// Where the report at exit goes: a duplicate of stderr taken at start when a report
// was asked for, since programs may close stderr before exit (coreutils do).
extern int g_report_fd;

}  // namespace uslab::heap
