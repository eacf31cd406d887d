/* bench/rss.c — resident memory over time, for memory-return workloads.
 *
 * usage: rss peak|frag IDLE_MS [trim|move]
 *   peak  a baseline, then a peak of ~256 MB in objects of 16 B … 64 KiB (random
 *         sizes, all written), all freed in random order, then IDLE_MS of light
 *         activity (a few hundred small malloc/free every millisecond, as an idle
 *         server does)
 *   frag  fragmentation: 6 phases, each allocating ~64 MB from its own size mix
 *         (16 B … 32 KiB) and freeing a random 80% of everything live, so that
 *         survivors pin pages; then everything freed and IDLE_MS of light activity
 *   trim  call malloc_trim(0) right after the frees
 *   move  frag: the thread moves to another CPU before phase 2 (sched_setaffinity),
 *         as the scheduler moves a program: per-CPU heaps must not strand what the
 *         first CPU freed
 * A sampler thread reads /proc/self/statm every 10 ms. Prints one JSON line: the
 * samples (ms, RSS KiB), RSS before the peak, the peak, RSS at the end, and the time
 * after the frees until RSS came within max(10%, 2 MiB) of the pre-peak level. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proc_self.h"

enum { kMaxSamples = 4096 };
static long sample_ms[kMaxSamples], sample_kib[kMaxSamples];
static atomic_int nsamples, stop;
static double t_start;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *sampler(void *arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    int i = atomic_load(&nsamples);
    if (i < kMaxSamples) {
      sample_ms[i] = (long)(now_ms() - t_start);
      sample_kib[i] = rss_kib();
      atomic_store(&nsamples, i + 1);
    }
    usleep(10000);
  }
  return NULL;
}

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Sizes 16 B … max, log-uniform (many small, some large). */
static size_t random_size(uint64_t *s, int max_shift) {
  int shift = 4 + (int)(rnd(s) % (uint64_t)(max_shift - 3));
  size_t lo = (size_t)1 << (shift - 1);
  return lo + rnd(s) % lo;
}

static void idle(long ms, uint64_t *s) {
  void *keep[64] = {0};
  double end = now_ms() + ms;
  while (now_ms() < end) {
    for (int i = 0; i < 300; i++) {
      unsigned k = rnd(s) % 64;
      free(keep[k]);
      keep[k] = malloc(random_size(s, 10));
    }
    usleep(1000);
  }
  for (int k = 0; k < 64; k++) free(keep[k]);
}

/* Pins the thread to an allowed CPU other than the one it runs on (none: stays). */
static void move_to_another_cpu(void) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int here = sched_getcpu();
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (c != here && CPU_ISSET(c, &allowed)) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      sched_setaffinity(0, sizeof one, &one);
      return;
    }
}

static void shuffle(void **v, size_t n, uint64_t *s) {
  for (size_t i = n; i > 1; i--) {
    size_t j = rnd(s) % i;
    void *t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: rss peak|frag IDLE_MS [trim|move]\n");
    return 2;
  }
  int frag = !strcmp(argv[1], "frag");
  long idle_ms = atol(argv[2]);
  int trim = argc > 3 && !strcmp(argv[3], "trim");
  int move = argc > 3 && !strcmp(argv[3], "move");
  uint64_t s = 88172645463325252ull;
  t_start = now_ms();
  pthread_t t;
  pthread_create(&t, NULL, sampler, NULL);
  idle(200, &s);
  long before = rss_kib();
  enum { kMax = 1 << 20 };
  void **live = malloc(kMax * sizeof(void *));
  size_t nlive = 0;
  if (!frag) {
    size_t bytes = 0;
    while (bytes < (256u << 20) && nlive < kMax) {
      size_t size = random_size(&s, 16);
      char *p = malloc(size);
      memset(p, 1, size);
      live[nlive++] = p;
      bytes += size;
    }
  } else {
    for (int phase = 0; phase < 6; phase++) {
      if (move && phase == 2) move_to_another_cpu();
      size_t bytes = 0;
      int max_shift = 8 + phase * 2 > 15 ? 15 : 8 + phase * 2;  /* each phase its own mix */
      while (bytes < (64u << 20) && nlive < kMax) {
        size_t size = random_size(&s, max_shift);
        char *p = malloc(size);
        memset(p, 2, size);
        live[nlive++] = p;
        bytes += size;
      }
      shuffle(live, nlive, &s);
      size_t keep = nlive / 5;
      for (size_t i = keep; i < nlive; i++) free(live[i]);
      nlive = keep;
    }
  }
  long peak = peak_rss_kib();
  shuffle(live, nlive, &s);
  for (size_t i = 0; i < nlive; i++) free(live[i]);
  free(live);
  if (trim) malloc_trim(0);
  long freed_at = (long)(now_ms() - t_start);
  idle(idle_ms, &s);
  long end = rss_kib();
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  long slack = before / 10 > 2048 ? before / 10 : 2048;
  long back_ms = -1;
  int n = atomic_load(&nsamples);
  for (int i = 0; i < n; i++)
    if (sample_ms[i] >= freed_at && sample_kib[i] <= before + slack) {
      back_ms = sample_ms[i] - freed_at;
      break;
    }
  printf("{\"workload\": \"%s\", \"trim\": %d, \"before_kib\": %ld, \"peak_kib\": %ld, "
         "\"end_kib\": %ld, \"freed_at_ms\": %ld, \"back_ms\": %ld, \"samples\": [",
         argv[1], trim, before, peak, end, freed_at, back_ms);
  for (int i = 0; i < n; i++) printf("%s[%ld, %ld]", i ? ", " : "", sample_ms[i], sample_kib[i]);
  printf("]}\n");
  return 0;
}
