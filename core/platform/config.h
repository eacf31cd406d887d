// core/platform/config.h — run-time options (USLAB_CONF) and their defaults.
//
// Owns: the one Config instance. It is filled once, during the allocator's first
// initialisation, from (in order, later wins) the weak `uslab_malloc_conf` string a
// program may link in, then the USLAB_CONF and USLAB_STATS environment variables read
// from /proc/self/environ with raw syscalls (never getenv: setenv may be reallocating
// environ in another thread, mimalloc#1314). After that it is read-only, so readers
// need no lock. Unknown keys and bad values get a one-line warning and the default.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uslab {

// Where the topology comes from (topology.h): auto loads hwloc only where the process
// may use several NUMA nodes (core/alloc/shard.h, topology_adopt_hwloc).
enum class TopologySource : uint8_t { kAuto, kProbe, kHwloc };

struct Config {
  bool abort_on_error = true;   // invalid/double free: report and abort (false: report, leak)
  bool tcache = true;           // per-thread caches in front of the central lists
  bool percpu = true;           // per-CPU sheaves over rseq when the kernel allows
  uint64_t cpu_cache_bytes = 0; // capacity budget per CPU (0: from the L2 size)
  uint64_t shard_cpus = 0;      // CPUs per shard (depots, slab lists, page heap; 0: 1)
  uint64_t percpu_cpus = 0;     // sheaves for CPU ids below this (0: all possible CPUs)
  bool stats_at_exit = false;   // print the stats table on stderr at exit
  uint64_t decay_ms = 10000;    // free pages stay resident this long before madvise
  bool membarrier = true;       // writers fence readers with membarrier (false: readers fence)
  bool background_thread = false;  // a thread that returns memory and frees deferred objects
  TopologySource topology = TopologySource::kAuto;
  bool thp = true;              // transparent huge pages for dense segments (page_heap.h)
  // Checking for debugging (both off by default). poison: freed small objects are
  // filled with kPoisonByte and checked when they are handed out again, and every
  // allocation and free goes to the slabs (config_init turns percpu and tcache off),
  // so a double free is caught at the call that makes it. guard: large allocations
  // get mappings of their own with inaccessible pages on both sides (heap.cc).
  bool poison = false;
  bool guard = false;
};

// The process-wide options; valid after config_init().
extern Config g_config;

// Parse one "key=value,key=value" string into `cfg`, warning about bad entries
// (exposed for tests).
void config_parse(Config& cfg, const char* text, const char* origin);

// Fill g_config from the linked-in string and the environment. Idempotent and
// thread-safe; cheap (one load) once done, so slow paths call it freely.
void config_init();

}  // namespace uslab
