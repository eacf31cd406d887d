/* test/conformance/prof_sites.c — a program whose allocations the heap profiler must
 * account for (test/programs/prof.sh reads its profiles).
 *
 * Four threads allocate from three sites, site_sixty, site_thirty and site_ten, 60%,
 * 30% and 10% of the calls, sizes from 24 B to 150 KB (small classes, large spans),
 * keeping a window of 64 objects each; leak_site leaks 8000 objects of 4 KiB; a
 * cache site allocates from an object cache (cache_site) and a bulk site with
 * uslab_alloc_bulk (bulk_site), both freed; realloc_site grows a block to 8 MiB in
 * steps (the moves and in-place growth counted, the last block freed). What each
 * site allocated in usable bytes (malloc_usable_size) is printed as "SITE BYTES", the
 * truth the profile's estimates are compared with.
 *
 * With "controls": checks the profiler's controls too: uslab_prof_dump to a path,
 * mallctl opt.prof, prof.active off (then no sample is taken: the dump's allocation
 * totals do not move), prof.reset, prof.dump, prof.lg_sample.
 *
 * With "signal": raises SIGUSR2 (the test sets prof_signal=USR2), then allocates.
 *
 * usage: prof_sites [controls DIR | signal] */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "include/uslab.h"
#include "test/common/check.h"

size_t malloc_usable_size(void *);
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static size_t g_truth[3];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* Not inlined and no tail call: each site is a frame of its own above malloc. */
#define SITE(name)                                 \
  __attribute__((noinline)) void *name(size_t n) { \
    void *p = malloc(n);                           \
    __asm__ volatile("" ::"r"(p) : "memory");      \
    return p;                                      \
  }
SITE(site_sixty)
SITE(site_thirty)
SITE(site_ten)

static void *worker(void *arg) {
  static const size_t sizes[] = {24, 64, 100, 200, 512, 1000, 3000, 9000, 40000, 150000};
  size_t mine[3] = {0, 0, 0};
  unsigned seed = (unsigned)(uintptr_t)arg;
  void *keep[64];
  int nk = 0;
  for (long i = 0; i < 150000; i++) {
    size_t n = sizes[rand_r(&seed) % 10];
    unsigned r = rand_r(&seed) % 10;
    int s = r < 6 ? 0 : r < 9 ? 1 : 2;
    void *p = s == 0 ? site_sixty(n) : s == 1 ? site_thirty(n) : site_ten(n);
    CHECK(p != NULL);
    memset(p, 1, 16);
    mine[s] += malloc_usable_size(p);
    if (nk < 64) {
      keep[nk++] = p;
    } else {
      int j = rand_r(&seed) % 64;
      free(keep[j]);
      keep[j] = p;
    }
  }
  for (int j = 0; j < nk; j++) free(keep[j]);
  pthread_mutex_lock(&g_mu);
  for (int s = 0; s < 3; s++) g_truth[s] += mine[s];
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

__attribute__((noinline)) static size_t leak_site(void) {
  size_t bytes = 0;
  for (int i = 0; i < 8000; i++) {
    void *p = malloc(4096);
    CHECK(p != NULL);
    memset(p, 2, 64);
    bytes += malloc_usable_size(p);
  }
  __asm__ volatile("" ::: "memory");
  return bytes;
}

__attribute__((noinline)) static void cache_site(void) {
  uslab_cache_t *c = uslab_cache_create("prof_test_cache", 200, 8, 0, NULL);
  CHECK(c != NULL);
  static void *objs[2048];
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < 2048; i++) CHECK((objs[i] = uslab_cache_alloc(c)) != NULL);
    for (int i = 0; i < 512; i++) uslab_cache_free(c, objs[i]);
    for (int i = 512; i < 1024; i++) free(objs[i]);
    uslab_cache_free_bulk(c, 1024, objs + 1024);
  }
  uslab_cache_destroy(c);
}

__attribute__((noinline)) static void bulk_site(void) {
  static void *objs[512];
  for (int round = 0; round < 400; round++) {
    CHECK(uslab_alloc_bulk(256, 512, objs) == 512);
    uslab_free_bulk(512, objs);
  }
}

