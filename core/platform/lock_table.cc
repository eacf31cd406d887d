// core/platform/lock_table.cc — the registry of LockSets (lock_table.h); the check
// of the rank order, which reads it, is the Mutex's (mutex.cc).
//
// Locking: the sorted table is built once, under sort_lock_ (a word taken with a
// compare-and-swap, not a Mutex: it precedes every rank) and published with a
// release store; readers use it without a lock.
#include "core/platform/lock_table.h"

#include <atomic>

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

}  // namespace uslab
