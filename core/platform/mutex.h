// core/platform/mutex.h — the lock of every allocator slow path.
//
// Owns: Mutex, a futex lock whose word holds its owner's thread id (and a waiters
// bit), taken with one compare-and-swap. It never allocates, so it works before
// constructors and in a forked child; it is constant-initialised (zero = unlocked).
//
// Recording the owner in the lock word gives two things a plain futex lock cannot:
//  - a signal handler that re-enters a slow path on a thread that already holds the
//    lock is reported and aborts instead of hanging (gperftools#1094);
//  - a count of the locks each thread holds or is taking (t_locks_held) tells fork's
//    prepare handler that it runs in a signal handler that interrupted a slow path
//    (glibc tst-mallocfork2): it then takes no lock at all, since waiting for one
//    another thread holds could wait on a lock this thread holds (heap::fork_prepare).
//
// Every allocator Mutex is registered, with its rank, in the lock table
// (lock_table.h), where fork finds it; the Mutex itself stays one zero word, so the
// big arrays of them (depots, central lists) stay in .lbss. Mutexes outside the
// allocator (tests) are made with kUnranked. With USLAB_DEBUG_CHECKS (meson
// -Ddebug_checks=true, the sanitizer and fuzz builds), lock() checks the rank order
// and that the lock is registered (lock_order_enter/exit in mutex.cc, a small
// per-thread stack of the locks held), and held() backs the *_locked functions' USLAB_DCHECKs.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/platform/lock_table.h"
#include "core/platform/os.h"
#include "core/platform/thread_annotations.h"

namespace uslab {

// The id of the calling thread (cached in TLS; reset in a forked child). Inline:
// every lock asks for it, and a call showed in N x alloc / N x free.
extern __thread uint32_t t_tid __attribute__((tls_model("initial-exec")));
uint32_t current_tid_slow();
inline uint32_t current_tid() {
  uint32_t tid = t_tid;
  return __builtin_expect(tid != 0, 1) ? tid : current_tid_slow();
}
void forget_current_tid();

// How many Mutexes the calling thread holds or is taking. Counted before the lock
// word is claimed and after it is released (with compiler fences: only a signal
// handler on the same thread reads it), so a handler never sees 0 while its thread
// holds a lock; it may see 1 while the thread merely waits for one.
extern __thread uint32_t t_locks_held __attribute__((tls_model("initial-exec")));
inline void note_lock_enter() {
  t_locks_held = t_locks_held + 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline void note_lock_exit() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_locks_held = t_locks_held - 1;
}

#if USLAB_DEBUG_CHECKS
// Checks that m may be taken now (rank order; registered) unless trying, and pushes it
// on the thread's stack of held locks; exit pops it.
void lock_order_enter(const Mutex* m, bool trying);
void lock_order_exit(const Mutex* m);
#endif
// A forked child's thread holds none of the locks fork reset (no-op without checks).
void lock_order_reset();

class USLAB_CAPABILITY("mutex") Mutex {
 public:
  struct Unranked {};
  static constexpr Unranked kUnranked{};

  constexpr Mutex() = default;
#if USLAB_DEBUG_CHECKS
  constexpr explicit Mutex(Unranked) : debug_rank_(kUnrankedMark) {}
#else
  constexpr explicit Mutex(Unranked) {}
#endif
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Whether the calling thread holds it (for checks: a relaxed load).
  bool held() const { return (word_.load(std::memory_order_relaxed) & ~kWaiters) == current_tid(); }

  void lock() USLAB_ACQUIRE() {
    note_lock_enter();
#if USLAB_DEBUG_CHECKS
    // After the count: a fork from a signal handler here must see this thread as
    // taking a lock (the stack already names it).
    lock_order_enter(this, false);
#endif
    uint32_t expected = 0;
    uint32_t me = current_tid();
    if (__builtin_expect(!word_.compare_exchange_strong(expected, me, std::memory_order_acquire,
                                                        std::memory_order_relaxed),
                         0))
      lock_slow(me);
  }

  // Takes the lock only if it is free now. A plain load first: a failed CAS would
  // still pull the owner's line away from it.
  bool try_lock() USLAB_TRY_ACQUIRE(true) {
    note_lock_enter();
    uint32_t expected = 0;
    if (word_.load(std::memory_order_relaxed) == 0 &&
        word_.compare_exchange_strong(expected, current_tid(), std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
#if USLAB_DEBUG_CHECKS
      lock_order_enter(this, true);
#endif
      return true;
    }
    note_lock_exit();
    return false;
  }

  void unlock() USLAB_RELEASE() {
#if USLAB_DEBUG_CHECKS
    lock_order_exit(this);
#endif
    if (word_.exchange(0, std::memory_order_release) & kWaiters)
      os::futex_wake(reinterpret_cast<uint32_t*>(&word_), 1);
    note_lock_exit();
  }

  // Only for a forked child, where the owner (if any) no longer exists.
  void reset_after_fork() { word_.store(0, std::memory_order_relaxed); }

 private:
  // The word is 0 when free, else the owner's thread id, with kWaiters set when a
  // thread may be sleeping on it (thread ids stay below 2^22, the kernel's pid_max).
  static constexpr uint32_t kWaiters = uint32_t{1} << 31;

  void lock_slow(uint32_t me) {
    for (int spin = 0; spin < 100; spin++) {
      uint32_t v = word_.load(std::memory_order_relaxed);
      if ((v & ~kWaiters) == me)
        os::fatal(
            "uslab: allocator re-entered while this thread holds one of its locks "
            "(malloc from a signal handler that interrupted malloc?)\n");
      if (v == 0 &&
          word_.compare_exchange_weak(v, me, std::memory_order_acquire, std::memory_order_relaxed))
        return;
      os::cpu_relax();
    }
    for (;;) {
      uint32_t v = word_.load(std::memory_order_relaxed);
      if (v == 0) {
        // Others may still sleep: take it with the waiters bit so unlock wakes them.
        if (word_.compare_exchange_weak(v, me | kWaiters, std::memory_order_acquire,
                                        std::memory_order_relaxed))
          return;
        continue;
      }
      if (!(v & kWaiters) &&
          !word_.compare_exchange_weak(v, v | kWaiters, std::memory_order_relaxed,
                                       std::memory_order_relaxed))
        continue;
      os::futex_wait(reinterpret_cast<uint32_t*>(&word_), v | kWaiters);
    }
  }

  std::atomic<uint32_t> word_{0};
#if USLAB_DEBUG_CHECKS
  // Its rank, found in the registry on the first lock (0: not yet; kUnrankedMark:
  // outside the allocator, not checked).
  static constexpr uint8_t kUnrankedMark = 0xff;
  friend void lock_order_enter(const Mutex*, bool);
  friend void lock_order_exit(const Mutex*);
  mutable std::atomic<uint8_t> debug_rank_{0};
#endif
};

class USLAB_SCOPED_CAPABILITY LockGuard {
 public:
  explicit LockGuard(Mutex& m) USLAB_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~LockGuard() USLAB_RELEASE() { m_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& m_;
};

}  // namespace uslab
