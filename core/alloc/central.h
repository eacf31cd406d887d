// core/alloc/central.h — per-shard, per-size-class central lists of slabs.
//
// Owns: for each shard (shard.h) and class, the partial slabs (those with free
// objects), the spares (empty slabs, kept for the class), and the per-slab free
// bitmaps. A slab is carved by one shard and its objects always come
// back to that shard's list. Objects move in and out only in batches (alloc_batch /
// free_batch), so a thread cache refill or flush takes the class lock once for many
// objects.
//
// A shard with no free object left borrows from another shard of its node before it
// carves a slab, when that one has a surplus (kLendReserveSlabs slabs' worth beyond
// the request) and its lock is free: a thread that moved to another CPU would
// otherwise fill new slabs while its old shard's sit mostly free
// (test/stress/migrate_reuse.c). The objects stay
// their slab's shard's; freed, they go back there.
//
// Locking: each CentralList's lock guards its partial list, its spares, the bitmap,
// free_count and on_partial of every slab of that class, and the counters;
// free_objects_ is also read without it, by shards deciding whether to borrow (stored
// atomically; a stale value only skips or tries a list). A shard's g_central_free_bytes
// is added to atomically, in steps, under each of its class locks and read without any
// (a stale total only starts the background thread a batch early or late).
// g_central_class_shards gains a shard's bit atomically while that shard carves (before
// the slab is published) and is read without any lock (see its comment). A class lock
// is never held while taking another (borrowing drops its own first, then only
// try_locks). A new slab is carved (descriptor filled, objects of a cache class
// constructed or poisoned, page map written) outside the lock and then published under
// it. Empty slabs are handed to their segment's page heap after the class lock is
// dropped (order: class lock → never the page heap lock). A page heap that takes spares
// back only try-locks class locks (its caller may hold any lock ranked above it);
// g_central_spare_classes is written under the class lock and read without any (a stale
// bit only visits a list with no spare, or skips one until the tick).
//
// A slab whose objects all came back stays the class's, a spare, until the next
// decay tick, or until a page heap of its node has no free span that fits (it takes
// them back first: central_reclaim_spares), or a trim: a program that allocates and frees the
// same objects in phases (N x alloc, N x free) carves each slab once, where giving
// every empty slab to the page heap and carving it again costs a split, a descriptor,
// the page map, coalescing and the free lists each time.
// Held as spares or as free pages, the memory is the same until the tick.
//
// A slab's bitmap is also the double-free detector: freeing an object whose bit is
// already set (free) is reported with the pointer and the class. With the poison
// option (config.h), objects of size classes are poisoned when their slab is carved
// and when they are freed (under the lock, before their bit is set), and checked
// when alloc_batch hands them out (after the lock): a write after free is reported
// with the pointer, the class and the first byte changed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/alloc/page_heap.h"
#include "core/alloc/shard.h"

namespace uslab {

struct CentralStats {
  size_t slabs;
  size_t objects;        // capacity of all slabs
  size_t free_objects;   // free in slab bitmaps
  uint64_t batches_out;  // alloc_batch calls
  uint64_t batches_in;   // free_batch calls
  uint64_t remote;       // objects freed here from thread caches of other shards
  uint64_t lent;         // objects other shards borrowed from these slabs
  size_t spares;         // empty slabs kept (the decay tick gives them back)

  CentralStats& operator+=(const CentralStats& o) {
    slabs += o.slabs;
    spares += o.spares;
    objects += o.objects;
    free_objects += o.free_objects;
    batches_out += o.batches_out;
    batches_in += o.batches_in;
    remote += o.remote;
    lent += o.lent;
    return *this;
  }
};

// Cache-line aligned: neighbouring classes and shards are locked by different CPUs.
class alignas(64) CentralList {
 public:
  // Up to n objects into out; returns how many (0 only when memory cannot be had).
  size_t alloc_batch(unsigned cls, void** out, size_t n);
  // Return objects of class cls (each already checked to be a slab object of it)
  // from the front of ptrs[0..n) while their slabs belong to this shard; returns
  // how many (central_free routes a whole batch).
  size_t free_batch(unsigned cls, void* const* ptrs, size_t n, bool remote = false);
  // The spares back to the page heap (wait: for the lock; else only if it is free,
  // as the page heap asks, whatever locks its caller holds); how many.
  size_t release_spares(bool wait);

  CentralStats stats(unsigned cls);
  Mutex& lock() { return lock_; }

 private:
  static constexpr size_t kLendReserveSlabs = 2;
  static constexpr size_t kMaxFreshSlabs = 4;  // carved for one refill at most

