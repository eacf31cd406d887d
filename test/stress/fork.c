/* test/stress/fork.c — fork in a multi-threaded process and from a signal handler
 * (jemalloc#1805, #2019; glibc tst-mallocfork2, jemalloc test/unit/fork.c):
 *  - while 4 threads allocate and free, the main thread forks repeatedly; each child
 *    frees a block allocated before the fork, allocates, creates a thread that
 *    allocates, and exits cleanly;
 *  - a single-threaded loop mallocs and frees while SIGALRM handlers fork; the
 *    children _exit at once (a child of an interrupted malloc may not allocate);
 *  - threads create, fill (bulk), drain and destroy object caches, purge through
 *    mallctl and print the statistics and the topology while the main thread forks;
 *    each child creates a cache, allocates from it, purges and exits within a
 *    deadline. Every lock those calls take must be held across fork (a registry lock
 *    left out hangs children in uslab_cache_create);
 *  - with the heap profiler on (USLAB_CONF prof=true): every allocation sampled
 *    (prof.reset to lg_sample 0), two threads start thread after thread that unwind
 *    their stacks while the main thread forks; each child's sampled allocations
 *    unwind too, within a deadline (a child forked while another thread is inside
 *    libunwind inherits the unwinder's lock held unless fork waits for the unwind).
 * usage: fork [FORKS] */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"

int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static atomic_int stop;

/* Waits for child number i; 1 (and a line naming it) unless it exited with 0. */
static int child_failed(pid_t pid, const char *what, int i) {
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  fprintf(stderr, "%s %d: %s %d\n", what, i, WIFEXITED(st) ? "exit" : "signal",
          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return 1;
}

static void *churn(void *arg) {
  uint64_t r = (uintptr_t)arg;
  void *slots[256] = {0};
  while (!atomic_load(&stop)) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    size_t k = (r >> 33) % 256;
    free(slots[k]);
    slots[k] = malloc((r >> 40) % 50000 + 1);
  }
  for (int k = 0; k < 256; k++) free(slots[k]);
  return NULL;
}

static void *child_thread(void *arg) {
  (void)arg;
  void *p = malloc(1000);
  memset(p, 3, 1000);
  free(p);
  return (void *)1;
}

static int child_work(char *pre) {
  for (int i = 0; i < 100; i++)
    if (pre[i] != 'x') return 10;
  free(pre);
  void *ps[100];
  for (int i = 0; i < 100; i++) ps[i] = malloc((size_t)i * 37 + 1);
  for (int i = 0; i < 100; i++) free(ps[i]);
  pthread_t t;
  void *ok = NULL;
  if (pthread_create(&t, NULL, child_thread, NULL) || pthread_join(t, &ok) || !ok) return 11;
  return 0;
}

static atomic_int signal_forks, signal_fork_failures;
static void on_alarm(int sig) {
  (void)sig;
  int saved = errno;
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid < 0) {
    atomic_fetch_add(&signal_fork_failures, 1);
  } else {
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      atomic_fetch_add(&signal_fork_failures, 1);
    atomic_fetch_add(&signal_forks, 1);
  }
  errno = saved;
}

static atomic_int stop_slow;

static void *cache_churn(void *arg) {
  size_t size = 48 + 16 * (uintptr_t)arg;
  while (!atomic_load(&stop_slow)) {
    uslab_cache_t *c = uslab_cache_create("fork-churn", size, 8, 0, NULL);
    if (!c) continue;  /* all cache slots taken by the moment */
    void *objs[200];
    size_t n = uslab_cache_alloc_bulk(c, 200, objs);
    for (size_t i = 0; i < n; i++) memset(objs[i], 1, size);
    uslab_cache_free_bulk(c, n, objs);
    uslab_cache_destroy(c);
  }
  return NULL;
}

static void discard(void *opaque, const char *text) { (void)opaque, (void)text; }

static void *slow_paths(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_slow)) {
    mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
    uslab_stats_print(discard, NULL);
    uslab_topology_print(discard, NULL);
  }
  return NULL;
}

/* A child of the slow-path phase: a cache of its own, used, then a purge. */
static int cache_child(void) {
  alarm(20);  /* a lock left taken hangs: SIGALRM ends the child */
  uslab_cache_t *c = uslab_cache_create("fork-child", 100, 8, 0, NULL);
  if (!c) return 20;
  void *objs[50];
  if (uslab_cache_alloc_bulk(c, 50, objs) != 50) return 21;
  uslab_cache_free_bulk(c, 50, objs);
  uslab_cache_destroy(c);
  if (mallctl("arena.4096.purge", NULL, NULL, NULL, 0) != 0) return 22;
  uslab_stats_print(discard, NULL);
  uslab_topology_print(discard, NULL);
  char *pre = malloc(100);
  if (!pre) return 23;
  memset(pre, 'x', 100);
  return child_work(pre);
}

