// core/deferred.cc — deferred frees: sealing blocks, the queue, polls, the
// barrier, the background thread. See deferred.h for the flow and the locking.
#include "core/deferred/deferred.h"

#include <sched.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/heap/heap.h"

namespace uslab::heap {

constinit bool g_defer_percpu = false;

namespace {

// A page-sized block of deferred pointers (a class-4096 object of the heap itself).
struct DeferBlock {
  DeferBlock* next;
  uint64_t stamp;  // grace_stamp() when sealed
  uint64_t count;
  void* ptrs[kDeferCap];
};
static_assert(sizeof(DeferBlock) <= 4096, "a block is one page");

struct alignas(64) DeferSlot {
  Mutex lock;
  DeferBlock* open USLAB_GUARDED_BY(lock);
};

// The queue (under queue_lock_).
constinit Mutex queue_lock_;
USLAB_LOCK_ONE(kDeferredQueue, queue_lock_);
// Sealed blocks, oldest first (stamps never decrease).
DeferBlock* head_ USLAB_GUARDED_BY(queue_lock_) = nullptr;
DeferBlock* tail_ USLAB_GUARDED_BY(queue_lock_) = nullptr;
// The emergency chain: objects linked through their first word.
void* chain_ USLAB_GUARDED_BY(queue_lock_) = nullptr;
void* chain_tail_ USLAB_GUARDED_BY(queue_lock_) = nullptr;
uint64_t chain_stamp_ USLAB_GUARDED_BY(queue_lock_) = 0;
size_t chain_count_ USLAB_GUARDED_BY(queue_lock_) = 0;
size_t chain_bytes_ USLAB_GUARDED_BY(queue_lock_) = 0;
uintptr_t chain_secret_ = 0;  // encodes the chain's links (set_link); set once by decide()
// The thread that detached blocks to free them (0: none).
uint32_t poller_ USLAB_GUARDED_BY(queue_lock_) = 0;
// Sealed and not yet freed (queued or with the poller).
size_t blocks_ USLAB_GUARDED_BY(queue_lock_) = 0;
size_t sealed_objects_ USLAB_GUARDED_BY(queue_lock_) = 0;
// Totals (the barrier compares them).
uint64_t blocks_sealed_ USLAB_GUARDED_BY(queue_lock_) = 0;
uint64_t blocks_freed_ USLAB_GUARDED_BY(queue_lock_) = 0;
uint64_t chained_ USLAB_GUARDED_BY(queue_lock_) = 0;
uint64_t chained_freed_ USLAB_GUARDED_BY(queue_lock_) = 0;
uint64_t objects_freed_ USLAB_GUARDED_BY(queue_lock_) = 0;
uint64_t chains_freed_ USLAB_GUARDED_BY(queue_lock_) = 0;

// The locked slots, one per possible CPU (created on first use).
constinit Mutex slots_init_lock_;
USLAB_LOCK_ONE(kDeferredSlotsInit, slots_init_lock_);
DeferSlot* slots_ = nullptr;
uint32_t nslots_ = 0;
constinit std::atomic<bool> decided_{false};
USLAB_LOCK_SET(
    kDeferredSlot, [] { return decided_.load(std::memory_order_acquire) ? nslots_ : 0u; },
    [](uint32_t i) { return &slots_[i].lock; });

DeferBlock* new_block() {
  int saved = errno;
  auto* b = static_cast<DeferBlock*>(alloc(sizeof(DeferBlock)));
  errno = saved;  // a failed block falls back to the chain; the caller sees no error
  if (b) {
    b->next = nullptr;
    b->count = 0;
  }
  return b;
}

// Bytes of the objects in sealed blocks and the emergency chain. The queue lock only
// (the tick that asks may run inside an allocation made under a slot's lock).
size_t sealed_bytes() {
  LockGuard g(queue_lock_);
  size_t bytes = chain_bytes_;
  for (DeferBlock* b = head_; b; b = b->next)
    for (size_t i = 0; i < b->count; i++) bytes += usable_size(b->ptrs[i]);
  return bytes;
}

// Decides once whether the per-CPU deferred sheaves are used (they need rseq
// fences, so a barrier can empty the sheaves of other CPUs) and sets up the slots.
void decide() {
  if (decided_.load(std::memory_order_acquire)) return;
  LockGuard g(slots_init_lock_);
  if (decided_.load(std::memory_order_relaxed)) return;
  uint32_t n = topology_in_use().cpus_possible;
  if (n > kMaxCpus) n = kMaxCpus;
  slots_ = static_cast<DeferSlot*>(g_meta_arena.alloc(n * sizeof(DeferSlot), alignof(DeferSlot)));
  if (!slots_) os::fatal("uslab: out of memory setting up deferred frees\n");
  nslots_ = n;
  chain_secret_ = os::random_u64();
  g_defer_percpu = percpu_decide() && rseq_fence_available();
  decided_.store(true, std::memory_order_release);
  static constexpr DecayHooks kHooks{deferred_tick, deferred_pending_objects, sealed_bytes};
  __atomic_store_n(&g_decay_hooks, &kHooks, __ATOMIC_RELEASE);
}

// Links of the emergency chain are stored encoded, as SLUB hardens its free lists:
// the next object's address xor a per-process secret xor the link's own address. A
// program that writes into an object it deferred (a use after free) turns its link
// into an address that is no object start, which chain_next rejects, instead of
// steering the chain's frees to an object of its choosing.
void set_link(void* obj, void* next) {
  *static_cast<uintptr_t*>(obj) =
      reinterpret_cast<uintptr_t>(next) ^ chain_secret_ ^ reinterpret_cast<uintptr_t>(obj);
}

// The object after obj in its chain (nullptr at the end); *ok is false, and the
// result nullptr, when obj's link was overwritten.
void* chain_next(void* obj, bool* ok) {
  auto* next = reinterpret_cast<void*>(*static_cast<uintptr_t*>(obj) ^ chain_secret_ ^
                                       reinterpret_cast<uintptr_t>(obj));
  *ok = next == nullptr || usable_size(next) != 0;
  return *ok ? next : nullptr;
}

void add_to_chain_locked(void* p) USLAB_REQUIRES(queue_lock_) {
  USLAB_DCHECK(queue_lock_.held());
  set_link(p, nullptr);
  if (chain_tail_)
    set_link(chain_tail_, p);
  else
    chain_ = p;
  chain_tail_ = p;
  chain_count_++;
  chained_++;
  chain_bytes_ += usable_size(p);
  chain_stamp_ = grace_stamp();
}

// Queues objs[0..n) for after a grace period: in block b when there is one (its
// pointers may already be there), else through the objects' own memory.
void seal(DeferBlock* b, void* const* objs, size_t n) {
  if (b && objs != b->ptrs) memcpy(b->ptrs, objs, n * sizeof(void*));
  LockGuard g(queue_lock_);
  if (!b) {
    for (size_t i = 0; i < n; i++) add_to_chain_locked(objs[i]);
    return;
  }
  b->count = n;
  b->stamp = grace_stamp();
  b->next = nullptr;
  if (tail_)
    tail_->next = b;
  else
    head_ = b;
  tail_ = b;
  blocks_++;
  sealed_objects_ += n;
  blocks_sealed_++;
}

void free_chain(void* p) {
  void* batch[kMaxBatch];
  size_t n = 0;
  while (p) {
    bool ok;
    void* next = chain_next(p, &ok);
    if (!ok) {
      os::print_stderr(
          "uslab: deferred object %p was written after uslab_free_deferred (its "
          "link in the emergency chain); the objects after it are leaked\n",
          p);
      abort_if_configured();
    }
    batch[n++] = p;
    if (n == kMaxBatch) {
      free_bulk(n, batch);
      n = 0;
    }
    p = next;
  }
  free_bulk(n, batch);
}

// What the poller detached (under queue_lock_; reachable so that a forked child can
// put it back when the poller is a thread the child does not have).
DeferBlock* inflight_ USLAB_GUARDED_BY(queue_lock_) = nullptr;
DeferBlock* inflight_tail_ USLAB_GUARDED_BY(queue_lock_) = nullptr;
void* inflight_chain_ USLAB_GUARDED_BY(queue_lock_) = nullptr;
void* inflight_chain_tail_ USLAB_GUARDED_BY(queue_lock_) = nullptr;
uint64_t inflight_chain_stamp_ USLAB_GUARDED_BY(queue_lock_) = 0;
size_t inflight_chain_count_ USLAB_GUARDED_BY(queue_lock_) = 0;
size_t inflight_chain_bytes_ USLAB_GUARDED_BY(queue_lock_) = 0;
bool fork_poller_is_me_ = false;

// Puts what the poller still holds back in front of the queue (older stamps
// first) and ends the poll. Queue lock held.
void requeue_inflight_locked() USLAB_REQUIRES(queue_lock_) {
  USLAB_DCHECK(queue_lock_.held());
  if (inflight_) {
    inflight_tail_->next = head_;
    if (!head_) tail_ = inflight_tail_;
    head_ = inflight_;
  }
  if (inflight_chain_) {
    set_link(inflight_chain_tail_, chain_);
    if (!chain_) chain_tail_ = inflight_chain_tail_;
    chain_ = inflight_chain_;
    chain_count_ += inflight_chain_count_;
    chain_bytes_ += inflight_chain_bytes_;
    if (inflight_chain_stamp_ > chain_stamp_) chain_stamp_ = inflight_chain_stamp_;
  }
  inflight_ = inflight_tail_ = nullptr;
  inflight_chain_ = inflight_chain_tail_ = nullptr;
  poller_ = 0;
}

// One poll: detach the queue, start a grace period, free what it completes (with
// `wait`, wait until all of it is complete). False when another thread is polling.
bool poll(bool wait) {
  uint64_t last = 0;
  {
    LockGuard g(queue_lock_);
    if (poller_) return false;
    if (!head_ && !chain_) return true;
    poller_ = current_tid();
    inflight_ = head_;
    inflight_tail_ = tail_;
    last = tail_ ? tail_->stamp : 0;
    head_ = tail_ = nullptr;
    inflight_chain_ = chain_;
    inflight_chain_tail_ = chain_tail_;
    inflight_chain_stamp_ = chain_stamp_;
    inflight_chain_count_ = chain_count_;
    inflight_chain_bytes_ = chain_bytes_;
    if (chain_ && chain_stamp_ > last) last = chain_stamp_;
    chain_ = chain_tail_ = nullptr;
    chain_count_ = chain_bytes_ = 0;
  }
  grace_start();
  uint64_t oldest;
  if (wait) {
    grace_wait(last);
    oldest = UINT64_MAX;
  } else {
    oldest = grace_oldest();
  }
  // Stamps never decrease along the queue: the complete blocks are a prefix. Each
  // is unlinked and counted before it is freed (a fork meanwhile leaks it in the
  // child rather than freeing it twice).
  for (;;) {
    DeferBlock* b;
    {
      LockGuard g(queue_lock_);
      b = inflight_;
      if (!b || b->stamp >= oldest) break;
      inflight_ = b->next;
      if (!inflight_) inflight_tail_ = nullptr;
      blocks_--;
      sealed_objects_ -= b->count;
      blocks_freed_++;
      objects_freed_ += b->count;
    }
    free_bulk(b->count, b->ptrs);
    USLAB_PROBE(deferred_batch, b->count, b->stamp);
    free(b);
  }
  void* chain = nullptr;
  size_t chain_count = 0;
  {
    LockGuard g(queue_lock_);
    if (inflight_chain_ && inflight_chain_stamp_ < oldest) {
      chain = inflight_chain_;
      chain_count = inflight_chain_count_;
      inflight_chain_ = inflight_chain_tail_ = nullptr;
      chained_freed_ += chain_count;
      objects_freed_ += chain_count;
      chains_freed_++;
    }
  }
  if (chain) {
    free_chain(chain);
    USLAB_PROBE(deferred_batch, chain_count, last);
  }
  LockGuard g(queue_lock_);
  requeue_inflight_locked();
  return true;
}

// A poll starts a grace period (a membarrier: costlier with other threads running),
// so a seal polls only once this many blocks wait; the decay tick, malloc_trim and the background thread seal what is
// left open and poll.
constexpr size_t kPollBlocks = 2;

// When this many blocks wait (a reader preempted inside its section holds every
// grace period up), a thread that seals one waits for a grace period instead of
// piling up more: the footprint stays bounded (the kernel's kfree_rcu falls back to
// synchronize_rcu the same way). 128 blocks are 65024 objects.
constexpr size_t kMaxWaitingBlocks = 128;

// After a block was sealed: free what is ready.
void after_seal() {
  size_t waiting = __atomic_load_n(&blocks_, __ATOMIC_RELAXED);
  if (waiting >= kMaxWaitingBlocks && !grace_in_section())
    poll(true);
  else if (waiting >= kPollBlocks)
    poll(false);
}

DeferSlot& current_slot() {
  int cpu = sched_getcpu();
  return slots_[cpu >= 0 ? static_cast<uint32_t>(cpu) % nslots_ : 0];
}

// Seals (or frees, when empty) a slot's open block; its lock held. True if sealed.
bool close_slot_locked(DeferSlot& s) USLAB_REQUIRES(s.lock) {
  USLAB_DCHECK(s.lock.held());
  DeferBlock* b = s.open;
  s.open = nullptr;
  if (!b) return false;
  if (b->count) {
    seal(b, b->ptrs, b->count);
    return true;
  }
  free(b);
  return false;
}

void drain_sink(void* const* objs, size_t n, void*) { seal(new_block(), objs, n); }

// Seals every CPU's deferred sheaf and every slot's open block, however full.
// With `wait` false (the decay tick) a busy slot is skipped: the tick can run inside
// an allocation made under a slot's lock (push_locked's new block, a freed empty
// block), and waiting there would be waiting for itself.
void seal_open(bool wait) {
  percpu_defer_drain_all(drain_sink, nullptr);
  for (uint32_t i = 0; i < nslots_; i++) {
    DeferSlot& slot = slots_[i];
    if (wait)
      slot.lock.lock();
    else if (!slot.lock.try_lock())
      continue;
    close_slot_locked(slot);
    slot.lock.unlock();
  }
}

// The push of a thread without a CPU sheaf: the open block of its CPU's slot.
void push_locked(void* p) {
  bool sealed = false, opened = false;
  {
    DeferSlot& s = current_slot();
    LockGuard g(s.lock);
    if (!s.open) {
      s.open = new_block();
      opened = true;
    }
    if (!s.open) {
      LockGuard q(queue_lock_);
      add_to_chain_locked(p);
    } else {
      s.open->ptrs[s.open->count++] = p;
      if (s.open->count == kDeferCap) sealed = close_slot_locked(s);
    }
  }
  if (sealed) after_seal();
  // A slot's first object since the last seal: the decay tick (and the background
  // thread, if it sleeps) will seal it.
  if (opened) decay_notice();
}

}  // namespace

void defer_locked(void* p) {
  decide();
  if (g_defer_percpu) return free_deferred(p);
  push_locked(p);
}

void defer_retry(void* p, unsigned) { free_deferred(p); }

void defer_miss(void* p, unsigned) {
  // The sheaf is full, not open yet (a new CPU, or emptied by a barrier), or the
  // thread has no usable CPU; a full sheaf moves into a fresh block.
  DeferBlock* b = new_block();
  void* spill[kDeferCap];
  long k = percpu_defer_take(b ? b->ptrs : spill);
  if (k <= 0) {
    if (b) free(b);
    // No usable CPU for this thread (rseq refused, CPU id out of range): the slots.
    if (k < 0) return push_locked(p);
  } else {
    seal(b, b ? b->ptrs : spill, static_cast<size_t>(k));
  }
  free_deferred(p);
  if (k > 0) after_seal();
  decay_notice();  // a sheaf opened or sealed: deferred objects wait for a tick
}

void synchronize() { grace_synchronize(); }

void deferred_tick() {
  if (!decided_.load(std::memory_order_acquire)) return;
  seal_open(false);
  poll(false);
}

void deferred_barrier() {
  if (grace_in_section()) grace_misuse("uslab_deferred_barrier called inside a read-side section");
  decide();
  seal_open(true);
  // A CPU whose sheaf could not be taken (its fence failed: membarrier out of memory
  // past its retries, or refused along with the visit that stands in for it) is
  // tried again a few times before the barrier leaves its objects there.
  for (int i = 0; i < 3 && percpu_defer_pending() > 0; i++) {
    os::sleep_ns(1000000);
    seal_open(true);
  }
  uint64_t blocks, chained;
  {
    LockGuard g(queue_lock_);
    blocks = blocks_sealed_;
    chained = chained_;
  }
  for (;;) {
    {
      LockGuard g(queue_lock_);
      if (blocks_freed_ >= blocks && chained_freed_ >= chained) return;
    }
    if (!poll(true)) os::sleep_ns(50000);  // another thread is polling
  }
}

size_t deferred_pending_objects() {
  if (!decided_.load(std::memory_order_acquire)) return 0;
  size_t n = percpu_defer_pending();
  // A busy slot counts as one: the tick that asks may run inside an allocation made
  // under that slot's lock (a new block), and must not wait for it.
  for (uint32_t i = 0; i < nslots_; i++) {
    DeferSlot& slot = slots_[i];
    if (!slot.lock.try_lock()) {
      n++;
      continue;
    }
    if (slot.open) n += slot.open->count;
    slot.lock.unlock();
  }
  LockGuard g(queue_lock_);
  return n + sealed_objects_ + chain_count_;
}

DeferredStats deferred_stats(size_t* per_class) {
  DeferredStats st{};
  if (per_class) memset(per_class, 0, kMaxClasses * sizeof(size_t));
  if (decided_.load(std::memory_order_acquire)) {
    st.objects_pending = deferred_pending_objects();
    st.bytes_waiting = sealed_bytes();
    LockGuard g(queue_lock_);
    if (per_class) {
      for (DeferBlock* b = head_; b; b = b->next)
        for (size_t i = 0; i < b->count; i++)
          per_class[PageMap::entry(b->ptrs[i]) & PageMap::kClassMask]++;
      for (void* p = chain_; p;) {
        per_class[PageMap::entry(p) & PageMap::kClassMask]++;
        bool ok;
        p = chain_next(p, &ok);
      }
    }
    st.blocks = blocks_;
    st.emergency_objects = chain_count_;
    st.blocks_freed = blocks_freed_;
    st.batches_freed = blocks_freed_ + chains_freed_;
    st.objects_freed = objects_freed_;
  }
  st.grace_periods = grace_completed();
  st.membarrier = grace_uses_membarrier();
  return st;
}

// Fork's prepare handler runs this with every lock held (lifecycle.cc's walk, which
// the analysis does not follow); the child, as its only thread.
void deferred_fork_prepare() USLAB_NO_THREAD_SAFETY_ANALYSIS {
  fork_poller_is_me_ = poller_ == current_tid();
}

void deferred_fork_child(bool prepared) USLAB_NO_THREAD_SAFETY_ANALYSIS {
  // The blocks a poll in another thread had detached go back to the queue (that
  // thread does not exist here); a poll the forking thread itself is in goes on.
  if (prepared && poller_ && !fork_poller_is_me_) {
    LockGuard g(queue_lock_);  // reset by fork: free, and this is the only thread
    requeue_inflight_locked();
  }
  grace_fork_child();
}

}  // namespace uslab::heap
