/* test/stress/idle_return.c — memory freed after a peak goes back to the OS within a
 * few decay periods although the program never calls the allocator again, when the
 * background thread runs (background_thread=true): it purges what stayed free for
 * decay_ms. (Without it, only a later slow path would.)
 *
 * With `fork`, the whole test runs in a child forked first: the thread must have been
 * restarted there (by the fork handler; the child has no other thread).
 *
 * With `pairs`, the program keeps calling malloc and free of one small size in
 * pairs, which its cache serves without ever missing, and no background thread runs:
 * the decay tick must come from the caches' hit counters.
 *
 * usage: idle_return DECAY_MS [fork|pairs]
 *        (run with USLAB_CONF=decay_ms=DECAY_MS,background_thread=true; for `pairs`
 *        without the thread) */
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/proc_self.h"
#include "test/common/check.h"

int main(int argc, char **argv) {
  require_uslab();
  long decay_ms = argc > 1 ? atol(argv[1]) : 400;
  if (argc > 2 && !strcmp(argv[2], "fork")) {
    pid_t pid = fork();
    if (pid > 0) {
      int st = 0;
      CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
      return check_done("idle_return (parent)");
    }
    CHECK(pid == 0);
    printf("idle_return: in a forked child\n");
  }
  long before = rss_kib();
  enum { kObjects = 24000 };
  static void *objs[kObjects];  /* not on the heap: only the peak should move RSS */
  uint64_t seed = 88172645463325252ull;
  size_t bytes = 0;
  for (int i = 0; i < kObjects; i++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    size_t size = 64 + seed % 8192;
    objs[i] = malloc(size);
    CHECK(objs[i] != NULL);
    if (objs[i]) memset(objs[i], i & 0xff, size);
    bytes += size;
  }
  long peak = rss_kib();
  for (int i = 0; i < kObjects; i++) {  /* in an order unrelated to allocation */
    int j = (int)((uint64_t)i * 7919 % kObjects);
    free(objs[j]);
  }
  long freed = rss_kib();
  /* No allocator call from here on (or only pairs): sleep or loop, and watch. */
  int pairs = argc > 2 && !strcmp(argv[2], "pairs");
  long now = freed, waited = 0;
  struct timespec step = {0, 50 * 1000 * 1000};
  while (waited < 10 * decay_ms && now > before + 16 * 1024) {
    if (pairs) {
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      do {
        for (int i = 0; i < 1000; i++) {
          void *p = malloc(40);
          __asm__ volatile("" : : "r"(p) : "memory");
          free(p);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
      } while ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 50);
    } else {
      nanosleep(&step, NULL);
    }
    waited += 50;
    now = rss_kib();
  }
  printf("idle_return: %zu MB allocated; RSS %ld KiB before, %ld at the peak, %ld after the "
         "frees, %ld after %ld ms %s (decay %ld ms)\n",
         bytes >> 20, before, peak, freed, now, waited,
         pairs ? "of malloc/free pairs" : "without a call", decay_ms);
  CHECK(peak > before + 64 * 1024);  /* the peak really happened */
  CHECK(now <= before + 16 * 1024);
  return check_done("idle_return");
}
