/* test/stress/fork.c — fork in a multi-threaded process and from a signal handler
 * (USERS.md A4; glibc tst-mallocfork2, jemalloc test/unit/fork.c):
 *  - while 4 threads allocate and free, the main thread forks repeatedly; each child
 *    frees a block allocated before the fork, allocates, creates a thread that
 *    allocates, and exits cleanly;
 *  - a single-threaded loop mallocs and frees while SIGALRM handlers fork; the
 *    children _exit at once (a child of an interrupted malloc may not allocate).
 * usage: fork [FORKS] */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/common/check.h"

static atomic_int stop;

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
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      bad++;
      fprintf(stderr, "child %d: status %#x\n", i, st);
    }
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
  printf("fork: %d forks with 4 busy threads (%d bad children), %d forks from signal handlers\n",
         forks, bad, atomic_load(&signal_forks));
  return check_done("fork");
}
