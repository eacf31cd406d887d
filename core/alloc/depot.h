// core/alloc/depot.h — per-shard, per-class depots of full sheaves behind the
// per-CPU sheaves.
//
// Owns: for each shard (shard.h) and size class, a list of full Sheafs (arrays of free object
// pointers moved as one unit) and a list of empty Sheaf records to reuse, as SLUB's "barn". A
// per-CPU refill takes one full sheaf from its shard's depot, or up to kSheavesPerMove for a
// big CPU sheaf (one lock, one copy); a drain leaves its objects, one sheaf a batch, in
// the depots of the shards that own them (depot_give), so objects freed on the CPUs
// of a consumer go back to the CPUs of their producer instead of piling up where nobody allocates
// them. Only when the depot has no full sheaf does a refill go to its shard's central slab list,
// and then for a whole batch; a drain that finds the depot at its bound frees two batches to the
// slabs (slab_drain_size; grouped by slab, one class lock per drain and owning shard). The bound
// is 256 KiB of objects per class shared over the shards that held memory (at least 64 KiB per
// shard: depot_max_full). Idle sheaves decay: every tick (a sixteenth of decay_ms, decay.h), the
// sheaves that stayed in the depot through the last kCacheIdleTicks intervals (the least of their
// low-water marks) go back to the slabs, as tcmalloc's transfer cache is plundered.
// A depot that no refill has asked while its shard's CPUs made kDepotStaleEpochs
// epochs of allocations (an epoch: a hit counter's carry, kHitsPerCarry allocations
// of one class on one CPU) holds objects of a class the program stopped allocating:
// its next give sends everything it holds to the slabs (as jemalloc's tcache GC counts
// allocation events, not time), so that a program whose sizes drift frees the slabs
// they pin before it maps more.
//
// Locking: each Depot's lock guards both lists and the counters of its class. Order:
// per-CPU lock → depot lock → central class lock → page heap. The count of full sheaves
// is also read without the lock (has_full, at_bound): a refill that sees none, or a
// drain that sees the bound, goes to the slabs without taking it (in N allocations or
// N frees in a row the depot stays so); a stale read only sends one batch to the slabs
// that the depot could have served or kept. Sheaf records come from a MetaPool and are
// never returned to the OS; they are allocated with the depot lock dropped.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/alloc/central.h"
#include "core/alloc/decay.h"

namespace uslab {

struct Sheaf {
  Sheaf* next;
  uint32_t count;
  void* objs[kMaxBatch];
};

struct DepotStats {
  size_t objects;   // in full sheaves
  uint64_t hits;    // refills served by a full sheaf
  uint64_t remote;  // objects drained here by CPUs of other shards

  DepotStats& operator+=(const DepotStats& o) {
    objects += o.objects;
    hits += o.hits;
    remote += o.remote;
    return *this;
  }
};

// Cache-line aligned: neighbouring classes and shards are locked by different CPUs.
class alignas(64) Depot {
 public:
  // Up to n objects into out: whole sheaves while they fit, under one lock, or part
  // of one when the first holds more than n; from the slabs, when no full sheaf
  // waits, up to slab_n (1 ≤ slab_n ≤ n) of them. 0 only when memory cannot be had.
  size_t take(unsigned cls, void** out, size_t n, size_t slab_n);
  size_t take(unsigned cls, void** out, size_t n) { return take(cls, out, n, n); }
  // n objects of class cls back, as full sheaves of up to sheaf_n (1 to kMaxBatch)
  // while there is room (one lock), the rest to the slabs; `remote` when
  // they come from a CPU of another shard (counted). (Callers use depot_give, which
  // picks the owners' depots.)
  void give(unsigned cls, void* const* objs, size_t n, bool remote, size_t sheaf_n = kMaxBatch);
  // Whether a full sheaf waits here (a racy read: the next take may find none).
  bool has_full() const { return __atomic_load_n(&nfull_, __ATOMIC_RELAXED) != 0; }
  // Whether it holds as many full sheaves as it keeps (racy too): what it is given
  // next goes on to the slabs.
  bool at_bound(unsigned cls) const;
  // Every object held here back to the slabs (trim).
  void flush(unsigned cls);
  // The decay tick: sheaves unused over the last kCacheIdleTicks ticks back to the slabs.
  void decay(unsigned cls);

  DepotStats stats();
  Mutex& lock() { return lock_; }
  // A refill asks this depot now (take does): it is not stale for the next
  // kDepotStaleEpochs epochs of its shard.
  void asked();
  // Whether no refill asked it over the last kDepotStaleEpochs epochs of its shard
  // (racy reads: a stale answer sends one batch to the slabs, or keeps one).
  bool stale() const;

 private:
  // Up to `sheaves` full sheaves back to the slabs.
  void release(unsigned cls, uint32_t sheaves);
  unsigned shard() const;
  // Whether the full sheaves hold what nfull_ and objects_ say, each 1 to kMaxBatch
  // objects (a walk: debug checks only).
  bool counts_balance() const USLAB_REQUIRES(lock_);

