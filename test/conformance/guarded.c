/* test/conformance/guarded.c — one memory error per run on an allocation that
 * guarded sampling serves (the driver, guarded.sh, runs it with guard_sample=1, so
 * every allocation is guarded while slots last), chosen by argv[1]. Before the error
 * it prints the object's address and size; the driver checks the report: its kind,
 * the offset, the size, and the stacks of the allocation (alloc_site) and of the
 * free (free_site). "rate N SIZE" makes N independent use-after-frees (the driver
 * counts the reports: the detection rate). */
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"

enum { kSize = 64, kLarge = 40000 }; /* kLarge: a large object, guarded up to 64 KiB */

__attribute__((noinline)) char *alloc_site(size_t n) {
  char *p = malloc(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void free_site(void *p) {
  free(p);
  __asm__ volatile("" : : : "memory");
}
__attribute__((noinline)) char *cache_alloc_site(uslab_cache_t *c) {
  char *p = uslab_cache_alloc(c);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void cache_free_site(uslab_cache_t *c, void *p) {
  uslab_cache_free(c, p);
  __asm__ volatile("" : : : "memory");
}
__attribute__((noinline)) void bulk_alloc_site(size_t size, size_t n, void **out) {
  CHECK(uslab_alloc_bulk(size, n, out) == n);
  __asm__ volatile("" : : : "memory");
}
__attribute__((noinline)) void bulk_free_site(size_t n, void **ptrs) {
  uslab_free_bulk(n, ptrs);
  __asm__ volatile("" : : : "memory");
}
/* C++'s sized delete, operator delete(void*, size_t), called by its symbol. */
__attribute__((noinline)) void sized_free_site(void *p, size_t size) {
  void (*sized_delete)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
  CHECK(sized_delete != NULL);
  if (sized_delete) sized_delete(p, size);
  __asm__ volatile("" : : : "memory");
}

static void construct(void *p) { memset(p, 0x5a, kSize); }

static size_t guarded_live(void) {
  uslab_stats_t st;
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  return st.guarded_live;
}

__attribute__((noinline)) void deferred_free_site(void *p) {
  uslab_free_deferred(p);
  __asm__ volatile("" : : : "memory");
}

static void program_handler(int sig) {
  (void)sig;
  static const char msg[] = "program handler\n";
  write(1, msg, sizeof msg - 1);
  _exit(3);
}

static void show(const void *p, size_t n) {
  printf("%p %zu\n", p, n);
  fflush(stdout);
}

int main(int argc, char **argv) {
  require_uslab();
  if (argc < 2) return 2;
  const char *what = argv[1];
  if (!strcmp(what, "rate")) {
    /* N independent use-after-frees of SIZE bytes (run with guard_recover=true:
     * each guarded one is reported, and the program goes on). */
    long n = argc > 2 ? atol(argv[2]) : 1000;
    size_t size = argc > 3 ? strtoul(argv[3], NULL, 10) : 4096;
    for (long i = 0; i < n; i++) {
      volatile char *q = alloc_site(size);
      q[0] = 1;
      free_site((void *)q);
      q[0] = 2;
    }
    printf("survived\n");
    return 0;
  }
  if (!strcmp(what, "off-by-one")) {
    /* One byte written just past each object, as asked for, of sizes across the
     * small classes and past them, plain, zeroed and aligned (run with
     * guard_recover=true and abort_on_error=false: the driver counts one report an
     * object, and nothing else). A guarded object is as large as asked: the byte lies
     * in its alignment's slack (found at free) or in the guard page, never inside the
     * object, whatever its class rounds the size to. */
    static const size_t sizes[] = {1,    7,    8,    15,   17,   24,   100,  127,  129,
                                   500,  1000, 1023, 1025, 3000, 4095, 4097, 5000, 9999,
                                   20000, 32767, 32769, 40000, 65535};
    static const size_t aligns[] = {32, 64, 256, 4096};
    size_t n = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
      char *p = alloc_site(sizes[i]);
      CHECK(p && malloc_usable_size(p) == sizes[i]);
      p[sizes[i]] = 7;
      free_site(p);
      n++;
      char *z = calloc(1, sizes[i]);
      CHECK(z && z[sizes[i] - 1] == 0 && malloc_usable_size(z) == sizes[i]);
      z[sizes[i]] = 7;
      free_site(z);
      n++;
      for (size_t a = 0; a < sizeof aligns / sizeof *aligns && sizes[i] <= 9999; a++) {
        void *q = NULL;
        CHECK(posix_memalign(&q, aligns[a], sizes[i]) == 0 && q);
        CHECK((uintptr_t)q % aligns[a] == 0 && malloc_usable_size(q) == sizes[i]);
        ((char *)q)[sizes[i]] = 7;
        free_site(q);
        n++;
      }
    }
    printf("%zu overflows\n", n);
    return check_done("guarded off-by-one");
  }
  if (!strcmp(what, "paths")) {
    /* Every entry point hands out and takes back guarded objects, with no report:
     * aligned allocations keep their alignment; a sized delete given the wrong size,
     * realloc into a slot and out of one, the bulk calls, and object caches (a
     * constructed object, a poisoned cache's object that passes its check, a zeroed
     * one; a cache destroyed with a guarded object live reports it). */
    size_t live = guarded_live();
    void *a = aligned_alloc(256, 256), *b = NULL;
    CHECK(a && (uintptr_t)a % 256 == 0 && guarded_live() == live + 1);
    CHECK(posix_memalign(&b, 128, 100) == 0 && (uintptr_t)b % 128 == 0);
    CHECK(guarded_live() == live + 2);
    free(a);
    free(b);
    CHECK(guarded_live() == live);
    char *q = malloc(kSize);
    CHECK(guarded_live() == live + 1);
    sized_free_site(q, 16); /* the wrong size: the object is freed all the same */
    CHECK(guarded_live() == live);
    char *r = malloc(16);
    memset(r, 3, 16);
    char *grown = realloc(r, 3000); /* moves into another slot */
    CHECK(grown && grown[15] == 3 && malloc_usable_size(grown) >= 3000);
    CHECK(guarded_live() == live + 1);
    free(grown);
    /* Large objects up to 64 KiB: aligned, moved by realloc into another slot. */
    char *big = aligned_alloc(4096, kLarge);
    CHECK(big && (uintptr_t)big % 4096 == 0 && guarded_live() == live + 1);
    memset(big, 4, kLarge);
    char *bigger = realloc(big, 60000);
    CHECK(bigger && bigger[kLarge - 1] == 4 && malloc_usable_size(bigger) == 60000);
    CHECK(guarded_live() == live + 1);
    char *huge = malloc(100000); /* past the slots: not guarded */
    CHECK(huge && guarded_live() == live + 1);
    free(huge);
    free(bigger);
    CHECK(guarded_live() == live);
    void *objs[8];
    bulk_alloc_site(kSize, 8, objs);
    CHECK(guarded_live() == live + 8);
    for (int i = 0; i < 8; i++) memset(objs[i], i, kSize);
    bulk_free_site(8, objs);
    CHECK(guarded_live() == live);
    uslab_cache_t *c = uslab_cache_create("guarded-ctor", kSize, 0, 0, construct);
    uslab_cache_t *z = uslab_cache_create("guarded-zero", kSize, 0, USLAB_CACHE_ZERO, NULL);
    uslab_cache_t *pz = uslab_cache_create("guarded-poison", kSize, 0, USLAB_CACHE_POISON, NULL);
    CHECK(c && z && pz);
    char *co = cache_alloc_site(c), *zo = uslab_cache_alloc(z), *po = uslab_cache_alloc(pz);
    CHECK(co && co[0] == 0x5a && co[kSize - 1] == 0x5a);
    CHECK(zo && zo[0] == 0 && zo[kSize - 1] == 0 && po);
    CHECK(guarded_live() == live + 3);
    void *cb[4];
    CHECK(uslab_cache_alloc_bulk(c, 4, cb) == 4);
    CHECK(((char *)cb[3])[7] == 0x5a && guarded_live() == live + 7);
    uslab_cache_free_bulk(c, 4, cb);
    cache_free_site(c, co);
    uslab_cache_free(z, zo);
    uslab_cache_free(pz, po);
    CHECK(guarded_live() == live);
    uslab_cache_destroy(z);
    uslab_cache_destroy(pz);
    co = cache_alloc_site(c);
    uslab_cache_destroy(c); /* reports one live object, keeps it valid */
    CHECK(co[9] == 0x5a);
    return check_done("guarded paths");
  }
  /* Errors on objects of the other entry points (each shows its object). */
  if (!strcmp(what, "bulk-uaf")) {
    void *objs[4];
    bulk_alloc_site(kSize, 4, objs);
    show(objs[2], kSize);
    bulk_free_site(4, objs);
    ((volatile char *)objs[2])[8] = 7;
  } else if (!strcmp(what, "cache-uaf")) {
    uslab_cache_t *c = uslab_cache_create("guarded", kSize, 0, 0, construct);
    char *o = cache_alloc_site(c);
    show(o, kSize);
    CHECK(o[1] == 0x5a);
    cache_free_site(c, o);
    ((volatile char *)o)[8] = 7;
  } else if (!strcmp(what, "large-uaf")) {
    volatile char *o = alloc_site(kLarge);
    show((const void *)o, kLarge);
    free_site((void *)o);
    o[8] = 7;
  } else if (!strcmp(what, "large-overflow")) {
    volatile char *o = alloc_site(kLarge);
    show((const void *)o, kLarge);
    o[kLarge] = 7;
    free_site((void *)o);
  } else if (!strcmp(what, "cache-double-free")) {
    uslab_cache_t *c = uslab_cache_create("guarded", kSize, 0, 0, construct);
    char *o = cache_alloc_site(c);
    show(o, kSize);
    cache_free_site(c, o);
    cache_free_site(c, o);
  }
  if (!strcmp(what, "bulk-uaf") || !strncmp(what, "cache-", 6) || !strncmp(what, "large-", 6)) {
    printf("survived\n");
    return 0;
  }
  volatile char *p = alloc_site(kSize);
  memset((char *)p, 1, kSize);
  show((const void *)p, kSize);
  if (!strcmp(what, "overflow-1")) {
    p[kSize] = 7;
    free_site((void *)p);
  } else if (!strcmp(what, "overflow-page")) {
    /* A far overflow: 4 KiB past the end, in the guard whichever end of its pages
       the object takes; with larger OS pages half a page, in the guard or in the
       object's page (found at free), and nearer to it than to the next slot's. */
    p[kSize + (uslab_os_page() == 4096 ? 4096 : uslab_os_page() / 2)] = 7;
    free_site((void *)p);
  } else if (!strcmp(what, "underflow")) {
    p[-1] = 7;
    free_site((void *)p);
  } else if (!strcmp(what, "uaf-read")) {
    free_site((void *)p);
    printf("%d\n", p[8]);
  } else if (!strcmp(what, "uaf-write")) {
    free_site((void *)p);
    p[8] = 7;
  } else if (!strcmp(what, "double-free")) {
    free_site((void *)p);
    free_site((void *)p);
  } else if (!strcmp(what, "interior-free")) {
    free_site((void *)(p + 16));
  } else if (!strcmp(what, "realloc-freed")) {
    free_site((void *)p);
    void *q = realloc((void *)p, 128);
    printf("realloc gave %p\n", q);
  } else if (!strcmp(what, "fork-uaf")) {
    /* Freed before a fork: the child's copy of the pool is inaccessible there too. */
    free_site((void *)p);
    pid_t pid = fork();
    if (pid == 0) {
      printf("%d\n", p[8]);
      _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 0;
  } else if (!strcmp(what, "sized-uaf")) {
    sized_free_site((void *)p, 8); /* the wrong size */
    p[8] = 7;
  } else if (!strcmp(what, "deferred")) {
    /* Readable until its grace period ends, inaccessible after. */
    deferred_free_site((void *)p);
    CHECK(p[3] == 1);
    uslab_deferred_barrier();
    printf("%d\n", p[3]);
  } else if (!strcmp(what, "chain")) {
    /* The program's own SIGSEGV handler, installed after uslab's: a fault outside
     * the pool reaches it, through uslab's, which the next guarded allocation put
     * back in front. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = program_handler;
    CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
    volatile char *q = alloc_site(kSize);
    struct sigaction now;
    CHECK(sigaction(SIGSEGV, NULL, &now) == 0 && now.sa_handler != program_handler);
    q[0] = 1;
    volatile char *wild = (volatile char *)16;
    *wild = 1;
  } else if (!strcmp(what, "wild")) {
    /* A fault outside the pool, uslab's handler installed: the default action. */
    volatile char *wild = (volatile char *)16;
    *wild = 1;
  } else if (!strcmp(what, "fork")) {
    /* A child forked with a guarded object live frees it and exits; the parent's
     * copy stays its own, exec works, and the parent frees it cleanly. */
    pid_t pid = fork();
    if (pid == 0) {
      CHECK(p[5] == 1);
      free_site((void *)p);
      void *more[100];
      for (int i = 0; i < 100; i++) more[i] = malloc(kSize);
      for (int i = 0; i < 100; i++) free(more[i]);
      execl("/bin/true", "true", (char *)NULL);
      _exit(9);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(p[5] == 1);
    free_site((void *)p);
    return check_done("guarded fork");
  } else if (!strcmp(what, "ok")) {
    /* No error: realloc moves it out, usable size, and a clean free; the counters. */
    uslab_stats_t st, after;
    CHECK(uslab_stats_get(&st, sizeof st) == 0);
    CHECK(st.guarded_allocations >= 1 && st.guarded_live >= 1 && st.guarded_reports == 0);
    CHECK(malloc_usable_size((void *)p) == kSize);
    char *q = realloc((void *)p, 200);
    CHECK(q && q[kSize - 1] == 1);
    free_site(q);
    CHECK(uslab_stats_get(&after, sizeof after) == 0);
    CHECK(after.guarded_allocations > st.guarded_allocations);
    CHECK(after.guarded_freed > st.guarded_freed);
    return check_done("guarded ok");
  } else {
    return 2;
  }
  printf("survived\n");
  return 0;
}
