/* bench/hugechurn.c — a long-running dense heap that churns, where an allocator that
 * returns the holes between live objects splits the huge pages around them: MIB MiB
 * of objects of 16-64 KiB (runs of pages, every byte written); every 10 ms 1% of them,
 * at random, is freed and replaced by objects of new random sizes. Between the
 * replacements the program reads 8 bytes of a random line of a random object, each
 * read's address computed from the one before (a dependent chain: its cost is mostly
 * the TLB miss and page walk that 4 KiB pages need and 2 MiB pages mostly avoid).
 * Runs SECONDS; prints one JSON line: ns per read over the last quarter of the run,
 * the process's AnonHugePages (kB backed by huge pages) and RSS at the end, peak RSS.
 *
 * usage: hugechurn [SECONDS [MIB]] */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proc_self.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_random(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

static size_t random_size(void) { return (16 + next_random() % 49) << 10; }

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 8;
  size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 256;
  size_t n = (mib << 20) / (40 << 10);
  char **objs = calloc(n, sizeof *objs);
  size_t *sizes = calloc(n, sizeof *sizes);
  if (!objs || !sizes || n < 100) return 2;
  for (size_t i = 0; i < n; i++) {
    sizes[i] = random_size();
    if (!(objs[i] = malloc(sizes[i]))) return 2;
    memset(objs[i], (int)i, sizes[i]);
  }
  double start = now(), next_churn = start, timed_from = start + seconds * 0.75, t = start;
  uint64_t x = 1, reads = 0;
  size_t replaced = 0;
  while (t - start < seconds) {
    for (int k = 0; k < 4096; k++) {
      size_t i = (size_t)(x >> 17) % n;
      const char *p = objs[i] + (((size_t)x >> 3) % (sizes[i] >> 6)) * 64;
      x = x * 6364136223846793005ull + 1442695040888963407ull + *(const volatile uint64_t *)p;
    }
    if (t >= timed_from) reads += 4096;
    t = now();
    if (t < next_churn) continue;
    next_churn += 0.010;
    for (size_t k = 0; k < n / 100; k++) {
      size_t i = next_random() % n;
      free(objs[i]);
      sizes[i] = random_size();
      if (!(objs[i] = malloc(sizes[i]))) return 2;
      memset(objs[i], (int)k, sizes[i]);
      replaced++;
    }
  }
  double elapsed = t - timed_from;
  printf("{\"objects\": %zu, \"replaced\": %zu, \"ns_per_read\": %.2f, \"anon_huge_kib\": %ld, "
         "\"rss_kib\": %ld, \"peak_rss_kib\": %ld, \"end\": %d}\n",
         n, replaced, elapsed * 1e9 / (double)(reads ? reads : 1), anon_huge_kib(), rss_kib(),
         peak_rss_kib(), (int)(x & 1));
  for (size_t i = 0; i < n; i++) free(objs[i]);
  free(objs);
  free(sizes);
  return 0;
}
