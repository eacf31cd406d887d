// core/platform/lock_table.h — every lock of the allocator, its rank, and the
// registry that fork walks.
//
// Owns: LockRank (the lock table below), LockSet (a group of Mutexes of one rank:
// one lock, an array of them, or one per CPU/shard/class) and the registry of every
// LockSet in the library, kept in the "uslab_lock_sets" ELF section (USLAB_LOCK_SET):
// a lock joins it where it is defined, so fork cannot miss one.
//
// Rules:
//  - A thread takes locks in increasing rank (equal ranks only where the table says
//    so). Debug builds (-Ddebug_checks=true) check it on every lock() and report the
//    two ranks; they also check that every Mutex a thread takes (but kUnranked ones)
//    is in the registry, and the *_locked functions check that their lock is held.
//  - fork's prepare handler takes every registered lock in rank order, after which
//    no other thread is inside the allocator's slow paths; the parent releases them,
//    the child resets them (heap::fork_*). A LockSet's count is read with every lock
//    of a lower rank held, so a set that grows (per-CPU metadata) is stable by then.
//
// The table: rank — lock (file) — what it guards. A lock may be taken while holding
// any lock above it.
//   kMallctl           compat/mallctl.cc g_ctl_lock — mallctl's name table and the
//                      state its writes change (a purge under it reaches every cache)
//   kSampler           alloc/sampler.cc g_client_lock — the sampling clients' table
//                      (held while the CPUs' streams are armed again)
//   kTopologyPrint     stats/table.cc topology_print's lock — its two Topology records and
//                      text buffer (hwloc, which it may load, allocates: outermost)
//   kStackCapture      prof/stack.cc g_capture_lock — no data: held across an unwind, so
//                      that fork finds the unwinder's own locks free (before the
//                      allocator's: a sampled allocation captures with none held)
//   kObjCacheRegistry  obj_cache.cc registry_lock_ — the cache records and class
//                      slots (held across a class's drain on destroy)
//   kDeferredSlotsInit deferred.cc slots_init_lock_ — creating the deferred-free slots
//   kGraceInit         grace.cc init_lock_ — the grace periods' one-time set-up
//   kDeferredSlot      deferred.cc DeferSlot::lock, one per CPU — its open block
//   kDeferredQueue     deferred.cc queue_lock_ — the sealed blocks and the chain
//   kThreadCacheRegistry thread_cache.cc registry_lock_ — the list of thread caches
//   kPercpuInit        percpu.cc init_lock_ — deciding per-CPU mode, the CPU region
//   kRseqInit          rseq.cc init_lock_ — deciding the rseq mode
//   kCpu               percpu_meta.h CpuMeta::lock, one per CPU — its sheaf
//                      capacities, statistics and idle marks
//   kDepot             depot.h Depot::lock_, one per shard and class — its sheaves
//   kCentral           central.h CentralList::lock_, one per shard and class — its
//                      partial and empty slabs
//   kHugeCache         huge_cache.cc lock_ — freed huge blocks kept for reuse
//   kPageHeap          page_heap.h PageHeap::lock_, one per shard — its free spans,
//                      descriptors and segments
//   kMemoryLimit       memory_limit.cc decide_lock_ — the limit, decided when the
//                      heap grows (under a page heap's lock; reads cgroup files)
//   kGuardPool         guard/pool.cc g_pool.lock — the guarded slots' states,
//                      their free list and quarantine (taken with no allocator lock
//                      held: from the sampling hook and from free)
//   kMetaPool          meta_arena.h MetaPool::lock_ (span descriptors of huge
//                      blocks, thread-cache records, the depots' sheaves per shard) —
//                      its free list
//   kMetaArena         meta_arena.h MetaArena::lock_ — the metadata bump pointer
//   kPageMap           segment.h PageMap::lock_ — creating the page map's leaves
//   kShardMap          shard.cc map_lock_ — the CPU-to-shard map and topology
//   kProfiler          prof.cc g_lock — the heap profiler's tables (a leaf)
// kNone: not in the registry (Mutexes outside the allocator, made with kUnranked).
#pragma once

#include <cstdint>

namespace uslab {

class Mutex;

enum class LockRank : uint8_t {
  kNone = 0,
  kMallctl,
  kSampler,
  kTopologyPrint,
  kStackCapture,
  kObjCacheRegistry,
  kDeferredSlotsInit,
  kGraceInit,
  kDeferredSlot,
  kDeferredQueue,
  kThreadCacheRegistry,
  kPercpuInit,
  kRseqInit,
  kCpu,
  kDepot,
  kCentral,
  kHugeCache,
  kPageHeap,
  kMemoryLimit,
  kGuardPool,
  kMetaPool,
  kMetaArena,
  kPageMap,
  kShardMap,
  kProfiler,
};

const char* lock_rank_name(LockRank r);

// A group of locks of one rank: count() of them now, at(i) the i-th. Neither may take
// a lock or allocate (fork's handlers call them).
struct LockSet {
  LockRank rank;
  uint32_t (*count)();
  Mutex* (*at)(uint32_t i);
};

// Registers a LockSet (at namespace scope, in the file that defines its locks):
// USLAB_LOCK_SET(kRank, [] { return n; }, [](uint32_t i) { return &locks[i]; });
// The section holds a pointer to each set: the compiler may align a larger object
// beyond its size (16 or 32 bytes), leaving gaps a walk would misread. Retained
// (SHF_GNU_RETAIN): a link that collects unused sections (lld's, in Rust programs)
// dropped it, whose references through __start_/__stop_ keep nothing.
#define USLAB_LOCK_SET_NAME2(a, b) a##b
#define USLAB_LOCK_SET_NAME(a, n) USLAB_LOCK_SET_NAME2(a, n)
#define USLAB_LOCK_SET_AT(n, rank, count_fn, at_fn)                            \
  constinit const ::uslab::LockSet USLAB_LOCK_SET_NAME(uslab_lock_set_, n) = { \
      ::uslab::LockRank::rank, +(count_fn), +(at_fn)};                         \
  [[gnu::used, gnu::retain,                                                    \
    gnu::section("uslab_lock_sets")]] constinit const ::uslab::LockSet* const  \
  USLAB_LOCK_SET_NAME(uslab_lock_set_ref_, n) = &USLAB_LOCK_SET_NAME(uslab_lock_set_, n)
#define USLAB_LOCK_SET(rank, count_fn, at_fn) USLAB_LOCK_SET_AT(__COUNTER__, rank, count_fn, at_fn)
// One lock.
#define USLAB_LOCK_ONE(rank, mutex) \
  USLAB_LOCK_SET(                   \
      rank, []() -> uint32_t { return 1; }, [](uint32_t) -> ::uslab::Mutex* { return &(mutex); })

constexpr uint32_t kMaxLockSets = 64;

// The registry, sorted by rank (a fixed table, sorted on first use: fork's handlers
// must not allocate). *n receives the number of sets.
const LockSet* const* lock_sets(uint32_t* n);

// m's rank in the registry, kNone if it is not registered (a scan: for debug checks
// and tests).
LockRank lock_rank_of(const Mutex* m);

}  // namespace uslab
