// core/platform/mutex.cc — the Mutex's per-thread words: the caller's thread id (the
// owner a lock records) and the count of locks it holds or is taking (mutex.h); in
// debug-check builds, the check of the rank order against the lock table.
// Locking: none; each word, and the debug stack of locks held, is its thread's own
// (initial-exec TLS).
#include "core/platform/mutex.h"

#include "core/platform/os.h"

#include <sys/syscall.h>

namespace uslab {

__thread uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;
__thread uint32_t t_locks_held __attribute__((tls_model("initial-exec"))) = 0;

uint32_t current_tid_slow() { return t_tid = static_cast<uint32_t>(os::syscall6(SYS_gettid)); }

void forget_current_tid() { t_tid = 0; }


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
