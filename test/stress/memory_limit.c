/* test/stress/memory_limit.c — the memory limit (USLAB_CONF=memory_limit=...).
 *
 *   soft  with memory_limit=64m (the background thread off, decay_ms 10 s): a program
 *         frees 40 MB of small objects, then takes 40 MB in huge blocks, which cannot
 *         reuse those pages. Past the limit the freed pages go back at once: RSS stays
 *         near the limit (without it, both would be resident for the decay time).
 *         With `control` (run with memory_limit=none) the same run must go past it:
 *         the check that the test can fail.
 *   hard  with memory_limit=64m,memory_limit_hard=true: allocations that would pass
 *         the limit fail with ENOMEM (malloc, calloc, realloc, posix_memalign), after
 *         the caches and free pages were given back; freeing makes room again, and
 *         RSS never goes far past the limit.
 *
 * usage: memory_limit soft|control|hard */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "bench/proc_self.h"
#include "test/common/check.h"

enum { kObjects = 160000 };
static void *objs[kObjects];

static void use(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* ~40 MB of small objects, written, then freed. */
static void small_peak_freed(void) {
  for (int i = 0; i < kObjects; i++) {
    objs[i] = malloc(16 + i % 497);
    CHECK(objs[i] != NULL);
    if (objs[i]) memset(objs[i], 1, 16 + i % 497);
  }
  for (int i = 0; i < kObjects; i++) free(objs[(size_t)i * 7919 % kObjects]);
}

static void test_soft(int control) {
  long before = rss_kib();
  small_peak_freed();
  long freed = rss_kib();
  enum { kBlocks = 5 };
  void *blocks[kBlocks];
  for (int i = 0; i < kBlocks; i++) {
    blocks[i] = malloc((size_t)8 << 20);
    CHECK(blocks[i] != NULL);
    if (blocks[i]) memset(blocks[i], 2, (size_t)8 << 20);
  }
  long after = rss_kib();
  printf("memory_limit %s: RSS %ld KiB before, %ld after 40 MB of small objects freed, %ld with "
         "40 MB of huge blocks\n", control ? "control (none)" : "soft 64 MiB", before, freed, after);
  CHECK(freed > before + 32 * 1024); /* the freed pages stayed: the decay is 10 s */
  if (control)
    CHECK(after > before + 72 * 1024); /* both resident: the limit is what prevents it */
  else
    CHECK(after < before + 64 * 1024 + 8 * 1024);
  for (int i = 0; i < kBlocks; i++) free(blocks[i]);
}

static void test_hard(void) {
  long before = rss_kib();
  small_peak_freed(); /* cached and free pages: released before anything is refused */
  char *r = malloc(16); /* for realloc at the limit, taken before it */
  CHECK(r != NULL);
  enum { kMax = 4096 };
  static void *blocks[kMax];
  int n = 0;
  errno = 0;
  while (n < kMax && (blocks[n] = malloc(64 * 1024)) != NULL) memset(blocks[n++], 3, 64 * 1024);
  CHECK(n < kMax);
  CHECK(errno == ENOMEM);
  long at_limit = rss_kib();
  printf("memory_limit hard 64 MiB: %d blocks of 64 KiB before ENOMEM, RSS %ld KiB (%ld before)\n",
         n, at_limit, before);
  /* Most of the limit was usable (the freed peak went back first), none much past it. */
  CHECK(n * 64 > 40 * 1024);
  CHECK(at_limit < before + 64 * 1024 + 4 * 1024);
  /* Every allocation function fails alike. */
  errno = 0;
  CHECK(malloc((size_t)16 << 20) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(calloc(1, (size_t)16 << 20) == NULL && errno == ENOMEM);
  void *p = NULL;
  CHECK(posix_memalign(&p, 4096, (size_t)16 << 20) == ENOMEM);
  errno = 0;
  CHECK(realloc(r, (size_t)16 << 20) == NULL && errno == ENOMEM);
  free(r); /* still valid after the failed realloc */
  /* Freed memory makes room again. */
  for (int i = 0; i < n / 2; i++) free(blocks[i]);
  void *again = malloc((size_t)1 << 20);
  CHECK(again != NULL);
  use(again);
  free(again);
  for (int i = n / 2; i < n; i++) free(blocks[i]);
}

int main(int argc, char **argv) {
  require_uslab();
  memset(objs, 0, sizeof objs);
  const char *t = argc > 1 ? argv[1] : "soft";
  if (!strcmp(t, "hard"))
    test_hard();
  else
    test_soft(!strcmp(t, "control"));
  return check_done("memory_limit");
}
