/* bench/bulk.c — the seed table of the kernel's bulk API patches: for each bulk size,
 * TSC cycles per object of "alloc n objects, free them" (64-byte objects), minimum
 * and median over repetitions:
 *   single        malloc/free one call per object (any allocator)
 *   bulk          uslab_alloc_bulk / uslab_free_bulk (uslab only)
 *   cache-bulk    uslab_cache_alloc_bulk / uslab_cache_free_bulk on a 64-byte cache
 * The uslab functions are looked up with dlsym, so the program runs under any
 * preloaded allocator and prints only the single-call rows there.
 *
 * usage: bulk [REPS]      prints one JSON object per (test, bulk size) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

typedef size_t (*alloc_bulk_fn)(size_t, size_t, void **);
typedef void (*free_bulk_fn)(size_t, void **);
typedef void *(*cache_create_fn)(const char *, size_t, size_t, unsigned, void (*)(void *));
typedef size_t (*cache_alloc_bulk_fn)(void *, size_t, void **);
typedef void (*cache_free_bulk_fn)(void *, size_t, void **);

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void report(const char *test, size_t n, double *v, int reps) {
  qsort(v, (size_t)reps, sizeof *v, cmp_double);
  printf("{\"test\": \"%s\", \"bulk\": %zu, \"cycles_min\": %.1f, \"cycles_median\": %.1f}\n", test,
         n, v[0], v[reps / 2]);
}

enum { kObjects = 4096 }; /* objects moved per measurement, in bulks of n */

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 31;
  size_t bulks[] = {1, 2, 3, 4, 8, 16, 30, 32, 34, 48, 64, 128, 158, 250};
  alloc_bulk_fn alloc_bulk = (alloc_bulk_fn)dlsym(RTLD_DEFAULT, "uslab_alloc_bulk");
  free_bulk_fn free_bulk = (free_bulk_fn)dlsym(RTLD_DEFAULT, "uslab_free_bulk");
  cache_create_fn cache_create = (cache_create_fn)dlsym(RTLD_DEFAULT, "uslab_cache_create");
  cache_alloc_bulk_fn cache_alloc_bulk =
      (cache_alloc_bulk_fn)dlsym(RTLD_DEFAULT, "uslab_cache_alloc_bulk");
  cache_free_bulk_fn cache_free_bulk =
      (cache_free_bulk_fn)dlsym(RTLD_DEFAULT, "uslab_cache_free_bulk");
  void *cache = cache_create ? cache_create("bench-64", 64, 0, 0, NULL) : NULL;
  void *objs[256];
  double *v = calloc((size_t)reps, sizeof *v);
  for (size_t b = 0; b < sizeof bulks / sizeof *bulks; b++) {
    size_t n = bulks[b], rounds = kObjects / n;
    for (int r = -2; r < reps; r++) {
      uint64_t t0 = __rdtsc();
      for (size_t k = 0; k < rounds; k++) {
        for (size_t i = 0; i < n; i++) objs[i] = malloc(64);
        __asm__ volatile("" : : "r"(objs) : "memory");
        for (size_t i = 0; i < n; i++) free(objs[i]);
      }
      if (r >= 0) v[r] = (double)(__rdtsc() - t0) / (double)(rounds * n);
    }
    report("single", n, v, reps);
    if (alloc_bulk && free_bulk) {
      for (int r = -2; r < reps; r++) {
        uint64_t t0 = __rdtsc();
        for (size_t k = 0; k < rounds; k++) {
          if (alloc_bulk(64, n, objs) != n) return 1;
          __asm__ volatile("" : : "r"(objs) : "memory");
          free_bulk(n, objs);
        }
        if (r >= 0) v[r] = (double)(__rdtsc() - t0) / (double)(rounds * n);
      }
      report("bulk", n, v, reps);
    }
    if (cache && cache_alloc_bulk && cache_free_bulk) {
      for (int r = -2; r < reps; r++) {
        uint64_t t0 = __rdtsc();
        for (size_t k = 0; k < rounds; k++) {
          if (cache_alloc_bulk(cache, n, objs) != n) return 1;
          __asm__ volatile("" : : "r"(objs) : "memory");
          cache_free_bulk(cache, n, objs);
        }
        if (r >= 0) v[r] = (double)(__rdtsc() - t0) / (double)(rounds * n);
      }
      report("cache-bulk", n, v, reps);
    }
  }
  return 0;
}
