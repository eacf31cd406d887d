/* bench/micro.c — the seed-style microbenchmark: for each size, cycles (TSC) and ns
 * per operation of "N x alloc then N x free" (reported as the alloc and the free
 * phase; the alloc phase writes one byte of each object, as a program writes what it
 * allocates) and of an "alloc/free pair" loop, minimum and median over repeated runs.
 * It calls plain malloc/free, so the allocator is whatever is preloaded.
 * Objects never written sit on pages the kernel never mapped, where a prefetch of
 * the next object (uslab's pop) walks the page table on every call:
 * without the write, uslab's N x alloc of 4 KiB took 48-57 cycles with its prefetch
 * and 33 without, and its pair 62 in half the runs, a cost no program that uses what
 * it allocates pays.
 *
 * usage: micro [N] [REPS] [SIZE...]     prints one JSON object per (size, test)
 *        micro pairs N SIZE             N untimed alloc/free pairs, for counting
 *                                       instructions under callgrind
 *        micro batches N SIZE REPS      REPS untimed rounds of N x alloc then N x
 *                                       free, for the same
 *        micro pair-after K SIZE        the pair's cycles (minimum of 20 runs of
 *                                       100000) after three rounds of K x alloc then
 *                                       K x free: the state the rounds leave moves
 *                                       some allocators' pair (tcmalloc's) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double tsc_per_ns(void) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  uint64_t t0 = __rdtsc();
  do clock_gettime(CLOCK_MONOTONIC, &b);
  while ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec) < 50e6);
  uint64_t t1 = __rdtsc();
  return (double)(t1 - t0) / ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
}

static void report(const char *test, size_t size, double *v, int reps, double per_ns) {
  qsort(v, (size_t)reps, sizeof *v, cmp_double);
  double med = reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
  printf("{\"test\": \"%s\", \"size\": %zu, \"cycles_min\": %.1f, \"cycles_median\": %.1f, "
         "\"ns_min\": %.2f, \"ns_median\": %.2f}\n",
         test, size, v[0], med, v[0] / per_ns, med / per_ns);
}

/* n alloc/free pairs of size bytes: each object freed as soon as it is allocated. */
static void pairs(size_t n, size_t size) {
  for (size_t i = 0; i < n; i++) {
    void *p = malloc(size);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "pairs")) {
    size_t n = strtoul(argv[2], NULL, 10), size = strtoul(argv[3], NULL, 10);
    pairs(n, size);
    return 0;
  }
  if (argc == 5 && !strcmp(argv[1], "batches")) {
    size_t n = strtoul(argv[2], NULL, 10), size = strtoul(argv[3], NULL, 10);
    int reps = atoi(argv[4]);
    void **ptrs = calloc(n, sizeof *ptrs);
    for (int r = 0; r < reps; r++) {
      for (size_t i = 0; i < n; i++) ptrs[i] = malloc(size);
      for (size_t i = 0; i < n; i++) free(ptrs[i]);
    }
    free(ptrs);
    return 0;
  }
  if (argc == 4 && !strcmp(argv[1], "pair-after")) {
    size_t k = strtoul(argv[2], NULL, 10), size = strtoul(argv[3], NULL, 10);
    void **ptrs = calloc(k ? k : 1, sizeof *ptrs);
    for (int r = 0; r < 3; r++) {
      for (size_t i = 0; i < k; i++) {
        ptrs[i] = malloc(size);
        *(volatile char *)ptrs[i] = (char)i;
      }
      for (size_t i = 0; i < k; i++) free(ptrs[i]);
    }
    double best = 1e30;
    for (int r = 0; r < 20; r++) {
      uint64_t t0 = __rdtsc();
      pairs(100000, size);
      double c = (double)(__rdtsc() - t0) / 100000;
      if (c < best) best = c;
    }
    printf("{\"test\": \"pair after %zu\", \"size\": %zu, \"cycles_min\": %.1f}\n", k, size, best);
    free(ptrs);
    return 0;
  }
  size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 10000;
  int reps = argc > 2 ? atoi(argv[2]) : 31;
  size_t default_sizes[] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  size_t *sizes = default_sizes, nsizes = sizeof default_sizes / sizeof *default_sizes;
  if (argc > 3) {
    nsizes = (size_t)(argc - 3);
    sizes = calloc(nsizes, sizeof *sizes);
    for (size_t i = 0; i < nsizes; i++) sizes[i] = strtoul(argv[3 + i], NULL, 10);
  }
  double per_ns = tsc_per_ns();
  void **ptrs = calloc(n, sizeof *ptrs);
  double *va = calloc((size_t)reps, sizeof(double)), *vf = calloc((size_t)reps, sizeof(double)),
         *vp = calloc((size_t)reps, sizeof(double));
  for (size_t s = 0; s < nsizes; s++) {
    size_t size = sizes[s];
    for (int r = -2; r < reps; r++) { /* two warm-up rounds */
      uint64_t t0 = __rdtsc();
      for (size_t i = 0; i < n; i++) {
        ptrs[i] = malloc(size);
        *(volatile char *)ptrs[i] = (char)i;
      }
      uint64_t t1 = __rdtsc();
      for (size_t i = 0; i < n; i++) free(ptrs[i]);
      uint64_t t2 = __rdtsc();
      pairs(n, size);
      uint64_t t3 = __rdtsc();
      if (r < 0) continue;
      va[r] = (double)(t1 - t0) / (double)n;
      vf[r] = (double)(t2 - t1) / (double)n;
      vp[r] = (double)(t3 - t2) / (double)n;
    }
    report("N x alloc", size, va, reps, per_ns);
    report("N x free", size, vf, reps, per_ns);
    report("alloc/free pair", size, vp, reps, per_ns);
  }
  return 0;
}
