// core/platform/config.h — run-time options (USLAB_CONF) and their defaults.
//
// Owns: the one Config instance. It is filled once, during the allocator's first
// initialisation, from (in order, later wins) the weak `uslab_malloc_conf` string a
// program may link in, then the USLAB_CONF and USLAB_STATS environment variables read
// from /proc/self/environ with raw syscalls (never getenv: setenv may be reallocating
// environ in another thread, mimalloc#1314); a setuid, setgid or file-capability
// process (AT_SECURE) reads only the linked-in string. After that it is read-only,
// so readers need no lock. Unknown keys and bad values get a one-line warning and
// the default.
// Also the decay schedule derived from decay_ms (decay_tick_ms, decay_purge_age_ms),
// which the tick, the page heaps and the huge cache share.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uslab {

// Where the topology comes from (topology.h): auto loads hwloc only where the process
// may use several NUMA nodes and the probe saw one (core/alloc/shard.h,
// topology_adopt_hwloc).
enum class TopologySource : uint8_t { kAuto, kProbe, kHwloc };

// The enumerations here list their values in the order of the names config.cc
// parses them from (parse_choice).
struct Config {
  bool abort_on_error = true;    // invalid/double free: report and abort (false: report, leak)
  bool tcache = true;            // per-thread caches in front of the central lists
  bool percpu = true;            // per-CPU sheaves over rseq when the kernel allows
  uint64_t cpu_cache_bytes = 0;  // capacity budget per CPU (0: from the L2 size)
  uint64_t shard_cpus = 0;       // CPUs per shard (depots, slab lists, page heap; 0: 1)
  uint64_t percpu_cpus = 0;      // sheaves for CPU ids below this (0: all possible CPUs)
  bool stats_at_exit = false;    // print the stats table on stderr at exit
  bool stats_json = false;       // ... as JSON (stats=json)
  bool live_stats = true;        // the statistics readable from outside (core/stats/live.cc)
  uint64_t decay_ms = 10000;     // memory the program frees goes back to the OS within this
  bool membarrier = true;        // membarrier's fences (false: readers fence, no per-CPU fences)
  // The background thread (core/alloc/background.h), which returns memory and frees
  // deferred objects with no call from the program: never, from the start, or (auto)
  // from the first moment there is memory to give back.
  enum class Background : uint8_t { kOff, kOn, kAuto };
  Background background_thread = Background::kAuto;
  // The heap's memory limit (core/alloc/memory_limit.h): 0 takes 90% of the control
  // group's limit, if any; kMemoryLimitNone ("none") sets none at all. Past it the
  // caches and free pages go back at once; with memory_limit_hard, allocations fail.
  uint64_t memory_limit = 0;
  bool memory_limit_hard = false;
  TopologySource topology = TopologySource::kAuto;
  // How the per-CPU fast paths address a sheaf's header and slots (percpu_rseq.h):
  // base+index operands, or base registers computed first; auto picks per CPU vendor.
  enum class SheafAddressing : uint8_t { kAuto, kIndex, kBase };
  SheafAddressing sheaf_addressing = SheafAddressing::kAuto;
  bool thp = true;  // transparent huge pages for dense segments (page_heap.h)
  // The OS page the allocator works with (os::page_size): the kernel's, or a larger
  // power of two up to 64 KiB asked for here, so that a 4 KiB kernel runs every
  // page-granular path as a 16 or 64 KiB one does (the tests' page shapes).
  uint64_t os_page = 0;
  // Checking for debugging (both off by default). poison: freed small objects are
  // filled with kPoisonByte and checked when they are handed out again, and every
  // allocation and free goes to the slabs (config_init turns percpu and tcache off),
  // so a double free is caught at the call that makes it. guard: large allocations
  // get mappings of their own with inaccessible pages on both sides (heap.cc).
  bool poison = false;
  bool guard = false;
  // Guarded sampling (core/guard/guard.h): an allocation every guard_sample bytes on
  // average (0: none) gets a slot of its own among guard_slots, between inaccessible
  // pages; a fault on one is reported and aborts, or with guard_recover the program
  // goes on (once per slot). A guarded allocation and its free cost system calls
  // (mprotect, madvise) and a stack; the default mean is the smallest whose cost did
  // not show in N x alloc (bench/RESULTS.md).
  uint64_t guard_sample = uint64_t{1} << 30;
  uint64_t guard_slots = 512;
  bool guard_recover = false;
  // A pointer uslab did not hand out reaching free (core/foreign/): to glibc's free
  // when it looks like one of glibc's blocks, else reported; reported and left; or
  // reported and aborted.
  enum class ForeignFree : uint8_t { kForward, kReport, kAbort };
  ForeignFree foreign_free = ForeignFree::kForward;
  // The heap profiler (core/prof/prof.h): on, sampling from the start (prof_active),
  // a sample every prof_sample bytes on average, files named after prof_prefix, written
  // at exit (prof_final), every prof_interval bytes of live-heap growth (0: never), and
  // on signal prof_signal (0: none).
  bool prof = false;
  bool prof_active = true;
  uint64_t prof_sample = 512 << 10;
  char prof_prefix[256] = "uslab";
  bool prof_final = true;
  uint64_t prof_interval = 0;
  uint64_t prof_signal = 0;
};

constexpr uint64_t kMemoryLimitNone = UINT64_MAX;

// The process-wide options; valid after config_init().
extern Config g_config;

// Parse one "key=value,key=value" string into `cfg`, warning about bad entries
// (exposed for tests).
void config_parse(Config& cfg, const char* text, const char* origin);

// Fill g_config from the linked-in string and the environment. Idempotent and
// thread-safe; cheap (one load) once done, so slow paths call it freely.
void config_init();

}  // namespace uslab
