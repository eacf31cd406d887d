/* test/conformance/prefixed.c — the malloc family under uslab's names
 * (preload/prefixed.cc): the same heap as malloc, the same errors, every alignment
 * from 1 to 4 MiB for the aligned calls with their contents kept by realloc, zeroed
 * memory really zero (also after the same memory was dirtied and freed), sized frees
 * of shrunk objects, and uslab_mallctl answering as mallctl (and setting the memory
 * limit at run time).
 *
 * usage: prefixed */
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "include/uslab.h"
#include "test/common/check.h"

static int is_aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31 + seed);
}
static int same(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 31 + seed)) return 0;
  return 1;
}
static int zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

static void test_basic_and_errors(void) {
  void *p = uslab_malloc(100);
  CHECK(p && uslab_malloc_usable_size(p) >= 100);
  free(p);  /* the heap malloc's names reach (preloaded or linked) */
  p = malloc(200);
  CHECK(uslab_malloc_usable_size(p) >= 200);
  uslab_free(p);
  CHECK(uslab_malloc_usable_size(NULL) == 0);
  uslab_free(NULL);
  void *z = uslab_malloc(0);
  CHECK(z != NULL);
  uslab_free(z);
  errno = 0;
  CHECK(uslab_malloc(SIZE_MAX - 4096) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(uslab_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(uslab_aligned_alloc(48, 100) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(uslab_aligned_alloc_zeroed(3, 100) == NULL && errno == EINVAL);
  void *q = uslab_malloc(64);
  errno = 0;
  CHECK(uslab_realloc_aligned(q, 24, 128) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(uslab_realloc_aligned(q, 64, SIZE_MAX - 4096) == NULL && errno == ENOMEM);
  CHECK(uslab_malloc_usable_size(q) >= 64); /* still valid */
  CHECK(uslab_realloc(q, 0) == NULL);        /* frees */
  unsigned char *r = uslab_realloc(NULL, 50);
  CHECK(r != NULL);
  fill(r, 50, 1);
  r = uslab_realloc(r, 5000);
  CHECK(r && same(r, 50, 1));
  uslab_free_sized(r, 5000);
}

static void test_aligned(void) {
  for (size_t align = 1; align <= ((size_t)4 << 20); align <<= 1) {
    const size_t sizes[] = {1, align / 2 + 1, align, 3 * align + 5};
    for (int k = 0; k < 4; k++) {
      size_t n = sizes[k];
      unsigned char *p = uslab_aligned_alloc(align, n);
      CHECK(p && is_aligned(p, align) && uslab_malloc_usable_size(p) >= n);
      if (!p) continue;
      fill(p, n, (unsigned)align);
      /* Grow, shrink, grow again: alignment and contents kept. */
      unsigned char *g = uslab_realloc_aligned(p, align, 2 * n + 100);
      CHECK(g && is_aligned(g, align) && same(g, n, (unsigned)align));
      unsigned char *s = uslab_realloc_aligned(g, align, n / 2 + 1);
      CHECK(s && is_aligned(s, align) && same(s, n / 2 + 1, (unsigned)align));
      uslab_free_aligned_sized(s, align, n / 2 + 1);
      /* Zeroed, from memory just dirtied and freed. */
      unsigned char *d = uslab_aligned_alloc(align, n);
      memset(d, 0xa5, n);
      uslab_free(d);
      unsigned char *zp = uslab_aligned_alloc_zeroed(align, n);
      CHECK(zp && is_aligned(zp, align) && zero(zp, n));
      uslab_free_aligned_sized(zp, align, n);
    }
  }
  /* calloc's path too. */
  for (size_t n = 1; n < 70000; n = n * 3 + 1) {
    unsigned char *d = uslab_malloc(n);
    memset(d, 0x5a, n);
    uslab_free(d);
    unsigned char *c = uslab_calloc(1, n);
    CHECK(c && zero(c, n));
    uslab_free_sized(c, n);
  }
}

/* A sized free with the size an object was shrunk to in place (Rust's dealloc takes
 * the layout realloc was last given): any size up to its usable size. */
static void test_sized_after_in_place(void) {
  for (size_t n = 16; n <= (1 << 20); n *= 4) {
    unsigned char *p = uslab_malloc(n);
    size_t usable = uslab_malloc_usable_size(p);
    fill(p, n, 7);
    unsigned char *q = uslab_realloc_aligned(p, 64, n);
    CHECK(q && same(q, n, 7));
    uslab_free_aligned_sized(q, 64, usable > n ? n - 1 : n);
  }
  void *many[1000];
  for (int i = 0; i < 1000; i++) many[i] = uslab_malloc((size_t)i * 13 + 1);
  for (int i = 0; i < 1000; i++) uslab_free_sized(many[i], (size_t)i * 13 + 1);
}

static void test_mallctl(void) {
  const char *v = NULL;
  size_t len = sizeof v;
  CHECK(uslab_mallctl("version", &v, &len, NULL, 0) == 0 && v && strcmp(v, "uslab-" USLAB_VERSION) == 0);
  uint64_t epoch = 1;
  CHECK(uslab_mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0);
  size_t allocated = 0;
  len = sizeof allocated;
  CHECK(uslab_mallctl("stats.allocated", &allocated, &len, NULL, 0) == 0 && allocated > 0);
  CHECK(uslab_mallctl("no.such.name", NULL, NULL, NULL, 0) == ENOENT);
  CHECK(uslab_mallctl("arena.4096.purge", NULL, NULL, NULL, 0) == 0);

  /* The memory limit set at run time: a hard one refuses what would pass it (ENOMEM),
   * and none takes it back. */
  size_t limit = 1, resident = 0, was = 0;
  bool hard = true, was_hard = true;
  len = sizeof was; /* none, or a container's share */
  CHECK(uslab_mallctl("uslab.memory_limit", &was, &len, NULL, 0) == 0);
  len = sizeof was_hard;
  CHECK(uslab_mallctl("uslab.memory_limit_hard", &was_hard, &len, NULL, 0) == 0 && !was_hard);
  CHECK(uslab_mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0);
  len = sizeof resident;
  CHECK(uslab_mallctl("stats.resident", &resident, &len, NULL, 0) == 0 && resident > 0);
  size_t set = resident + (64u << 20);
  hard = true;
  CHECK(uslab_mallctl("uslab.memory_limit_hard", NULL, NULL, &hard, sizeof hard) == 0);
  CHECK(uslab_mallctl("uslab.memory_limit", NULL, NULL, &set, sizeof set) == 0);
  len = sizeof limit;
  CHECK(uslab_mallctl("uslab.memory_limit", &limit, &len, NULL, 0) == 0 && limit == set);
  errno = 0;
  void *big = uslab_malloc(256u << 20);
  CHECK(big == NULL && errno == ENOMEM);
  void *fits = uslab_malloc(16u << 20);
  CHECK(fits != NULL);
  uslab_free(fits);
  size_t none = 0;
  CHECK(uslab_mallctl("uslab.memory_limit", NULL, NULL, &none, sizeof none) == 0);
  big = uslab_malloc(256u << 20);
  CHECK(big != NULL);
  uslab_free(big);
  CHECK(uslab_mallctl("uslab.memory_limit", NULL, NULL, &none, 4) == EINVAL);
  CHECK(uslab_mallctl("uslab.memory_limit_hard", NULL, NULL, &was_hard, sizeof was_hard) == 0);
  CHECK(uslab_mallctl("uslab.memory_limit", NULL, NULL, &was, sizeof was) == 0);
}

int main(void) {
  require_uslab();
  test_basic_and_errors();
  test_aligned();
  test_sized_after_in_place();
  test_mallctl();
  return check_done("prefixed");
}
