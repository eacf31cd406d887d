// core/platform/lock_table.cc — the registry of LockSets (lock_table.h) and, in
// debug-check builds, the per-thread check of the rank order.
//
// Locking: the sorted table is built once, under sort_lock_ (a word taken with a
// compare-and-swap, not a Mutex: it precedes every rank) and published with a
// release store; readers use it without a lock. The debug stack is per thread.
#include "core/platform/lock_table.h"

#include <atomic>

#include "core/platform/mutex.h"
#include "core/platform/os.h"

// The linker's bounds of the registry's section (hidden: this library's own).
extern "C" const uslab::LockSet* const __start_uslab_lock_sets[]
    __attribute__((visibility("hidden")));
extern "C" const uslab::LockSet* const __stop_uslab_lock_sets[]
    __attribute__((visibility("hidden")));

namespace uslab {
namespace {

const LockSet* sorted_[kMaxLockSets];
uint32_t nsorted_ = 0;
std::atomic<bool> sorted_ready_{false};
std::atomic<uint32_t> sort_lock_{0};

void sort_sets() {
  uint32_t expected = 0;
  while (!sort_lock_.compare_exchange_weak(expected, 1, std::memory_order_acquire)) {
    expected = 0;
    os::cpu_relax();
  }
  if (!sorted_ready_.load(std::memory_order_relaxed)) {
    uint32_t n = 0;
    for (const LockSet* const* ref = __start_uslab_lock_sets; ref < __stop_uslab_lock_sets; ref++) {
      const LockSet* s = *ref;
      if (n == kMaxLockSets) os::fatal("uslab: more than %u lock sets\n", kMaxLockSets);
      // Insertion by rank; sets of one rank keep the link order.
      uint32_t i = n++;
      while (i > 0 && sorted_[i - 1]->rank > s->rank) {
        sorted_[i] = sorted_[i - 1];
        i--;
      }
      sorted_[i] = s;
    }
    nsorted_ = n;
    sorted_ready_.store(true, std::memory_order_release);
  }
  sort_lock_.store(0, std::memory_order_release);
}

}  // namespace

const char* lock_rank_name(LockRank r) {
  static constexpr const char* kNames[] = {"none",
                                           "mallctl",
                                           "sampler",
                                           "topology print",
                                           "stack capture",
                                           "object-cache registry",
                                           "deferred slots init",
                                           "grace init",
                                           "deferred slot",
                                           "deferred queue",
                                           "thread-cache registry",
                                           "per-CPU init",
                                           "rseq init",
                                           "CPU",
                                           "depot",
                                           "central list",
                                           "huge cache",
                                           "page heap",
                                           "memory limit",
                                           "guard pool",
                                           "metadata pool",
                                           "metadata arena",
                                           "page map",
                                           "shard map",
                                           "profiler"};
  static_assert(sizeof kNames / sizeof kNames[0] == static_cast<size_t>(LockRank::kProfiler) + 1);
  auto i = static_cast<size_t>(r);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "?";
}

const LockSet* const* lock_sets(uint32_t* n) {
  if (!sorted_ready_.load(std::memory_order_acquire)) sort_sets();
  *n = nsorted_;
  return sorted_;
}

LockRank lock_rank_of(const Mutex* m) {
  uint32_t n;
  const LockSet* const* sets = lock_sets(&n);
  for (uint32_t k = 0; k < n; k++)
    for (uint32_t i = 0, c = sets[k]->count(); i < c; i++)
      if (sets[k]->at(i) == m) return sets[k]->rank;
  return LockRank::kNone;
}

#if USLAB_DEBUG_CHECKS
namespace {

// The locks this thread holds, in the order taken (a fork's prepare handler holds
// every one: the stack keeps the last rank beyond its depth).
constexpr uint32_t kMaxHeld = 32;
__thread const Mutex* t_held[kMaxHeld];
__thread uint32_t t_nheld;
__thread LockRank t_top_rank;  // the highest rank held (kNone: none)
__thread uint32_t t_overflow;  // locks held beyond the stack

}  // namespace

void lock_order_enter(const Mutex* m, bool trying) {
  uint8_t known = m->debug_rank_.load(std::memory_order_relaxed);
  if (known == Mutex::kUnrankedMark) return;
  if (known == 0) {
    LockRank found = lock_rank_of(m);
    if (found == LockRank::kNone)
      os::fatal("uslab: the lock at %p is not in the lock registry (USLAB_LOCK_SET)\n",
                static_cast<const void*>(m));
    known = static_cast<uint8_t>(found);
    m->debug_rank_.store(known, std::memory_order_relaxed);
  }
  auto r = static_cast<LockRank>(known);
  if (!trying && t_top_rank > r)
    os::fatal("uslab: lock order: taking a %s lock (rank %u) while holding a %s lock (rank %u)\n",
              lock_rank_name(r), static_cast<unsigned>(r), lock_rank_name(t_top_rank),
              static_cast<unsigned>(t_top_rank));
  if (r > t_top_rank) t_top_rank = r;
  if (t_nheld < kMaxHeld)
    t_held[t_nheld++] = m;
  else
    t_overflow++;
}

void lock_order_reset() {
  t_nheld = 0;
  t_overflow = 0;
  t_top_rank = LockRank::kNone;
}

void lock_order_exit(const Mutex* m) {
  if (m->debug_rank_.load(std::memory_order_relaxed) == Mutex::kUnrankedMark) return;
  uint32_t i = t_nheld;
  while (i > 0 && t_held[i - 1] != m) i--;
  if (i == 0) {  // one of those beyond the stack (or taken before a fork's reset)
    if (t_overflow) t_overflow--;
    return;
  }
  for (; i < t_nheld; i++) t_held[i - 1] = t_held[i];
  t_nheld--;
  // Locks beyond the stack are still held: their ranks stay counted.
  LockRank top = t_overflow ? t_top_rank : LockRank::kNone;
  for (uint32_t k = 0; k < t_nheld; k++) {
    auto rk = static_cast<LockRank>(t_held[k]->debug_rank_.load(std::memory_order_relaxed));
    if (rk > top) top = rk;
  }
  t_top_rank = top;
}

#else

void lock_order_reset() {}

#endif

}  // namespace uslab
