/* test/conformance/background.c — when the background thread starts, and what
 * happens where it cannot (background_thread=auto, the default).
 *
 *   short    a program that allocates and frees little gets no thread
 *   libc     the first big free comes from inside libc (qsort's buffer, glibc 2.36):
 *            the thread is not started there (glibc frees under locks that
 *            pthread_create takes), the statistics say why, and the program's own
 *            next call starts it
 *   fail     pthread_create fails (EAGAIN, as under RLIMIT_NPROC): the state says so,
 *            the process carries on, and memory still returns on allocator calls
 *   seccomp  a seccomp filter is in force (clone refused): no thread is tried, the
 *            statistics say why, memory returns on allocator calls
 *   fork     a child forked from a process with the thread has none until it too
 *            has memory to return
 *   age      a program still allocating 30 ms after it started gets the thread and
 *            the live region, with nothing to give back
 *   last     the thread keeps no process alive that its program has left: main's
 *            pthread_exit after its worker ends, and a child forked by a thread that
 *            then returns, each end with status 0 (as under glibc's malloc)
 *
 * The others run with live_stats=false, which leaves memory to return the one reason
 * to start the thread (age and a heap of 8 MiB count only for the live statistics).
 *
 * usage: background short|libc|fail|seccomp|fork|age|last  (USLAB_CONF=decay_ms=200) */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/proc_self.h"
#include "include/uslab.h"
#include "test/common/check.h"

/* The executable's pthread_create comes first in the lookup scope, libuslab's calls
 * included: with fail_create set it fails as a process at RLIMIT_NPROC does. */
static int fail_create;
int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg) {
  static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
  if (fail_create) return EAGAIN;
  if (!real) real = dlsym(RTLD_NEXT, "pthread_create");
  return real(t, a, fn, arg);
}

static unsigned state(void) {
  uslab_stats_t s;
  CHECK(uslab_stats_get(&s, sizeof s) == 0);
  return s.background;
}

