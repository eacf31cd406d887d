/* test/conformance/guarded.c — one memory error per run on an allocation that
 * guarded sampling serves (the driver, guarded.sh, runs it with guard_sample=1, so
 * every allocation is guarded while slots last), chosen by argv[1]. Before the error
 * it prints the object's address and size; the driver checks the report: its kind,
 * the offset, the size, and the stacks of the allocation (alloc_site) and of the
 * free (free_site). "rate N SIZE" makes N independent use-after-frees (the driver
 * counts the reports: the detection rate). */
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"

enum { kSize = 64 };

__attribute__((noinline)) char *alloc_site(size_t n) {
  char *p = malloc(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void free_site(void *p) {
  free(p);
  __asm__ volatile("" : : : "memory");
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
  volatile char *p = alloc_site(kSize);
  memset((char *)p, 1, kSize);
  show((const void *)p, kSize);
  if (!strcmp(what, "overflow-1")) {
    p[kSize] = 7;
    free_site((void *)p);
  } else if (!strcmp(what, "overflow-page")) {
    p[kSize + 4096] = 7;
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