  Mutex lock_;
  Sheaf* full_ USLAB_GUARDED_BY(lock_) = nullptr;
  Sheaf* empty_ USLAB_GUARDED_BY(lock_) = nullptr;
  uint32_t nfull_ USLAB_GUARDED_BY(lock_) = 0;
  uint32_t low_water_ USLAB_GUARDED_BY(lock_) = 0;  // fewest full sheaves since the last tick
  // The low-water marks of the kCacheIdleTicks - 1 intervals before it, the latest first.
  uint32_t earlier_low_[kCacheIdleTicks - 1] USLAB_GUARDED_BY(lock_) = {};
  size_t objects_ USLAB_GUARDED_BY(lock_) = 0;
  uint64_t hits_ USLAB_GUARDED_BY(lock_) = 0;
  uint64_t remote_ USLAB_GUARDED_BY(lock_) = 0;
  // The shard's epoch at the last refill that asked (take); written without the lock.
  uint32_t asked_epoch_ = 0;
};

extern Depot g_depot[kMaxShards][kMaxClasses];

// n (≤ kMaxRefill) objects of class cls, freed on a CPU (or thread) of shard `here`,
// to the depots of the shards that own their slabs, grouped by owner: one depot lock
// per owner; those of other shards counted as remote. Sheaves of up to sheaf_n: a
// CPU's moves give a batch a sheaf, as the depot's bound counts them (depot_max_full).
void depot_give(unsigned here, unsigned cls, void* const* objs, size_t n,
                size_t sheaf_n = kMaxBatch);

// A class's counters summed over the shards.
DepotStats depot_stats(unsigned cls);
// Every shard's depot of each class in [lo, hi) back to the slabs.
void depot_flush_classes(unsigned lo, unsigned hi);
// The decay tick of every depot.
void depot_decay_all();

// Batch size of a class: objects per refill/drain (2 … kMaxBatch, about 16 KiB).
inline uint32_t batch_size(unsigned cls) { return class_info(cls).batch; }

// A CPU sheaf refills and drains up to half its capacity, at most kSheavesPerMove
// depot sheaves, at a time under one depot lock: the lock's two atomic instructions,
// the miss and the section's setup are paid once for more objects, while the objects
// stay cached (they only move between the CPU and the depot); a move of more than half
// would empty or fill the sheaf at once. Four rather than two: N x alloc and N x free
// of small objects faster, `bench rss` unchanged.
constexpr size_t kSheavesPerMove = 4;
constexpr size_t kMaxRefill = kSheavesPerMove * kMaxBatch;

// Objects a per-CPU drain gives when the depot has no room for a sheaf, so that they
// go on to the slabs: two batches (kMaxBatch at most). The class lock costs the same
// for two batches as for one, and `bench rss frag`'s peak did not change. Refills
// from the slabs take one batch: two raised espresso's peak RSS for little speed.
inline uint32_t slab_drain_size(unsigned cls) {
  return std::min(2 * batch_size(cls), static_cast<uint32_t>(kMaxBatch));
}

// Full sheaves a depot keeps at most: 256 KiB of objects per class shared out over
// the shards that ever held memory, but at least 64 KiB per shard (and one sheaf);
// none with the poison option. Without the sharing, a class's depots would hold
// 256 KiB on every CPU of a big machine; shared over all the machine's shards, a
// program running on one CPU of many kept too little a class, and a server's request
// (`bench requests`) sent most of what it freed to the slabs and took it back from
// there.
// Each class's bound is kept with the count of shards used it was computed for
// (g_depot_bound: that count in the high half, the bound in the low): a drain asks
// for it up to three times, and each time took two divisions. An entry made for
// another count is recomputed; a lost race only recomputes again.
extern uint64_t g_depot_bound[kMaxClasses] USLAB_HIDDEN;
uint32_t depot_bound_for(unsigned cls, unsigned shards);
inline uint32_t depot_max_full(unsigned cls) {
  if (g_config.poison) return 0;  // every object goes to its slab to be poisoned
  const unsigned shards = shards_used();
  const uint64_t w = __atomic_load_n(&g_depot_bound[cls], __ATOMIC_RELAXED);
  if (__builtin_expect(w >> 32 == shards, 1)) return static_cast<uint32_t>(w);
  return depot_bound_for(cls, shards);
}

// Allocation epochs of each shard (see the top comment): advanced by the carries of
// its CPUs' hit counters (percpu_alloc_tick).
constexpr uint32_t kDepotStaleEpochs = 16;
extern uint32_t g_alloc_epoch[kMaxShards] USLAB_HIDDEN;
inline void depot_note_epoch(unsigned shard) {
  __atomic_add_fetch(&g_alloc_epoch[shard], 1, __ATOMIC_RELAXED);
}

inline bool Depot::at_bound(unsigned cls) const {
  return __atomic_load_n(&nfull_, __ATOMIC_RELAXED) >= depot_max_full(cls);
}

}  // namespace uslab