static char text[1 << 16];
static void collect(void *opaque, const char *line) {
  (void)opaque;
  strncat(text, line, sizeof text - strlen(text) - 1);
}
/* The statistics' line about the thread. */
static const char *background_line(void) {
  text[0] = 0;
  uslab_stats_print(collect, NULL);
  char *s = strstr(text, "background thread:");
  if (s && strchr(s, '\n')) *strchr(s, '\n') = 0;
  return s ? s : "";
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

enum { kObjects = 100000 };
static void *objs[kObjects];

/* A peak of ~25 MB of small objects, freed. */
static void peak_and_free(void) {
  for (int i = 0; i < kObjects; i++) {
    objs[i] = malloc(16 + i % 497);
    if (objs[i]) memset(objs[i], 1, 16 + i % 497);
  }
  for (int i = 0; i < kObjects; i++) free(objs[(size_t)i * 7919 % kObjects]);
}

/* uslab's own metadata in KiB (its statistics). */
static long metadata_kib(void) {
  uslab_stats_t s;
  CHECK(uslab_stats_get(&s, sizeof s) == 0);
  return (long)(s.metadata >> 10);
}

/* Large calls every 20 ms until RSS is back within 2 MiB of `before`, plus what
 * uslab's metadata grew by since `meta` (a thread that ran on many CPUs made their
 * shards' arrays resident), or 15 s. */
static int back_on_calls(long before, long meta) {
  long rss = 0;
  /* Up to 15 s: a tick walks every CPU's sheaves, which on many emulated CPUs
   * (test/vm) takes far longer than on real ones. */
  for (int i = 0; i < 750; i++) {
    char *p = malloc(100000);
    if (p) memset(p, 1, 100000);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
    if ((rss = rss_kib()) <= before + 2048 + (metadata_kib() - meta)) return 1;
    sleep_ms(20);
  }
  /* Not back: what is left, for the log. */
  printf("background: RSS %ld KiB before the peak, %ld KiB after 15 s of calls; uslab's view:\n",
         before, rss);
  text[0] = 0;
  uslab_stats_print(collect, NULL);
  fputs(text, stdout);
  return 0;
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void test_libc(void) {
  enum { kN = 1 << 20 };  /* 8 MiB: glibc's qsort mallocs a buffer as big */
  uint64_t *v = malloc(kN * sizeof *v);
  CHECK(v != NULL);
  for (size_t i = 0; i < kN; i++) v[i] = (i * 2654435761u) % kN;
  qsort(v, kN, sizeof *v, cmp);
  CHECK(v[0] == 0 && v[kN - 1] == kN - 1);
  unsigned after_qsort = state();
  const char *line = background_line();
  printf("background libc: after qsort: state %u, %s\n", after_qsort, line);
  if (after_qsort == USLAB_BACKGROUND_NONE) {
    printf("background libc: this libc's qsort freed no big buffer; the libc-caller case was not "
           "reached (skipped)\n");
  } else {
    /* Wanted, not started inside libc's free. */
    CHECK(after_qsort == USLAB_BACKGROUND_WANTED);
    CHECK(strstr(line, "called from inside libc") != NULL);
    CHECK(thread_count() == 1);
    /* The program's own next call starts it. */
    free(v);
    v = NULL;
    CHECK(state() == USLAB_BACKGROUND_RUNNING);
    CHECK(find_thread("uslab-bg") != 0);
  }
  free(v);
}

static void test_cannot_start(int seccomp) {
  if (seccomp) {
    /* clone and clone3 refused with EPERM, every other call allowed. */
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 435 /* __NR_clone3 */, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    };
    struct sock_fprog prog = {sizeof f / sizeof *f, f};
    CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
  } else {
    fail_create = 1;
  }
  long before = rss_kib(), meta = metadata_kib();
  peak_and_free();
  const char *line = background_line();
  printf("background %s: %s\n", seccomp ? "seccomp" : "fail", line);
  CHECK(state() == USLAB_BACKGROUND_FAILED);
  CHECK(thread_count() == 1);
  CHECK(strstr(line, seccomp ? "seccomp filter" : "could not be created") != NULL);
  CHECK(back_on_calls(before, meta));
}

static void test_fork(void) {
  peak_and_free();
  CHECK(state() == USLAB_BACKGROUND_RUNNING);
  CHECK(thread_count() == 2);
  pid_t pid = fork();
  if (pid == 0) {
    int ok = state() == USLAB_BACKGROUND_NONE && thread_count() == 1;
    peak_and_free();
    ok = ok && state() == USLAB_BACKGROUND_RUNNING && find_thread("uslab-bg") != 0;
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A program still allocating 30 ms after its first allocator call gets the thread,
 * and with it the live region, with nothing to give back (live statistics on). */
static void test_age(void) {
  for (int i = 0; i < 200 && state() != USLAB_BACKGROUND_RUNNING; i++) {
    char *p = malloc(100000); /* a large call: the decay clock is read */
    if (p) memset(p, 1, 100000);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
    sleep_ms(10);
  }
  CHECK(state() == USLAB_BACKGROUND_RUNNING);
  CHECK(find_thread("uslab-bg") != 0);
  CHECK(proc_maps_has("uslab-live"));
}

/* Waits up to 10 s (times USLAB_TEST_SLOWDOWN) for child pid; its exit status, or -1
 * when it was still alive (then killed). */
static int wait_child(pid_t pid) {
  const char *slow = getenv("USLAB_TEST_SLOWDOWN");
  long limit_ms = 10000 * (slow ? atol(slow) : 1);
  for (long waited = 0; waited < limit_ms; waited += 10) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    sleep_ms(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

static void *worker_then_exit(void *arg) {
  (void)arg;
  sleep_ms(50); /* main has called pthread_exit by now */
  peak_and_free();
  return NULL;
}

static void *fork_then_return(void *arg) {
  (void)arg;
  pid_t pid = fork();
  if (pid == 0) {
    peak_and_free(); /* the child's own thread */
    return (void *)(intptr_t)(state() == USLAB_BACKGROUND_RUNNING ? 0 : 1);
  }
  return (void *)(intptr_t)wait_child(pid);
}

static void test_last(void) {
  pid_t pid = fork();
  if (pid == 0) {
    peak_and_free();
    if (state() != USLAB_BACKGROUND_RUNNING) _exit(3);
    pthread_t t;
    pthread_create(&t, NULL, worker_then_exit, NULL);
    pthread_exit(NULL);
  }
  int st = wait_child(pid);
  if (st != 0) fprintf(stderr, "main's pthread_exit: the child ended with %d (-1: never)\n", st);
  CHECK(st == 0);

  pthread_t t;
  void *ret = NULL;
  pthread_create(&t, NULL, fork_then_return, NULL);
  pthread_join(t, &ret);
  if (ret) fprintf(stderr, "a thread's child: it ended with %d (-1: never)\n", (int)(intptr_t)ret);
  CHECK(ret == NULL);
}

static void test_short(void) {
  void *p[1000];
  for (int round = 0; round < 100; round++) {
    for (int i = 0; i < 1000; i++) p[i] = malloc(64 + i);
    for (int i = 0; i < 1000; i++) free(p[i]);
  }
  CHECK(state() == USLAB_BACKGROUND_NONE);
  CHECK(thread_count() == 1);
  CHECK(strstr(background_line(), "not started") != NULL);
}

int main(int argc, char **argv) {
  require_uslab();
  memset(objs, 0, sizeof objs);
  const char *t = argc > 1 ? argv[1] : "short";
  CHECK(thread_count() == 1);
  if (!strcmp(t, "libc"))
    test_libc();
  else if (!strcmp(t, "fail"))
    test_cannot_start(0);
  else if (!strcmp(t, "seccomp"))
    test_cannot_start(1);
  else if (!strcmp(t, "fork"))
    test_fork();
  else if (!strcmp(t, "age"))
    test_age();
  else if (!strcmp(t, "last"))
    test_last();
  else
    test_short();
  return check_done("background");
}
