// fork's handlers (heap::fork_prepare/parent/child) and the per-thread lock count
// they decide by (core/platform/mutex.h). The preloaded library's forks from busy
// threads and signal handlers are exercised by stress/fork.c; here the case that
// deadlocked there is built deterministically: the forking thread holds one of the
// heap's locks while another thread holds a lock earlier in the order and waits for it.
#include <catch2/catch.hpp>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "core/alloc/central.h"
#include "core/alloc/page_heap.h"
#include "core/core.h"
#include "core/platform/lock_table.h"
#include "test/unit/child.h"
#include "test/unit/every_kind.h"

using namespace uslab;

namespace {

// A fork the way the preloaded library's pthread_atfork handlers run it.
pid_t fork_with_handlers() {
  heap::fork_prepare();
  pid_t pid = fork();
  if (pid == 0)
    heap::fork_child();
  else
    heap::fork_parent();
  return pid;
}

}  // namespace

TEST_CASE("a thread's lock count is 0 outside the allocator and counts what it holds") {
  REQUIRE(t_locks_held == 0);
  alloc_and_free_every_kind();
  heap::decay_now();
  CHECK(t_locks_held == 0);

  Mutex m{Mutex::kUnranked};
  {
    LockGuard g(m);
    CHECK(t_locks_held == 1);
    uint32_t seen = 99;
    bool took = true;
    std::thread([&] {  // a failed try_lock leaves the count as it was
      took = m.try_lock();
      seen = t_locks_held;
    }).join();
    CHECK_FALSE(took);
    CHECK(seen == 0);
  }
  CHECK(t_locks_held == 0);
  REQUIRE(m.try_lock());
  CHECK(t_locks_held == 1);
  m.unlock();
  CHECK(t_locks_held == 0);

  uint32_t worker = 99;
  std::thread([&] {
    for (int i = 0; i < 1000; i++) heap::free(heap::alloc(static_cast<size_t>(i) * 97 + 1));
    worker = t_locks_held;
  }).join();
  CHECK(worker == 0);
}

TEST_CASE("fork inside a slow path takes no lock, so a thread waiting on the one it holds "
          "cannot deadlock it") {
  // The child of this process plays the program: its main thread holds a page heap's
  // lock (as a signal handler that interrupted a large allocation would find it),
  // another thread holds a central list's lock (earlier in the order) and waits for
  // the page heap's, as the background thread's tick does. Taking the locks in order
  // would wait forever on the central list's; the deadline turns that into SIGALRM.
  int st = in_child(fork_with_handlers, [] {
    pthread_atfork(heap::fork_prepare, heap::fork_parent, heap::fork_child);
    Mutex& page_heap = g_page_heap[0].lock();
    Mutex& central = g_central[0][1].lock();
    page_heap.lock();
    std::atomic<bool> holding{false};
    std::thread waiter([&] {
      LockGuard c(central);
      holding = true;
      LockGuard p(page_heap);
    });
    while (!holding) usleep(1000);
    usleep(20000);  // let it sleep on the page heap's lock
    pid_t pid = fork();
    if (pid == 0) _exit(7);  // only async-signal-safe calls in this child
    int cst = 0;
    if (pid < 0 || waitpid(pid, &cst, 0) != pid || !WIFEXITED(cst) || WEXITSTATUS(cst) != 7)
      return 2;
    if (t_locks_held != 1) return 3;
    page_heap.unlock();
    waiter.join();
    // Nothing was left taken: a fork from outside the allocator still works.
    pid = fork();
    if (pid == 0) {
      heap::free(heap::alloc(300000));
      _exit(t_locks_held == 0 ? 8 : 9);
    }
    if (pid < 0 || waitpid(pid, &cst, 0) != pid || !WIFEXITED(cst) || WEXITSTATUS(cst) != 8)
      return 4;
    return t_locks_held == 0 ? 0 : 5;
  });
  CHECK(st == 0);
}

TEST_CASE("a fork from outside the allocator, with a thread busy in it, leaves a usable heap") {
  // 50 forks that allocate up to 2 MB each: longer than the usual deadline in an
  // emulated machine; a deadlock still ends it.
  int st = in_child(fork_with_handlers, [] {
    std::atomic<bool> stop{false};
    std::thread busy([&] {
      while (!stop) heap::free(heap::alloc(5000));
    });
    int bad = 0;
    for (int i = 0; i < 50 && !bad; i++) {
      void* before = heap::alloc(200);
      pid_t pid = fork_with_handlers();
      if (pid == 0) {
        heap::free(before);
        for (size_t s = 16; s < 2000000; s *= 3) heap::free(heap::alloc(s));
        _exit(t_locks_held == 0 ? 0 : 1);
      }
      int cst = 0;
      if (pid < 0 || waitpid(pid, &cst, 0) != pid || !WIFEXITED(cst) || WEXITSTATUS(cst) != 0)
        bad = 1;
      heap::free(before);
    }
    stop = true;
    busy.join();
    return bad ? 2 : t_locks_held == 0 ? 0 : 3;
  }, 120);
  CHECK(st == 0);
}

TEST_CASE("fork takes every lock in the lock table: one another thread holds delays it, "
          "and the child finds it free") {
  // Make the sets that grow (per-CPU metadata, deferred-free slots, object caches).
  alloc_and_free_every_kind();
  heap::free_deferred(heap::alloc(64));
  heap::deferred_barrier();
  uint32_t n = 0;
  const LockSet* const* sets = lock_sets(&n);
  int tried = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t count = sets[k]->count();
    for (uint32_t i : {0u, count - 1}) {
      if (count == 0) break;
      Mutex* m = sets[k]->at(i);
      INFO(lock_rank_name(sets[k]->rank) << " lock " << i << " of " << count);
      std::atomic<int> phase{0};  // 1: held; 2: about to release
      std::atomic<bool> forked{false};
      std::thread holder([&] {
        m->lock();
        phase = 1;
        usleep(20000);
        phase = 2;
        m->unlock();
        // Alive until the fork is done: ThreadSanitizer reports a thread that ended
        // unjoined in the child (a "thread leak", and exit status 66).
        while (!forked.load()) usleep(100);
      });
      while (phase.load() == 0) usleep(100);
      pid_t pid = fork_with_handlers();
      if (pid == 0) _exit(m->try_lock() ? 0 : 1);
      forked = true;
      bool waited = phase.load() == 2;  // prepare could not take it before the release
      int st = 0;
      REQUIRE(waitpid(pid, &st, 0) == pid);
      holder.join();
      CHECK(waited);
      CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
      tried++;
      if (count == 1) break;
    }
  }
  CHECK(tried >= 20);
}
