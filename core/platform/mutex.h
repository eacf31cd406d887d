// core/platform/mutex.h — the lock of every allocator slow path.
//
// Owns: Mutex, a three-state futex lock (0 free, 1 held, 2 held with waiters) that
// records its owner thread. It never allocates, so it works before constructors and
// in a forked child; it is constant-initialised (a zeroed Mutex is unlocked).
//
// The owner record gives two things a plain futex lock cannot:
//  - a signal handler that re-enters a slow path on a thread that already holds the
//    lock is reported and aborts instead of hanging (gperftools#1094);
//  - fork's prepare handler can skip a lock its own thread holds (fork called from a
//    signal handler that interrupted malloc, glibc tst-mallocfork2) instead of deadlocking.
#pragma once

#include <atomic>
#include <cstdint>
#include <pthread.h>

#include "core/platform/os.h"

namespace uslab {

class Mutex {
 public:
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() {
    uint32_t expected = 0;
    if (__builtin_expect(!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                                         std::memory_order_relaxed),
                         0))
      lock_slow();
    owner_.store(self(), std::memory_order_relaxed);
  }

  bool try_lock() {
    uint32_t expected = 0;
    if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                        std::memory_order_relaxed))
      return false;
    owner_.store(self(), std::memory_order_relaxed);
    return true;
  }

  void unlock() {
    owner_.store(0, std::memory_order_relaxed);
    if (state_.exchange(0, std::memory_order_release) == 2)
      os::futex_wake(reinterpret_cast<uint32_t*>(&state_), 1);
  }

  bool held_by_me() const {
    return state_.load(std::memory_order_relaxed) != 0 &&
           owner_.load(std::memory_order_relaxed) == self();
  }

  // Only for a forked child, where the owner (if any) no longer exists.
  void reset_after_fork() {
    owner_.store(0, std::memory_order_relaxed);
    state_.store(0, std::memory_order_relaxed);
  }

 private:
  static uintptr_t self() { return static_cast<uintptr_t>(pthread_self()); }

  void lock_slow() {
    if (owner_.load(std::memory_order_relaxed) == self())
      os::fatal("uslab: allocator re-entered while this thread holds one of its locks "
                "(malloc from a signal handler that interrupted malloc?)\n");
    for (int spin = 0; spin < 100; spin++) {
      uint32_t expected = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(expected, 1, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return;
      os::cpu_relax();
    }
    while (state_.exchange(2, std::memory_order_acquire) != 0)
      os::futex_wait(reinterpret_cast<uint32_t*>(&state_), 2);
  }

  std::atomic<uint32_t> state_{0};
  std::atomic<uintptr_t> owner_{0};
};

class LockGuard {
 public:
  explicit LockGuard(Mutex& m) : m_(m) { m_.lock(); }
  ~LockGuard() { m_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  Mutex& m_;
};

}  // namespace uslab
