/* bench/startup.c — start-up cost: runs a command RUNS times, one after another, with
 * LIB preloaded into it ("" for none), and prints one JSON line with the median and
 * mean wall time of a run. This launcher itself is not preloaded, so every allocator
 * is timed from the same parent.
 *
 * usage: startup LIB RUNS CMD [ARG...] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: startup LIB RUNS CMD [ARG...]\n");
    return 2;
  }
  const char *lib = argv[1];
  int runs = atoi(argv[2]);
  if (runs < 1) return 2;
  double *us = malloc(sizeof(double) * (size_t)runs), total = 0;
  if (!us) return 2;
  if (lib[0])
    setenv("LD_PRELOAD", lib, 1);
  else
    unsetenv("LD_PRELOAD");
  for (int i = 0; i < runs; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid == 0) {
      execvp(argv[3], argv + 3);
      _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
      fprintf(stderr, "startup: %s failed\n", argv[3]);
      return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    us[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    total += us[i];
  }
  qsort(us, (size_t)runs, sizeof *us, cmp_double);
  printf("{\"runs\": %d, \"median_us\": %.1f, \"mean_us\": %.1f, \"min_us\": %.1f}\n", runs,
         us[runs / 2], total / runs, us[0]);
  free(us);
  return 0;
}
