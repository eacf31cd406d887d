/* bench/idle.c — what a program that goes quiet after a peak keeps (uslab bench idle).
 *
 * usage: idle none|large|small PEAK_MB IDLE_MS
 *
 * A single-threaded program takes a baseline, allocates a peak of PEAK_MB in small
 * objects (16–512 B, random sizes, all written), frees them in an order unrelated to
 * allocation, and then for IDLE_MS does, every 500 ms:
 *   none   nothing: no allocator call at all
 *   large  one malloc/free of 100 KB (a program that only makes large calls)
 *   small  100 malloc(64)/free (calls its caches serve)
 * RSS is sampled every 10 ms from /proc with open/read (a sample makes no allocator
 * call). Prints one JSON line: the samples (ms after the frees, RSS KiB), RSS before
 * the peak, at the peak and at the end, the time after the frees until RSS came
 * within max(2 MiB, 10%) of the level before the peak (-1: never), and what the
 * allocator's other threads (uslab's uslab-bg, jemalloc's background threads) cost:
 * their CPU time over the idle period, and their context switches in its last
 * 10 s (wake-ups while idle). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "proc_self.h"

enum { kMaxSamples = 8192 };
static long sample_ms[kMaxSamples], sample_kib[kMaxSamples];

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void use(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* The allocator's threads: every thread but this one. */
struct others {
  long self, cpu_ticks, switches;
};
static void add_other(long tid, void *arg) {
  struct others *o = arg;
  if (tid == o->self) return;
  long c = thread_cpu_ticks(tid), s = thread_switches(tid);
  if (c > 0) o->cpu_ticks += c;
  if (s > 0) o->switches += s;
}
static struct others others_now(void) {
  struct others o = {gettid(), 0, 0};
  for_each_task(add_other, &o);
  return o;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: idle none|large|small PEAK_MB IDLE_MS\n");
    return 2;
  }
  const char *mode = argv[1];
  size_t peak_mb = strtoul(argv[2], NULL, 10);
  long idle_ms = atol(argv[3]);
  size_t n = peak_mb * 1024 * 1024 / 264; /* 264: the mean size, with its rounding */
  /* The pointer array is the program's own memory, mapped and written before the
   * baseline: only the allocator's memory moves RSS after that. */
  void **objs = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (objs == MAP_FAILED) return 1;
  memset(objs, 0, n * sizeof(void *));
  long before = rss_kib();
  uint64_t seed = 88172645463325252ull;
  for (size_t i = 0; i < n; i++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    size_t size = 16 + seed % 497;
    objs[i] = malloc(size);
    if (!objs[i]) return 1;
    memset(objs[i], (int)i, size);
  }
  long peak = rss_kib();
  for (size_t i = 0; i < n; i++) free(objs[i * 7919 % n]); /* n is not a multiple of 7919 */
  double t0 = now_ms();
  struct others o0 = others_now(), o_tail = o0;
  long back_ms = -1, allowed = before + (before / 10 > 2048 ? before / 10 : 2048);
  int ns = 0, tail_taken = 0;
  double next_call = 0;
  for (;;) {
    double t = now_ms() - t0;
    if (t >= idle_ms) break;
    if (t >= next_call) {
      next_call += 500;
      if (!strcmp(mode, "large")) {
        char *p = malloc(100000);
        if (p) memset(p, 1, 100000);
        use(p);
        free(p);
      } else if (!strcmp(mode, "small")) {
        void *q[100];
        for (int i = 0; i < 100; i++) use(q[i] = malloc(64));
        for (int i = 0; i < 100; i++) free(q[i]);
      }
    }
    long kib = rss_kib();
    if (back_ms < 0 && kib <= allowed) back_ms = (long)t;
    if (ns < kMaxSamples) {
      sample_ms[ns] = (long)t;
      sample_kib[ns++] = kib;
    }
    if (!tail_taken && t >= idle_ms - 10000) { /* the last 10 s: wake-ups while idle */
      o_tail = others_now();
      tail_taken = 1;
    }
    struct timespec step = {0, 10 * 1000 * 1000};
    nanosleep(&step, NULL);
  }
  struct others o1 = others_now();
  long tick = sysconf(_SC_CLK_TCK);
  printf("{\"mode\": \"%s\", \"peak_mb\": %zu, \"idle_ms\": %ld, \"before_kib\": %ld, "
         "\"peak_kib\": %ld, \"end_kib\": %ld, \"back_ms\": %ld, \"threads_cpu_ms\": %ld, "
         "\"threads_switches_last_10s\": %ld, \"samples\": [",
         mode, peak_mb, idle_ms, before, peak, rss_kib(), back_ms,
         (o1.cpu_ticks - o0.cpu_ticks) * 1000 / tick, o1.switches - o_tail.switches);
  for (int i = 0; i < ns; i++) printf("%s[%ld, %ld]", i ? ", " : "", sample_ms[i], sample_kib[i]);
  printf("]}\n");
  return 0;
}
