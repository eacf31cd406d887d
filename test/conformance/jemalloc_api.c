/* test/conformance/jemalloc_api.c — jemalloc's non-standard API as uslab provides it
 * (compat/jemalloc.cc), checked against jemalloc's documented semantics: *allocx with
 * alignment and zero flags, in-place xallocx, nallocx agreeing with sallocx, and the
 * mallctl subset (epoch, version, stats.*, thread.tcache.flush, arena.0.purge).
 *
 * usage: jemalloc_api */
#include <errno.h>
#include <stdint.h>
#include <strings.h>

#include "test/common/check.h"

/* jemalloc's flag encoding (jemalloc.h). */
#define MALLOCX_LG_ALIGN(la) ((int)(la))
#define MALLOCX_ALIGN(a) ((int)(ffs((int)(a)) - 1))
#define MALLOCX_ZERO ((int)0x40)
#define MALLOCX_TCACHE_NONE ((int)((-1 + 2) << 8))
#define MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)

void *mallocx(size_t size, int flags);
void *rallocx(void *ptr, size_t size, int flags);
size_t xallocx(void *ptr, size_t size, size_t extra, int flags);
size_t sallocx(const void *ptr, int flags);
void dallocx(void *ptr, int flags);
void sdallocx(void *ptr, size_t size, int flags);
size_t nallocx(size_t size, int flags);
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static int all_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

static void test_allocx(void) {
  for (size_t size = 1; size < (4u << 20); size = size * 3 / 2 + 1) {
    int flags[] = {0, MALLOCX_TCACHE_NONE, MALLOCX_ARENA(0)};
    for (int f = 0; f < 3; f++) {
      void *p = mallocx(size, flags[f]);
      CHECK(p != NULL);
      CHECK(sallocx(p, 0) >= size);
      CHECK(nallocx(size, flags[f]) == sallocx(p, 0));
      memset(p, 0xa5, size);
      if (f == 2) sdallocx(p, size, 0);
      else dallocx(p, 0);
    }
  }
  for (size_t align = 1; align <= (1u << 20); align *= 2) {
    size_t sizes[] = {1, align / 2 + 1, align, 3 * align + 5, 40000};
    for (int i = 0; i < 5; i++) {
      void *p = mallocx(sizes[i], MALLOCX_ALIGN(align));
      CHECK(p != NULL && (uintptr_t)p % align == 0);
      CHECK(sallocx(p, 0) >= sizes[i]);
      CHECK(nallocx(sizes[i], MALLOCX_LG_ALIGN(ffs((int)align) - 1)) == sallocx(p, 0));
      dallocx(p, 0);
    }
  }
  /* Zeroed even when the memory is reused dirty. */
  for (int round = 0; round < 50; round++) {
    size_t size = 24 + (size_t)round * 97;
    char *d = mallocx(size, 0);
    memset(d, 0xff, size);
    dallocx(d, 0);
    char *z = mallocx(size, MALLOCX_ZERO);
    CHECK(all_zero(z, sallocx(z, 0)));
    dallocx(z, 0);
    z = mallocx(size, MALLOCX_ZERO | MALLOCX_ALIGN(64));
    CHECK((uintptr_t)z % 64 == 0 && all_zero(z, sallocx(z, 0)));
    dallocx(z, 0);
  }
  errno = 1234;
  CHECK(mallocx((size_t)1 << 62, 0) == NULL);
  CHECK(errno == 1234); /* the *allocx functions do not set errno */
  CHECK(nallocx(SIZE_MAX, 0) == 0);
}

static void test_rallocx_xallocx(void) {
  unsigned char *p = mallocx(10, 0);
  for (int i = 0; i < 10; i++) p[i] = (unsigned char)i;
  for (size_t size = 11; size < (2u << 20); size = size * 2 + 3) {
    size_t old = sallocx(p, 0);
    p = rallocx(p, size, MALLOCX_ZERO);
    CHECK(p != NULL);
    for (int i = 0; i < 10; i++) CHECK(p[i] == i);
    CHECK(all_zero(p + old, sallocx(p, 0) - old)); /* zeroed from the old usable size */
    memset(p + 10, 0x77, sallocx(p, 0) - 10);
  }
  p = rallocx(p, 5, 0);
  for (int i = 0; i < 5; i++) CHECK(p[i] == i);
  unsigned char *q = rallocx(p, 3000, MALLOCX_ALIGN(4096));
  CHECK(q && (uintptr_t)q % 4096 == 0);
  for (int i = 0; i < 5; i++) CHECK(q[i] == i);
  dallocx(q, 0);

  /* xallocx never moves: a small object keeps its size class. */
  void *s = mallocx(100, 0);
  size_t usable = sallocx(s, 0);
  CHECK(xallocx(s, 100, 0, 0) == usable);
  CHECK(xallocx(s, 5000, 0, 0) == usable);
  CHECK(sallocx(s, 0) == usable);
  dallocx(s, 0);
  /* A large object grows in place into free pages after it and shrinks in place. */
  char *big = mallocx(100000, 0);
  size_t before = sallocx(big, 0);
  size_t grown = xallocx(big, 200000, 100000, MALLOCX_ZERO);
  CHECK(grown >= before);
  CHECK(sallocx(big, 0) == grown);
  if (grown > before) CHECK(all_zero(big + before, grown - before));
  CHECK(xallocx(big, 50000, 0, 0) >= 50000);
  CHECK(xallocx(big, 50000, 0, 0) < grown);
  dallocx(big, 0);
}

static void test_mallctl(void) {
  uint64_t epoch = 1;
  size_t len = sizeof epoch;
  CHECK(mallctl("epoch", &epoch, &len, &epoch, sizeof epoch) == 0);
  size_t before, after;
  len = sizeof before;
  CHECK(mallctl("stats.allocated", &before, &len, NULL, 0) == 0);
  void *objs[1000];
  for (int i = 0; i < 1000; i++) objs[i] = malloc(1024);
  len = sizeof after;
  CHECK(mallctl("stats.allocated", &after, &len, NULL, 0) == 0);
  CHECK(after == before); /* stats refresh only on an epoch write */
  CHECK(mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0);
  CHECK(mallctl("stats.allocated", &after, &len, NULL, 0) == 0);
  CHECK(after >= before + 1000 * 1024 - 64 * 1024); /* caches may hold a few */
  size_t active, resident, mapped;
  len = sizeof(size_t);
  CHECK(mallctl("stats.active", &active, &len, NULL, 0) == 0 && active >= after);
  CHECK(mallctl("stats.resident", &resident, &len, NULL, 0) == 0);
  CHECK(mallctl("stats.mapped", &mapped, &len, NULL, 0) == 0 && mapped >= active);
  for (int i = 0; i < 1000; i++) free(objs[i]);
  const char *version = NULL;
  len = sizeof version;
  CHECK(mallctl("version", &version, &len, NULL, 0) == 0 && version && strstr(version, "uslab"));
  CHECK(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0) == 0);
  CHECK(mallctl("arena.0.purge", NULL, NULL, NULL, 0) == 0);
  CHECK(mallctl("no.such.name", NULL, NULL, NULL, 0) == ENOENT);
  int small;
  len = sizeof small;
  CHECK(mallctl("stats.allocated", &small, &len, NULL, 0) == EINVAL);
  CHECK(mallctl("stats.allocated", NULL, NULL, &after, sizeof after) == EPERM);
}

int main(void) {
  require_uslab();
  test_allocx();
  test_rallocx_xallocx();
  test_mallctl();
  return check_done("jemalloc_api");
}
