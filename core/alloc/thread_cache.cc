// core/alloc/thread_cache.cc — thread cache slow paths, lifecycle and registry.
// Locking: see thread_cache.h. registry_lock_ guards the registry list and the
// pthread key's creation.
#include "core/alloc/thread_cache.h"

#include "core/alloc/decay.h"
#include "core/alloc/error_report.h"
#include "core/alloc/sampler.h"
#include "core/alloc/first_touch.h"
#include "core/platform/libc_calls.h"

#include <atomic>
#include <cstring>
#include <pthread.h>

namespace uslab {

__thread ThreadCache* t_cache __attribute__((tls_model("initial-exec"))) = &g_empty_cache;
__thread uint8_t t_state __attribute__((tls_model("initial-exec"))) = kThreadFresh;
USLAB_LARGE_ZERO constinit ThreadCache g_empty_cache = {};

namespace {

constexpr size_t total_slots() {
  size_t n = 0;
  for (size_t c = 1; c < kNumClasses; c++) n += kClassInfo[c].tcache_cap;
  return n;
}

struct CacheRecord {
  ThreadCache tc;
  void* slots[total_slots()];
};

constinit Mutex registry_lock_;
USLAB_LOCK_ONE(kThreadCacheRegistry, registry_lock_);
constinit IntrusiveList<ThreadCache> registry_ USLAB_GUARDED_BY(registry_lock_);
constinit MetaPool<CacheRecord> cache_pool_;
USLAB_LOCK_ONE(kMetaPool, cache_pool_.lock());
pthread_key_t key_;
bool key_ready_ = false;

// Returns the n newest objects of the bin to the central lists (objects of shards
// other than the cache's count as remote frees). They leave the bin
// (one store of count) before they are freed, so a fork in between leaves them in
// neither place (a leak in the child) rather than in both (a double free when the
// child flushes the caches of threads that did not survive the fork).
void flush_bin(CacheBin& b, unsigned cls, uint32_t n, unsigned shard) {
  void* batch[256];
  while (n) {
    uint32_t k = n < 256 ? n : 256;
    memcpy(batch, b.slots + b.count - k, k * sizeof(void*));
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    b.count -= k;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    central_free(cls, batch, k, shard);
    n -= k;
  }
}

// Hits banked by the bins' carries and by caches released (relaxed: statistics).
USLAB_LARGE_ZERO std::atomic<uint64_t> banked_hits_[kMaxClasses];

void flush_all(ThreadCache* tc) {
  for (unsigned c = 1; c < kMaxClasses; c++)
    flush_bin(tc->bins[c], c, tc->bins[c].count, tc->shard);
}

void release(ThreadCache* tc) {
  flush_all(tc);
  for (unsigned c = 1; c < kMaxClasses; c++)
    banked_hits_[c].fetch_add(tc->bins[c].hits / kHitStep, std::memory_order_relaxed);
  {
    LockGuard g(registry_lock_);
    registry_.remove(tc);
  }
  cache_pool_.free(reinterpret_cast<CacheRecord*>(tc));
}

void on_thread_exit(void* arg) {
  ThreadCache* tc = static_cast<ThreadCache*>(arg);
  t_cache = &g_empty_cache;
  t_state = kThreadTornDown;
  release(tc);
}

// Sets bin cls's hit counter (the profiler's legs, sampler.h), banking the difference
// so that the hit statistics stay whole. The owner only.
void set_bin_hits(ThreadCache* tc, unsigned cls, uint16_t value) {
  CacheBin& b = tc->bins[cls];
  banked_hits_[cls].fetch_add(sample_bank_delta(b.hits, value), std::memory_order_relaxed);
  b.hits = value;
}

void arm_sampling(ThreadCache* tc) {
  tc->sample_epoch = g_sample_epoch;
  // Cache classes too: their slow-path allocations are counted (sampled_or).
  for (unsigned cls = 1; cls < kMaxClasses; cls++)
    set_bin_hits(tc, cls, sample_arm(&tc->sample_left[cls], cls));
}

// A carry of bin cls's counter: whether the allocation is the sampled one, with the
// counter set for the next leg (`retry`: sample_on_carry's).
bool sample_carry(ThreadCache* tc, unsigned cls, bool retry) {
  if (tc->sample_epoch != g_sample_epoch) {
    arm_sampling(tc);
    return false;
  }
  uint16_t next;
  bool sampled = sample_on_carry(&tc->sample_left[cls], cls, retry, &next);
  set_bin_hits(tc, cls, next);
  return sampled;
}

// An allocation the slow path serves (a miss, or a cache class, whose bins hold
// nothing), counted in its class's sampling stream as a pop: p, or the sampled
// object that replaces it (p goes back).
void* sampled_or(ThreadCache* tc, unsigned cls, void* p, Request r) {
  CacheBin& b = tc->bins[cls];
  b.hits = static_cast<uint16_t>(b.hits + kHitStep);
  if (b.hits >= kHitStep) return p;
  banked_hits_[cls].fetch_add(kHitsPerCarry, std::memory_order_relaxed);
  if (!sample_carry(tc, cls, false)) return p;
  void* q = g_sample_hooks->small(cls, r);
  if (!q) return p;
  if (b.count < b.cap)
    bin_push(b, p);
  else
    central_free(cls, &p, 1);
  return q;
}

// The calling thread's cache, created on first use; nullptr when this thread must
// go straight to the central lists (caches disabled, thread exiting, no memory).
ThreadCache* create() {
  config_init();
  if (t_state == kThreadTornDown || !g_config.tcache) return nullptr;
  {
    LockGuard g(registry_lock_);
    if (!key_ready_) {
      if (libc::key_create(&key_, on_thread_exit) != 0) return nullptr;
      key_ready_ = true;
    }
  }
  CacheRecord* rec = cache_pool_.alloc();
  if (!rec) return nullptr;
  ThreadCache* tc = &rec->tc;
  memset(tc, 0, sizeof *tc);
  tc->shard = shard_for_new_thread();
  // Ticks before this cache existed owe nothing: its bins go back from the next one
  // on (from 0, its first slow path after any tick emptied every bin it had just
  // filled).
  tc->decay_ticks = decay_ticks_run();
  prepare_shard(tc->shard);
  size_t off = 0;
  for (unsigned c = 1; c < kNumClasses; c++) {
    tc->bins[c].cap = kClassInfo[c].tcache_cap;
    tc->bins[c].slots = rec->slots + off;
    off += kClassInfo[c].tcache_cap;
  }
  {
    LockGuard g(registry_lock_);
    registry_.push_front(tc);
  }
  if (g_sampling) arm_sampling(tc);
  t_cache = tc;
  t_state = kThreadActive;
  // May calloc (keys past the first 32): t_cache is already set, so that nests fine.
  libc::set_specific(key_, tc);
  return tc;
}

}  // namespace

USLAB_STARTUP_TEXT void thread_cache_sample_arm_mine() {
  if (t_cache != &g_empty_cache) arm_sampling(t_cache);
}

void* thread_cache_refill(unsigned cls, Request r) {
  ThreadCache* tc = t_cache;
  if (tc == &g_empty_cache) {
    tc = create();
    if (!tc) {
      void* p;
      return g_central[0][cls].alloc_batch(cls, &p, 1) ? p : os::fail_nomem();
    }
  }
  CacheBin& b = tc->bins[cls];
  if (b.count) return bin_pop(b);  // refilled by a nested call
  if (b.cap == 0) {                // a cache class: straight to its slabs
    void* p;
    if (!g_central[tc->shard][cls].alloc_batch(cls, &p, 1)) return os::fail_nomem();
    return __builtin_expect(g_sampling, 0) ? sampled_or(tc, cls, p, r) : p;
  }
  uint32_t want = b.cap / 2 ? b.cap / 2 : 1;
  b.count = static_cast<uint32_t>(g_central[tc->shard][cls].alloc_batch(cls, b.slots, want));
  tc->refills++;
  if (!b.count) return os::fail_nomem();
  void* p = bin_pop(b);
  // The decay clock (and what hangs on it) runs on slow paths; p is taken first, as
  // the tick may free objects into this thread's bins.
  if (tc->refills % 64 == 0) decay_notice();
  return __builtin_expect(g_sampling, 0) ? sampled_or(tc, cls, p, r) : p;
}

void* thread_cache_alloc_tick(unsigned cls, Request r) {
  // The bin is not empty (its counter only moves on a pop). The pop below counts
  // once more, hence one hit less banked.
  banked_hits_[cls].fetch_add(kHitsPerCarry - 1, std::memory_order_relaxed);
  if (__builtin_expect(g_sampling, 0)) {
    if (sample_carry(t_cache, cls, true)) {
      void* p = g_sample_hooks->small(cls, r);
      // Declined: served unsampled by a pop the counter does not count (as
      // percpu_alloc_tick does), unless the hook's own allocations emptied the bin.
      CacheBin& b = t_cache->bins[cls];
      if (!p && b.count) p = bin_pop(b);
      if (p) {
        decay_notice();
        return p;
      }
    }
  }
  void* p = thread_cache_alloc(cls, r);
  decay_notice();  // after the pop, as in thread_cache_refill
  return p;
}

void thread_cache_free_slow(void* p, unsigned cls) {
  ThreadCache* tc = t_cache;
  if (tc == &g_empty_cache) {
    tc = create();
    if (!tc) {
      central_free(cls, &p, 1);
      return;
    }
  }
  CacheBin& b = tc->bins[cls];
  if (b.cap == 0) return central_free(cls, &p, 1);  // a cache class
  if (b.count && b.slots[b.count - 1] == p) return report_bad_free(p, "double free", cls);
  if (b.count >= b.cap) {
    flush_bin(b, cls, b.cap / 2 ? b.cap / 2 : b.count, tc->shard);
    tc->flushes++;
    bin_push(b, p);
    return decay_notice();
  }
  bin_push(b, p);
}

void thread_cache_flush_mine() {
  ThreadCache* tc = t_cache;
  if (tc != &g_empty_cache) flush_all(tc);
}

void thread_cache_decay(uint64_t ticks) {
  ThreadCache* tc = t_cache;
  if (tc == &g_empty_cache || tc->decay_ticks == ticks) return;
  tc->decay_ticks = ticks;
  flush_all(tc);
}

void thread_cache_counts(size_t counts[kMaxClasses], size_t* ncaches) {
  for (size_t c = 0; c < kMaxClasses; c++) counts[c] = 0;
  LockGuard g(registry_lock_);
  *ncaches = registry_.size();
  for (ThreadCache* tc = registry_.front(); tc; tc = tc->next)
    for (size_t c = 1; c < kNumClasses; c++) counts[c] += tc->bins[c].count;
}

void thread_cache_hits(uint64_t hits[kMaxClasses]) {
  for (size_t c = 0; c < kMaxClasses; c++)
    hits[c] = banked_hits_[c].load(std::memory_order_relaxed);
  LockGuard g(registry_lock_);
  for (ThreadCache* tc = registry_.front(); tc; tc = tc->next)
    for (size_t c = 1; c < kMaxClasses; c++) hits[c] += tc->bins[c].hits / kHitStep;
}

// The child's only thread, the registry's lock reset by fork (release takes it).
void thread_cache_after_fork_child() USLAB_NO_THREAD_SAFETY_ANALYSIS {
  for (;;) {
    ThreadCache* victim = nullptr;
    for (ThreadCache* tc = registry_.front(); tc; tc = tc->next)
      if (tc != t_cache) {
        victim = tc;
        break;
      }
    if (!victim) break;
    release(victim);
  }
}

}  // namespace uslab
