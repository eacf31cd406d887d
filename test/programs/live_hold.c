/* test/programs/live_hold.c — a process for the live statistics test (live.sh): it
 * allocates KEEP + FREE objects of SIZE bytes in make_records (a site the heap
 * profile must name), frees FREE of them (memory that waits to be returned: the
 * background thread starts), prints "ready" and waits for lines on stdin: "fork"
 * forks a child that does the same with objects of its own, prints "child PID" and
 * waits to be killed; at end of input it kills the child and exits (the exit
 * statistics, USLAB_STATS=json).
 *
 * usage: live_hold KEEP FREE SIZE */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) static void **make_records(size_t n, size_t size) {
  void **p = malloc(n * sizeof *p);
  if (!p) return NULL;
  for (size_t i = 0; i < n; i++) {
    p[i] = malloc(size);
    if (!p[i]) return NULL;
    memset(p[i], (int)i, size);
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: live_hold KEEP FREE SIZE\n");
    return 2;
  }
  size_t keep = strtoul(argv[1], NULL, 10), drop = strtoul(argv[2], NULL, 10);
  size_t size = strtoul(argv[3], NULL, 10);
  void **p = make_records(keep + drop, size);
  if (!p) return 1;
  for (size_t i = keep; i < keep + drop; i++) free(p[i]);
  printf("ready\n");
  fflush(stdout);
  char line[64];
  pid_t child = 0;
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "fork", 4) == 0 && child == 0) {
      child = fork();
      if (child == 0) {
        void **q = make_records(keep + drop, size);  /* the child's own objects */
        if (!q) _exit(1);
        for (size_t i = keep; i < keep + drop; i++) free(q[i]);
        printf("child %d\n", (int)getpid());
        fflush(stdout);
        for (;;) pause();
      }
    }
  }
  if (child > 0) {
    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
  }
  return 0;
}
