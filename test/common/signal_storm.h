/* test/common/signal_storm.h — a SIGALRM storm that reaches the threads working inside
 * the allocator, on any number of CPUs.
 *
 * setitimer's signal goes to the process, and the kernel offers a process-directed
 * signal to the main thread first whenever that thread has none pending. On a machine
 * with idle CPUs a main thread asleep in pthread_join or nanosleep therefore wakes for
 * every one, and the workers, whose restartable sections the storm is there to abort,
 * see none. On 16 CPUs the churn test's main thread took them all (only on 2 busy CPUs
 * did its wake-ups lag enough for workers to get some), and its relative nanosleep,
 * cut every 50 µs and restarted a little later each time, never ended.
 *
 * storm_start() installs the handler, blocks the signal in the calling (main) thread,
 * which the threads it creates inherit, and starts the timer; each worker calls
 * storm_worker() first thing, so the kernel can deliver only to workers. */
#ifndef USLAB_TEST_SIGNAL_STORM_H
#define USLAB_TEST_SIGNAL_STORM_H

#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include "test/common/check.h"

static inline void storm_mask(int how) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGALRM);
  CHECK(pthread_sigmask(how, &set, NULL) == 0);
}

static inline void storm_start(void (*handler)(int), long period_us) {
  struct sigaction sa = {0};
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
  storm_mask(SIG_BLOCK);
  struct itimerval it = {{0, period_us}, {0, period_us}};
  CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
}

/* In each worker, before its first allocation. */
static inline void storm_worker(void) { storm_mask(SIG_UNBLOCK); }

static inline void storm_stop(void) {
  struct itimerval off = {{0, 0}, {0, 0}};
  CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
}

#endif