static int slow_path_forks(int forks) {
  pthread_t ts[4];
  for (int t = 0; t < 2; t++) pthread_create(&ts[t], NULL, cache_churn, (void *)(uintptr_t)t);
  pthread_create(&ts[2], NULL, slow_paths, NULL);
  pthread_create(&ts[3], NULL, churn, (void *)(uintptr_t)9);
  int bad = 0;
  for (int i = 0; i < forks; i++) {
    pid_t pid = fork();
    if (pid == 0) _exit(cache_child());
    CHECK(pid > 0);
    bad += child_failed(pid, "slow-path child", i);
  }
  atomic_store(&stop_slow, 1);
  atomic_store(&stop, 1);
  for (int t = 0; t < 4; t++) pthread_join(ts[t], NULL);
  return bad;
}

/* A few sampled allocations on a new thread: libunwind's cache of frames is per
 * thread, so a new thread's unwinds take its slow path and its locks. */
static void *sampled_burst(void *arg) {
  (void)arg;
  for (int k = 0; k < 20; k++) free(malloc(64));
  return NULL;
}

/* Threads made one after another, each unwinding its stack as it allocates, until stop. */
static void *sampled_churn(void *arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    pthread_t t;
    if (pthread_create(&t, NULL, sampled_burst, NULL) == 0) pthread_join(t, NULL);
  }
  return NULL;
}

/* Forks beside threads that unwind all the time; a child's own sampled allocations
 * must not find the unwinder's locks held. Skipped (0) without the profiler. */
static int unwinding_forks(int forks) {
  size_t lg = 0;
  if (mallctl("prof.reset", NULL, NULL, &lg, sizeof lg) != 0) return -1;
  atomic_store(&stop, 0);
  pthread_t ts[2];
  for (int t = 0; t < 2; t++) pthread_create(&ts[t], NULL, sampled_churn, NULL);
  int bad = 0;
  for (int i = 0; i < forks; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(20); /* a lock left taken hangs: SIGALRM ends the child */
      for (int k = 0; k < 100; k++) free(malloc(64));
      _exit(0);
    }
    CHECK(pid > 0);
    bad += child_failed(pid, "unwinding child", i);
  }
  atomic_store(&stop, 1);
  for (int t = 0; t < 2; t++) pthread_join(ts[t], NULL);
  lg = 19; /* back to a 512 KiB mean */
  mallctl("prof.reset", NULL, NULL, &lg, sizeof lg);
  return bad;
}

int main(int argc, char **argv) {
  require_uslab();
  int forks = argc > 1 ? atoi(argv[1]) : 200;
  pthread_t ts[4];
  for (int t = 0; t < 4; t++) pthread_create(&ts[t], NULL, churn, (void *)(uintptr_t)(t + 1));
  int bad = 0;
  for (int i = 0; i < forks; i++) {
    char *pre = malloc(100 + (size_t)i);
    memset(pre, 'x', 100);
    pid_t pid = fork();
    if (pid == 0) _exit(child_work(pre));
    CHECK(pid > 0);
    bad += child_failed(pid, "child", i);
    free(pre);
  }
  atomic_store(&stop, 1);
  for (int t = 0; t < 4; t++) pthread_join(ts[t], NULL);
  CHECK(bad == 0);

  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 2000}, {0, 2000}};
  setitimer(ITIMER_REAL, &it, NULL);
  void *slots[1009] = {0};
  uint64_t r = 1;
  while (atomic_load(&signal_forks) < forks) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    size_t k = (r >> 33) % 1009;
    free(slots[k]);
    slots[k] = malloc((r >> 40) % 70000 + 1);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  for (int k = 0; k < 1009; k++) free(slots[k]);
  CHECK(atomic_load(&signal_fork_failures) == 0);

  atomic_store(&stop, 0);
  int slow_bad = slow_path_forks(forks / 4 > 40 ? forks / 4 : 40);
  CHECK(slow_bad == 0);
  int unwind_bad = unwinding_forks(forks);
  CHECK(unwind_bad <= 0);
  printf("fork: %d forks with 4 busy threads (%d bad children), %d forks from signal handlers, "
         "%d forks beside cache, mallctl and stats threads (%d bad children), %s\n",
         forks, bad, atomic_load(&signal_forks), forks / 4 > 40 ? forks / 4 : 40, slow_bad,
         unwind_bad < 0 ? "no profiler: no forks beside unwinding threads"
                        : unwind_bad ? "children hung beside unwinding threads"
                                     : "forks beside unwinding threads, none hung");
  return check_done("fork");
}
