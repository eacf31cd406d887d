/* test/conformance/api.c — the C allocation API through the preloaded shim: every
 * function, its glibc semantics and its error cases (after glibc's malloc/tst-* and
 * mimalloc's test-api). Run with LD_PRELOAD=libuslab.so. */
/* Sizes past PTRDIFF_MAX and products past SIZE_MAX are what it tests (ENOMEM). */
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <unistd.h>

#include "bench/proc_self.h"
#include "test/common/check.h"

/* glibc's own interfaces (pvalloc, malloc_trim, mallinfo2, mallopt, malloc_info,
 * the __libc_* names) are checked where the program runs on glibc; musl has none. */
#ifdef __GLIBC__
#if !__GLIBC_PREREQ(2, 33)
/* glibc before 2.33 (the Debian 11 root of test/programs/old_glibc.sh) declares no
 * mallinfo2; uslab exports it whatever the glibc. */
struct mallinfo2 {
  size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
struct mallinfo2 mallinfo2(void) __attribute__((weak));  /* resolved in the preload */
#endif
#endif

/* C23; glibc 2.36 lacks them, so they are looked up at run time (uslab's). */
static void (*free_sized_fn)(void *, size_t);
static void (*free_aligned_sized_fn)(void *, size_t, size_t);
#ifdef USLAB_TEST_STATIC
/* Declared by no header of glibc 2.36: the static build takes their addresses. */
void free_sized(void *, size_t);
void free_aligned_sized(void *, size_t, size_t);
void *__libc_malloc(size_t), __libc_free(void *), *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t), *__libc_memalign(size_t, size_t);
void *__libc_valloc(size_t), *__libc_pvalloc(size_t);
int __posix_memalign(void **, size_t, size_t);
#endif

