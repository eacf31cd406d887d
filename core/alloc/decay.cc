// core/alloc/decay.cc — the decay tick and its backlog; see decay.h.
#include "core/alloc/decay.h"

#include <atomic>

#include "core/alloc/background.h"
#include "core/alloc/central.h"
#include "core/alloc/depot.h"
#include "core/alloc/huge_cache.h"
#include "core/alloc/page_heap.h"
#include "core/alloc/percpu.h"
#include "core/alloc/thread_cache.h"

namespace uslab {

const DecayHooks* g_decay_hooks = nullptr;

namespace {

constinit std::atomic<uint64_t> next_tick_ms_{0};
constinit std::atomic<uint64_t> ticks_{0};  // ticks run
// Written only when the coarse clock moved: CPUs missing at once share a line read
// mostly, and write it at most once per clock step.
constinit std::atomic<uint64_t> last_call_ms_{0};

const DecayHooks* hooks() { return __atomic_load_n(&g_decay_hooks, __ATOMIC_ACQUIRE); }

}  // namespace

uint64_t decay_next_tick_ms() { return next_tick_ms_.load(std::memory_order_relaxed); }

uint64_t decay_ticks_run() { return ticks_.load(std::memory_order_relaxed); }

uint64_t decay_last_call_ms() { return last_call_ms_.load(std::memory_order_relaxed); }

void decay_postpone_tick() {
  next_tick_ms_.store(os::now_ms() + decay_tick_ms(), std::memory_order_relaxed);
}

namespace {

void run_tick(bool explicit_call) {
  ticks_.fetch_add(1, std::memory_order_relaxed);
  depot_decay_all();
  percpu_decay_sheaves();
  central_release_all_spares();
  if (const DecayHooks* h = hooks()) h->tick();
  // Pages free for decay_purge_age_ms, even in a heap that saw no call since.
  page_heap_purge_all(false);
  if (explicit_call) page_heap_collapse_all(UINT64_MAX);
  huge_cache_purge(false);
  // A program whose caches, free pages and deferred frees hold this much gets the
  // thread even when no single heap crossed the mark (background_thread=auto).
  // So does a reader's request for the live statistics, which the thread writes.
  if (background_state() == BackgroundState::kIdle) {
    const DecayHooks* h = hooks();
    const LiveHooks* live = __atomic_load_n(&g_live_hooks, __ATOMIC_ACQUIRE);
    if (decay_backlog().bytes + (h ? h->pending_bytes() : 0) >= kBackgroundStartBytes ||
        (live && live->requested()))
      background_want();
  }
}

void tick_if_due(uint64_t now) {
  uint64_t next = next_tick_ms_.load(std::memory_order_relaxed);
  if (now < next) return;
  if (!next_tick_ms_.compare_exchange_strong(next, now + decay_tick_ms(),
                                             std::memory_order_relaxed))
    return;               // another thread runs this tick
  if (next == 0) return;  // the first call only starts the clock
  run_tick(false);
}

}  // namespace

void decay_maybe_tick() {
  uint64_t now = os::now_ms();
  background_note_age(now);
  if (last_call_ms_.load(std::memory_order_relaxed) != now)
    last_call_ms_.store(now, std::memory_order_relaxed);
  tick_if_due(now);
}

void decay_background_tick() { tick_if_due(os::now_ms()); }

void decay_tick_now() {
  next_tick_ms_.store(os::now_ms() + decay_tick_ms(), std::memory_order_relaxed);
  run_tick(true);
}

size_t decay_release_all() {
  if (const DecayHooks* h = hooks()) h->tick();
  thread_cache_flush_mine();
  percpu_drain_all();
  central_release_all_spares();
  return page_heap_purge_all(true) + huge_cache_purge(true);
}

void decay_notice() {
  decay_maybe_tick();
  thread_cache_decay(decay_ticks_run());
  background_poke();
}

DecayBacklog decay_backlog() {
  DecayBacklog b{};
  for_each_shard_used([&](unsigned sh) {
    size_t dirty;
    b.work |= g_page_heap[sh].backlog(&dirty);
    b.bytes += dirty;
  });
  b.bytes += huge_cache_bytes();
  b.bytes += percpu_cached_bytes();
  for (unsigned cls = 1; cls < kMaxClasses; cls++) {
    b.bytes += depot_stats(cls).objects * class_size(cls);
    b.bytes += central_stats(cls).spares * class_info(cls).slab_pages * kPageSize;
  }
  RemoteNodeStats rs;
  percpu_remote_stats(&rs);
  const DecayHooks* h = hooks();
  b.work |= b.bytes > 0 || rs.pending > 0 || (h && h->pending() > 0);
  return b;
}

}  // namespace uslab
