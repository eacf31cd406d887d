// core/lifecycle/lifecycle.cc — the library's start, and fork: the pthread_atfork
// handlers that take every lock of the lock table before a fork and release
// (parent) or reset (child) them after.
// Locking: every registered lock, in rank order (core/platform/lock_table.h).
#include "core/lifecycle/lifecycle.h"

#include "core/deferred/deferred.h"
#include "core/guard/guard.h"
#include "core/prof/prof.h"
#include "core/stats/stats.h"

namespace uslab::heap {

USLAB_STARTUP_TEXT void init() {
  config_init();
  // Strict overcommit charges uslab's tables whole, used or not (shard.h, segment.h).
  shard_tables_uncharge_at_start();
  PageMap::uncharge_root();
  // hwloc allocates: only from here, the constructor, never inside an allocation.
  if (topology_adopt_hwloc()) percpu_nodes_changed();
  stats_report_init();
  live_init();  // before the thread can start: it makes the region
  background_init();
  prof::init();
  guard::init();
}

// fork takes every lock of the lock table (core/platform/lock_table.h) in rank order,
// unless the forking thread holds or is taking one (t_locks_held: fork from a signal
// handler that interrupted a slow path, glibc tst-mallocfork2). Then it takes none: a
// lock of a lower rank may be held by another thread (the background thread's tick,
// say) that waits for the one this thread holds. That child finds the heap as the
// fork found it, other threads' operations and its own interrupted one half done,
// and may only make async-signal-safe calls until it execs (POSIX's rule for any
// multi-threaded fork); every lock is reset there, and nothing that walks shared
// lists runs.
namespace {

bool g_fork_interrupted;
// How many locks of each set prepare took: a set's count may grow while a lock of a
// higher rank is still free (more shards), and parent must release just those.
uint32_t g_fork_taken[kMaxLockSets];

// Calls fn on every registered lock, in rank order (reverse: the last first); the
// counts recorded by prepare (taken), or the sets' counts now.
template <class Fn>
void for_each_lock(bool reverse, bool taken, Fn fn) {
  uint32_t n;
  const LockSet* const* sets = lock_sets(&n);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t s = reverse ? n - 1 - k : k;
    uint32_t count = taken ? g_fork_taken[s] : sets[s]->count();
    if (!taken) g_fork_taken[s] = count;
    for (uint32_t i = 0; i < count; i++) fn(sets[s]->at(reverse ? count - 1 - i : i));
  }
}

}  // namespace

void fork_prepare() {
  g_fork_interrupted = t_locks_held != 0;
  if (g_fork_interrupted) return;
  // Every lock stays held until fork_parent or fork_child: past what the analysis
  // follows.
  for_each_lock(false, false, [](Mutex* m) USLAB_NO_THREAD_SAFETY_ANALYSIS { m->lock(); });
  deferred_fork_prepare();
}

void fork_parent() {
  if (g_fork_interrupted) return;
  for_each_lock(true, true, [](Mutex* m) USLAB_NO_THREAD_SAFETY_ANALYSIS { m->unlock(); });
}

void fork_child() {
  forget_current_tid();
  // After an interrupted fork, every lock there is now (prepare recorded nothing).
  for_each_lock(false, !g_fork_interrupted, [](Mutex* m) { m->reset_after_fork(); });
  lock_order_reset();
  deferred_fork_child(!g_fork_interrupted);
  background_fork_child();
  live_fork_child();
  if (g_fork_interrupted) return;
  t_locks_held = 0;  // the locks prepare took were reset above
  thread_cache_after_fork_child();
}

}  // namespace uslab::heap