static int is_aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static const size_t sizes[] = {0,    1,     7,     8,      9,      15,      16,      17,
                               100,  128,   129,   1000,   1024,   4096,    4097,    16384,
                               32768, 32769, 65536, 200000, 1 << 20, 3 << 20, 5 << 20, 9 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void test_malloc_free(void) {
  void *a = malloc(0), *b = malloc(0);
  CHECK(a && b && a != b);
  free(a);
  free(b);
  free(NULL);
  for (size_t i = 0; i < NSIZES; i++) {
    size_t n = sizes[i];
    unsigned char *p = malloc(n);
    CHECK(p != NULL);
    if (n >= 16) CHECK(is_aligned(p, 16));
    CHECK(malloc_usable_size(p) >= n);
    memset(p, 0xa5, n);
    free(p);
  }
  CHECK(malloc_usable_size(NULL) == 0);
}

static void test_failures_set_enomem(void) {
  errno = 0;
  CHECK(malloc(SIZE_MAX) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(malloc((size_t)PTRDIFF_MAX + 1) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(calloc(SIZE_MAX / 2 + 1, 4) == NULL && errno == ENOMEM); /* n*size overflows */
  errno = 0;
  CHECK(calloc((size_t)1 << 33, (size_t)1 << 33) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(reallocarray(NULL, SIZE_MAX / 2 + 1, 4) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(aligned_alloc(64, SIZE_MAX - 100) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(memalign((size_t)1 << 62, 100) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(valloc(SIZE_MAX) == NULL && errno == ENOMEM);
#ifdef __GLIBC__
  errno = 0;
  CHECK(pvalloc(SIZE_MAX - 10) == NULL && errno == ENOMEM);
#endif
  /* The allocator still works afterwards. */
  void *p = malloc(100);
  CHECK(p != NULL);
  free(p);
}

static void test_free_preserves_errno(void) {
  for (size_t i = 0; i < NSIZES; i++) {
    void *p = malloc(sizes[i]);
    errno = EBADF;
    free(p);
    CHECK(errno == EBADF);
  }
  /* Many large frees, so purging and unmapping happen inside free. */
  void *ps[64];
  for (int i = 0; i < 64; i++) ps[i] = malloc((size_t)(i + 1) << 18);
  errno = EEXIST;
  for (int i = 0; i < 64; i++) free(ps[i]);
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  CHECK(errno == EEXIST);
}

static void test_calloc(void) {
  CHECK(calloc(0, 10) != NULL);
  for (size_t i = 0; i < NSIZES; i++) {
    size_t n = sizes[i];
    /* Dirty memory of this size first, so calloc must zero reused memory. */
    for (int r = 0; r < 4; r++) {
      unsigned char *d = malloc(n);
      memset(d, 0xff, n);
      free(d);
    }
    unsigned char *p = calloc(1, n);
    CHECK(p != NULL);
    size_t bad = 0;
    for (size_t j = 0; j < n; j++) bad += p[j] != 0;
    CHECK(bad == 0);
    free(p);
  }
  unsigned char *q = calloc(1000, 33);
  size_t bad = 0;
  for (size_t j = 0; j < 33000; j++) bad += q[j] != 0;
  CHECK(bad == 0);
  free(q);
}

static void test_realloc(void) {
  /* glibc: realloc(p, 0) frees and returns NULL; realloc(NULL, n) is malloc(n). */
  void *p = realloc(NULL, 0);
  CHECK(p != NULL);
  errno = 0;
  CHECK(realloc(p, 0) == NULL);
  CHECK(errno == 0);
  CHECK(reallocarray(NULL, 0, 16) != NULL);

  unsigned char *r = NULL;
  size_t have = 0;
  size_t steps[] = {1, 8, 24, 100, 129, 1000, 5000, 40000, 33000, 300000, 2000000, 7000000,
                    4000000, 70000, 2000, 16, 3};
  for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
    size_t n = steps[s];
    unsigned char *q = realloc(r, n);
    CHECK(q != NULL);
    size_t keep = have < n ? have : n, bad = 0;
    for (size_t j = 0; j < keep; j++) bad += q[j] != (unsigned char)(j * 31 + 7);
    CHECK(bad == 0);
    for (size_t j = 0; j < n; j++) q[j] = (unsigned char)(j * 31 + 7);
    r = q;
    have = n;
  }
  /* A failed realloc leaves the block valid and untouched. */
  errno = 0;
  CHECK(realloc(r, SIZE_MAX - 4096) == NULL && errno == ENOMEM);
  CHECK(r[0] == 7 && r[2] == (unsigned char)(2 * 31 + 7));
  free(r);
}

/* Huge blocks (above 4 MiB) grow and shrink by moving their pages (mremap), as
 * glibc's mmapped chunks do: contents kept, usable size followed, and the peak holds
 * the block once, where a copy held old and new until the free. (Guarded blocks are
 * copied: their guard page must stay right after the object.) */
static void test_huge_realloc(void) {
  const char *conf = getenv("USLAB_CONF");
  int guard = conf && strstr(conf, "guard=true");
  /* QEMU's user mode emulates a page larger than the host's (the arm64 tier): its
   * resident set there is not the kernel's account of an mremap. */
  const char *qemu_page = getenv("QEMU_PAGESIZE");
  int emulated_page = qemu_page && strcmp(qemu_page, "4096") != 0;
  long before = rss_kib();
  size_t n = (size_t)8 << 20;
  unsigned char *p = malloc(n);
  CHECK(p != NULL);
  if (!p) return;
  for (size_t i = 0; i < n; i += 4096) p[i] = (unsigned char)(i >> 12);
  long peak = 0;
  for (int round = 0; round < 4; round++) {
    size_t m = n * 2;
    unsigned char *q = realloc(p, m);
    CHECK(q != NULL);
    if (!q) break;
    p = q;
    int same = 1;
    for (size_t i = 0; i < n; i += 4096) same &= p[i] == (unsigned char)(i >> 12);
    CHECK(same);
    CHECK(malloc_usable_size(p) >= m);
    for (size_t i = n; i < m; i += 4096) p[i] = (unsigned char)(i >> 12);
    n = m;
    long now = rss_kib();
    if (now > peak) peak = now;
  }
  /* 128 MiB written: resident once, plus slack (not old + new: 192 MiB). */
  if (!guard && !emulated_page) CHECK(peak - before < 150 * 1024);
  unsigned char *s = realloc(p, (size_t)20 << 20);
  CHECK(s != NULL);
  if (s) {
    p = s;
    CHECK(malloc_usable_size(p) >= ((size_t)20 << 20));
    int same = 1;
    for (size_t i = 0; i < ((size_t)20 << 20); i += 4096) same &= p[i] == (unsigned char)(i >> 12);
    CHECK(same);
  }
  free(p);
}

static void test_alignment(void) {
  void *p = (void *)1;
  CHECK(posix_memalign(&p, 3, 16) == EINVAL && p == (void *)1);
  CHECK(posix_memalign(&p, 0, 16) == EINVAL && p == (void *)1);
  CHECK(posix_memalign(&p, sizeof(void *) / 2, 16) == EINVAL && p == (void *)1);
  CHECK(posix_memalign(&p, 64, SIZE_MAX - 8) == ENOMEM && p == (void *)1);
  errno = 0;
  CHECK(aligned_alloc(24, 48) == NULL && errno == EINVAL);

  for (size_t align = 1; align <= ((size_t)1 << 20); align <<= 1) {
    size_t tests[] = {0, 1, align / 2, align, align + 1, 3 * align, 100000};
    for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++) {
      size_t n = tests[t];
      void *a = aligned_alloc(align, n);
      CHECK(a && is_aligned(a, align) && malloc_usable_size(a) >= n);
      memset(a, 1, n);
      free(a);
      void *m = memalign(align, n);
      CHECK(m && is_aligned(m, align) && malloc_usable_size(m) >= n);
      free(m);
      if (align >= sizeof(void *)) {
        void *pm = NULL;
        CHECK(posix_memalign(&pm, align, n) == 0 && pm && is_aligned(pm, align));
        memset(pm, 2, n);
        free(pm);
      }
    }
  }
  void *m = memalign(24, 10); /* glibc rounds 24 up to 32 */
  CHECK(m && is_aligned(m, 32));
  free(m);
  long page = sysconf(_SC_PAGESIZE);
  void *v = valloc(10);
  CHECK(v && is_aligned(v, (size_t)page));
  free(v);
#ifdef __GLIBC__
  void *pv = pvalloc(10);
  CHECK(pv && is_aligned(pv, (size_t)page) && malloc_usable_size(pv) >= (size_t)page);
  free(pv);
  void *pz = pvalloc(0);
  CHECK(pz != NULL);
  free(pz);
#endif
}

static void test_sized_frees_and_extras(void) {
  free_sized_fn = (void (*)(void *, size_t))USLAB_TEST_SYMBOL(free_sized);
  free_aligned_sized_fn = (void (*)(void *, size_t, size_t))USLAB_TEST_SYMBOL(free_aligned_sized);
  CHECK(free_sized_fn && free_aligned_sized_fn);
  if (!free_sized_fn || !free_aligned_sized_fn) return;
  void *p = malloc(100);
  free_sized_fn(p, 100);
  void *q = aligned_alloc(256, 512);
  free_aligned_sized_fn(q, 256, 512);
#ifdef __GLIBC__
  struct mallinfo2 before = mallinfo2();
  void *big = malloc(10 << 20);
  memset(big, 1, 10 << 20);
  struct mallinfo2 during = mallinfo2();
  CHECK(during.uordblks >= before.uordblks + (10 << 20));
  free(big);
  CHECK(mallopt(M_ARENA_MAX, 2) == 1);
  malloc_trim(0);
  CHECK(malloc_info(0, stdout) == 0);
#endif
}

static void test_really_interposed(void) {
  /* glibc's malloc would move the program break; uslab never uses brk. */
  void *brk_before = sbrk(0);
  void *ps[1000];
  for (int i = 0; i < 1000; i++) ps[i] = malloc(100 + i);
  for (int i = 0; i < 1000; i++) free(ps[i]);
  CHECK(sbrk(0) == brk_before);
#define SYM(name) {#name, USLAB_TEST_SYMBOL(name)}
  const struct {
    const char *name;
    void *fn;
  } syms[] = {SYM(malloc), SYM(free), SYM(calloc), SYM(realloc), SYM(reallocarray),
              SYM(posix_memalign), SYM(aligned_alloc), SYM(memalign), SYM(valloc),
              SYM(malloc_usable_size), SYM(free_sized),
#ifdef __GLIBC__
              SYM(pvalloc), SYM(__libc_malloc), SYM(__libc_free),
              SYM(__libc_calloc), SYM(__libc_realloc), SYM(__libc_memalign),
              SYM(__libc_valloc), SYM(__libc_pvalloc), SYM(__posix_memalign),
              SYM(malloc_trim), SYM(mallinfo2)
#endif
  };
#undef SYM
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    int ok = symbol_is_uslab(syms[i].fn);
    if (!ok) fprintf(stderr, "  %s does not resolve to libuslab\n", syms[i].name);
    CHECK(ok);
  }
}

int main(void) {
  require_uslab();
  test_really_interposed();
  test_malloc_free();
  test_failures_set_enomem();
  test_free_preserves_errno();
  test_calloc();
  test_realloc();
  test_huge_realloc();
  test_alignment();
  test_sized_frees_and_extras();
  return check_done("api");
}