  // New slabs for `need` objects on the partial list (central.cc); called without the
  // lock, returns with it held; how many (0 when memory cannot be had).
  size_t carve_slabs(unsigned cls, size_t need) USLAB_ACQUIRE(lock_);
  // The class's descriptor fields, bitmap and page map of span s; false when its
  // external bitmap cannot be had.
  bool init_slab(unsigned cls, Span* s);
  size_t take_from(Span* s, void** out, size_t n);
  // Up to n objects from the partial slabs (not the spares); lock held.
  size_t take_partial(void** out, size_t n) USLAB_REQUIRES(lock_);
  // Debug-check builds: slab s of this list keeps the invariants above (lock held).
  void check_slab_locked(const Span* s) const USLAB_REQUIRES(lock_);
  // Up to n objects from another shard of this node with a surplus; lock not held.
  size_t borrow(unsigned cls, void** out, size_t n);
  // Counts d more free objects here, and their bytes in the shard's total.
  void add_free(ptrdiff_t d) USLAB_REQUIRES(lock_);
  // A slab onto / off the spares, keeping the class's g_central_spare_classes bit.
  void push_spare(Span* s) USLAB_REQUIRES(lock_);
  Span* pop_spare() USLAB_REQUIRES(lock_);
  unsigned shard() const;
  unsigned size_class() const;

  Mutex lock_;
  IntrusiveList<Span> partial_ USLAB_GUARDED_BY(lock_);
  IntrusiveList<Span> spares_ USLAB_GUARDED_BY(lock_);
  size_t slabs_ USLAB_GUARDED_BY(lock_) = 0;
  size_t free_objects_ USLAB_GUARDED_BY(lock_) = 0;
  uint64_t batches_out_ USLAB_GUARDED_BY(lock_) = 0;
  uint64_t batches_in_ USLAB_GUARDED_BY(lock_) = 0;
  uint64_t remote_ USLAB_GUARDED_BY(lock_) = 0;
  uint64_t lent_ USLAB_GUARDED_BY(lock_) = 0;
};

extern CentralList g_central[kMaxShards][kMaxClasses];

// Bytes of the free objects in each shard's central lists, all classes together
// (objects of fresh slabs included). Objects parked in sheaves and depots keep the
// slabs they share with these from being released, so a big total after a peak is
// memory waiting to be returned once the decay tick drains the caches: past
// kBackgroundStartBytes it wants the background thread (background.h). After a
// peak of small objects freed in random order (test/stress/idle_return.c) each page
// heap held less than the mark free, the rest of the freed slabs pinned by cached
// objects, and a program going idle kept it all.
// Each class adds to its shard's count in steps of kFreeBytesStep (what it holds free,
// rounded down), so the count is below the truth by less than a step a class: a
// locked add on every batch had most of take_partial's samples in N x alloc of 512 B,
// and N x alloc of mid-size objects was faster without it.
constexpr size_t kFreeBytesStep = size_t{64} << 10;
struct alignas(64) ShardFreeBytes {
  std::atomic<int64_t> bytes{0};
};
extern ShardFreeBytes g_central_free_bytes[kMaxShards];

// The classes of each shard that have spares (a bit per class, set and cleared as
// its spare list stops and starts being empty), so that a page heap's reclaim visits
// those only.
struct alignas(64) ShardSpareClasses {
  std::atomic<uint64_t> bits[(kMaxClasses + 63) / 64]{};
};
extern ShardSpareClasses g_central_spare_classes[kMaxShards];

// The shards that ever carved a slab of each class (a bit per shard; bits are only
// set, when a slab is carved, before its objects are handed out). With one bit, every
// object of the class is that shard's whoever holds it, and a drain need not look up
// each object's slab to find its owner (depot_give), a look-up per object that a
// drain of one thread's own objects would otherwise pay.
extern std::atomic<uint64_t> g_central_class_shards[kMaxClasses];
static_assert(kMaxShards <= 64, "a bit per shard");

// Return n objects of class cls to the central lists of their slabs' shards, one
// lock per run of objects of one shard. With `from` (a thread cache's shard), runs
// of other shards count as remote frees.
constexpr unsigned kNoShard = ~0u;
void central_free(unsigned cls, void* const* ptrs, size_t n, unsigned from = kNoShard);

// The objects of a new slab of an object cache's class are made by the cache (its
// constructor, or its poison) before the slab is published: obj_cache.cc registers
// this when it makes its first cache, before a slab of such a class can be carved.
using CacheSlabInit = void (*)(unsigned cls, char* start, size_t n);
void central_set_cache_slab_init(CacheSlabInit init);

constexpr unsigned char kPoisonByte = 0x6b;  // as SLUB's POISON_FREE

// The first of n bytes at p that is not kPoisonByte (n when all are): where a
// poisoned object was written after it was freed.
inline size_t first_unpoisoned(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  size_t i = 0;
  while (i < n && b[i] == kPoisonByte) i++;
  return i;
}

// A class's counters summed over the shards.
CentralStats central_stats(unsigned cls);
// Every shard's spares of cls back to the page heap.
void central_release_spares(unsigned cls);
// The spares of the shards of `shard`'s node whose class lock is free, back to the
// page heap (a page heap with no free span that fits: it takes them before other
// heaps' pages or a new segment); how many.
size_t central_reclaim_spares(unsigned shard);
// The same for every class (malloc_trim, and every decay tick: spares kept across
// ticks would hold dirty slabs for ever; taking them every tick costs at most the
// slabs carved again once a tick).
void central_release_all_spares();

}  // namespace uslab