__attribute__((noinline)) static void realloc_site(void) {
  for (int round = 0; round < 20; round++) {
    char *p = NULL;
    for (size_t n = 4096; n <= (8u << 20); n += n / 4) {
      p = realloc(p, n);
      CHECK(p != NULL);
      p[n - 1] = 1;
    }
    free(p);
  }
}

/* The allocation profile's total at `path`.alloc.folded (its last column summed). */
static double folded_total(const char *path) {
  char name[512];
  snprintf(name, sizeof name, "%s.alloc.folded", path);
  FILE *f = fopen(name, "r");
  CHECK(f != NULL);
  double total = 0;
  char line[16384];
  while (fgets(line, sizeof line, f)) {
    char *sp = strrchr(line, ' ');
    CHECK(sp != NULL);
    total += strtod(sp + 1, NULL);
  }
  fclose(f);
  return total;
}

static void controls(const char *dir) {
  bool on = false;
  size_t len = sizeof on;
  CHECK(mallctl("opt.prof", &on, &len, NULL, 0) == 0 && on);
  size_t lg = 0;
  len = sizeof lg;
  CHECK(mallctl("prof.lg_sample", &lg, &len, NULL, 0) == 0 && lg == 16);  /* prof_sample=64k */
  for (int i = 0; i < 20000; i++) free(site_ten(1000));
  char path[512];
  snprintf(path, sizeof path, "%s/first.pb", dir);
  CHECK(uslab_prof_dump(path) == 0);

  /* Inactive: nothing is sampled, the totals stay (read once sampling is off: the
     reading itself allocates). */
  bool off = false;
  len = sizeof on;
  CHECK(mallctl("prof.active", &on, &len, &off, sizeof off) == 0 && on);
  double before = folded_total(path);
  CHECK(before > 0);
  for (int i = 0; i < 20000; i++) free(site_ten(1000));
  snprintf(path, sizeof path, "%s/inactive.pb", dir);
  const char *p = path;
  CHECK(mallctl("prof.dump", NULL, NULL, &p, sizeof p) == 0);
  CHECK(folded_total(path) == before);

  /* Active again: the same loop is seen (20 MB at a 64 KiB mean: ~300 samples). */
  bool yes = true;
  CHECK(mallctl("prof.active", NULL, NULL, &yes, sizeof yes) == 0);
  for (int i = 0; i < 20000; i++) free(site_ten(1000));
  snprintf(path, sizeof path, "%s/active.pb", dir);
  CHECK(uslab_prof_dump(path) == 0);
  double grown = folded_total(path) - before;
  CHECK(grown > 0.7 * 20000 * 1024 && grown < 1.3 * 20000 * 1024);

  /* Reset: what was allocated is forgotten. */
  CHECK(mallctl("prof.reset", NULL, NULL, NULL, 0) == 0);
  snprintf(path, sizeof path, "%s/reset.pb", dir);
  CHECK(uslab_prof_dump(path) == 0);
  CHECK(folded_total(path) == 0);
  /* A path that cannot be written gives its errno, and mallctl EFAULT. */
  CHECK(uslab_prof_dump("/nonexistent-dir/x.pb") == ENOENT);
  p = "/nonexistent-dir/y.pb";
  CHECK(mallctl("prof.dump", NULL, NULL, &p, sizeof p) == EFAULT);
}

int main(int argc, char **argv) {
  require_uslab();
  if (argc == 2 && strcmp(argv[1], "signal") == 0) {
    /* prof_signal: the handler sets a flag; the next sampled allocation writes. */
    raise(SIGUSR2);
    for (int i = 0; i < 20000; i++) free(site_ten(1000));
    return check_done("prof_sites");
  }
  if (argc == 3 && strcmp(argv[1], "controls") == 0) {
    controls(argv[2]);
    return check_done("prof_sites");
  }
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  size_t leaked = leak_site();
  cache_site();
  bulk_site();
  realloc_site();
  printf("site_sixty %zu\nsite_thirty %zu\nsite_ten %zu\nleak_site %zu\n", g_truth[0], g_truth[1],
         g_truth[2], leaked);
  return check_done("prof_sites");
}
