// core/alloc/thread_cache.h — per-thread caches of free objects, one bin per class.
//
// This is the fallback mode of the per-CPU design (docs/DESIGN.md), used by the whole
// process when rseq is unavailable and by single threads that cannot use their
// CPU's sheaves (see percpu.h): each bin is an array
// stack of object pointers; malloc pops, free pushes, with no lock and no atomic.
// An empty bin refills half its capacity from its shard's central list in one batch; a full
// bin flushes half back in one batch. Each bin counts its hits (kHitStep below); the
// carries and the counts of caches released go to a relaxed atomic bank per class.
//
// Owns: the ThreadCache records (from a MetaPool), the registry of live caches, the
// pthread key whose destructor flushes a cache when its thread exits, and the two
// initial-exec TLS words (t_cache, t_state) — with rseq.cc's area and grace.cc's
// reader pointer 56 bytes in all,
// small enough for glibc's static TLS surplus when libuslab.so is dlopen'ed
// (jemalloc#937).
//
// Locking: a ThreadCache is touched only by its thread, except (a) by stats readers,
// which read bin counts racily under registry_lock, and (b) in a forked child, where
// the caches of threads that no longer exist are flushed by the only thread left.
// Every thread starts pointing at a shared empty cache (capacity 0), so the first
// operation of a thread takes the slow path without an extra fast-path test.
//
// Not async-signal-safe, like glibc's tcache: a signal handler that mallocs while the
// same thread is inside malloc may corrupt this thread's bins (the rseq per-CPU
// mode replaces this with restartable sections).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/central.h"
#include "core/alloc/hit_counter.h"

namespace uslab {

struct CacheBin {
  uint32_t count;
  uint16_t cap;
  uint16_t hits;  // + kHitStep per pop; its carry ticks (as percpu.h's hit counters)
  void** slots;
};

struct ThreadCache {
  CacheBin bins[kMaxClasses];  // cache classes have capacity 0: pass-through
  ThreadCache* prev;           // registry
  ThreadCache* next;
  uint64_t refills;
  uint64_t flushes;
  uint64_t decay_ticks;  // the decay tick count when the bins were last given back
  unsigned shard;        // whose central lists refill the bins (shard.h)
  // The heap profiler's streams (sampler.h), as per CPU in percpu.cc.
  uint32_t sample_epoch;
  uint64_t sample_left[kMaxClasses];
};

enum : uint8_t { kThreadFresh = 0, kThreadActive = 1, kThreadTornDown = 2 };

extern __thread ThreadCache* t_cache __attribute__((tls_model("initial-exec")));
extern __thread uint8_t t_state __attribute__((tls_model("initial-exec")));
extern ThreadCache g_empty_cache;

// Slow paths of the bins (refill, flush, first use, use after thread exit,
// double-free report). thread_cache_alloc_slow is front.cc's: a process's first
// allocation decides between the per-CPU sheaves and these caches there, then the
// bin refills (thread_cache_refill).
void* thread_cache_alloc_slow(unsigned cls, Request r);
void* thread_cache_refill(unsigned cls, Request r);
void thread_cache_free_slow(void* p, unsigned cls);
void* thread_cache_alloc_tick(unsigned cls, Request r);

// Pops bin b's top object (b.count > 0). The slot keeps a stale copy of the pointer,
// which Memcheck's leak check must not take for a reference (track.h).
inline void* bin_pop(CacheBin& b) {
  void* p = b.slots[--b.count];
  track_stale(&b.slots[b.count], sizeof p);
  return p;
}

// r: what the program asked for, passed on to the slow paths (size_class.h).
inline void* thread_cache_alloc(unsigned cls, Request r = kWholeClass) {
  CacheBin& b = t_cache->bins[cls];
  if (__builtin_expect(b.count != 0, 1)) {
    uint16_t h = static_cast<uint16_t>(b.hits + kHitStep);
    b.hits = h;
    if (__builtin_expect(h < kHitStep, 0)) return thread_cache_alloc_tick(cls, r);
    return bin_pop(b);
  }
  return thread_cache_alloc_slow(cls, r);
}

// Pushes p onto bin b. The slot is written before the count that publishes it: a
// fork copies the bins of threads that keep running, and the child flushes them,
// so a count that covers an unwritten slot would free a stale pointer there.
inline void bin_push(CacheBin& b, void* p) {
  b.slots[b.count] = p;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  b.count++;
}

// p is a validated object of class cls. Pushing the bin's top object again is a
// double free; the slow path reports it.
inline void thread_cache_free(void* p, unsigned cls) {
  CacheBin& b = t_cache->bins[cls];
  if (__builtin_expect(b.count < b.cap && (b.count == 0 || b.slots[b.count - 1] != p), 1))
    return bin_push(b, p);
  thread_cache_free_slow(p, cls);
}

// Arms the calling thread's sampling streams (sampler.h) as sampling turns on; other
// threads' caches arm at their next carry.
void thread_cache_sample_arm_mine();
// Flush every bin of the calling thread back to the central lists.
void thread_cache_flush_mine();
// The calling thread's share of the decay (decay_notice): its bins go back once per
// decay tick (`ticks`: the ticks run so far). Only the owner can empty its bins, so
// a thread that makes no call keeps what it cached until it calls again or exits.
void thread_cache_decay(uint64_t ticks);

// Sum of cached objects per class over all live caches (approximate while running).
void thread_cache_counts(size_t counts[kMaxClasses], size_t* ncaches);
// Allocations served by the bins, per class (live caches and those of exited threads).
void thread_cache_hits(uint64_t hits[kMaxClasses]);
// In a forked child (locks already reset): flush and free the caches of threads
// that did not survive the fork.
void thread_cache_after_fork_child();

}  // namespace uslab
