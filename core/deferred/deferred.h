// core/deferred/deferred.h — deferred frees (uslab_free_deferred): objects freed only after
// a grace period (grace.h), batched in page-sized blocks of pointers and
// given back with the bulk free, as the kernel's kfree_rcu does.
//
// Owns: the per-CPU deferred sheaves' miss path (the sheaf itself is slot
// kDeferSheaf of each per-CPU region, pushed to by the rseq fast path below), the
// locked per-CPU slots used where the per-CPU mode is off or a thread has no usable
// CPU, the queue of sealed blocks (each stamped with the grace-period counter when
// sealed), the emergency chain (objects linked through their own first word when no
// block can be allocated: a deferred free is never lost; the links are encoded with
// a per-process secret, so a write into a deferred object is reported, not
// followed), polling and the barrier, stats and fork handling.
//
// Flow: push → full sheaf → its pointers move into a fresh 4 KiB block, which is
// stamped and queued (the decay tick, run also by the background thread, malloc_trim and
// the barrier also seal sheaves that are not full) → a poll (once a few blocks wait, on
// those occasions too) detaches the
// queue, starts a grace period, and frees every block whose stamp is complete with
// free_bulk (grouped by slab); the others go back to the head of the queue.
//
// Locking: the rseq push takes no lock. Slot locks guard their open block; the
// queue lock guards the queue, the emergency chain and the counters and is never
// held across a grace-period wait or a heap call. One poller at a time (poller_ in
// the queue, set under its lock) owns the blocks it detached; nobody waits for it
// while holding a lock. Order: slot lock → queue lock → heap locks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/alloc.h"
#include "core/deferred/grace.h"
#include "core/guard/guard.h"

namespace uslab::heap {

// Miss and retry paths of the per-CPU push (the retry never inlined: percpu.h).
void defer_miss(void* p, unsigned slot);
[[gnu::noinline]] void defer_retry(void* p, unsigned slot);
// The push of a thread without a usable CPU sheaf (locked slots).
void defer_locked(void* p);
// True once the per-CPU deferred sheaves are in use (per-CPU mode with rseq fences).
extern bool g_defer_percpu USLAB_HIDDEN;

// uslab_free_deferred: p is freed after every read-side section that was open now
// has closed. NULL is a no-op.
inline void free_deferred(void* p) {
  if (p == nullptr) return;
  if (__builtin_expect(guard::in_pool(p), 0)) guard::note_deferred(p);
  if (__builtin_expect(g_defer_percpu, 1))
    return percpu_push_one<defer_miss, defer_retry>(p, kDeferSheaf);
  defer_locked(p);
}

inline void read_lock() { grace_read_lock(); }
inline void read_unlock() { grace_read_unlock(); }
// Blocks until a grace period has passed (reported and aborts inside a section).
void synchronize();
// Blocks until every deferred free queued before the call has been done.
void deferred_barrier();
// The decay tick's share (also malloc_trim's): seals the open sheaves and blocks,
// however full, then polls, so deferred memory comes back in a program that stopped
// deferring.
void deferred_tick();
// Objects given to free_deferred and not freed yet (cheap; the background thread's
// backlog: decay.h).
size_t deferred_pending_objects();

struct DeferredStats {
  size_t blocks;             // sealed blocks waiting (queued or being freed)
  size_t objects_pending;    // pointers not freed yet (open sheaves and slots too)
  size_t bytes_waiting;      // their usable bytes (sealed blocks and emergency chain)
  size_t emergency_objects;  // of them, chained through their own memory
  uint64_t grace_periods;    // grace periods seen complete
  uint64_t blocks_freed;     // blocks freed so far
  uint64_t batches_freed;    // blocks and emergency chains freed so far
  uint64_t objects_freed;    // deferred objects freed so far
  bool membarrier;           // writers use membarrier (else readers fence)
};
// With per_class (kMaxClasses entries), also the queued objects (sealed blocks and
// the emergency chain, not the open sheaves) of each class (0: large objects).
DeferredStats deferred_stats(size_t* per_class = nullptr);

// fork (the queue and slot locks are in the lock table): prepare, with every lock
// held, notes whether the forking thread is the poller; the child requeues what
// another thread's poll had detached. prepared: the prepare handler ran (not a fork
// that interrupted a slow path, heap::fork_prepare).
void deferred_fork_prepare();
void deferred_fork_child(bool prepared);

}  // namespace uslab::heap
