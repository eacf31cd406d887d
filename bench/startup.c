/* bench/startup.c — start-up cost: runs a command RUNS times with each of the LIBS
 * preloaded into it (a comma-separated list; an empty entry preloads nothing),
 * interleaved run by run (A B C A B C ...), so that the VM's slow and fast phases,
 * which last seconds, fall on every library alike. Prints one JSON line per library,
 * in the order given, with the median, mean and minimum wall time of a run (fork to
 * reaped exit). This launcher itself is not preloaded, so every library is timed from
 * the same parent.
 *
 * usage: startup RUNS LIBS CMD [ARG...] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kMaxLibs = 16 };

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One run of argv with lib preloaded; its wall time in µs, or -1 if it failed. */
static double run_once(const char *lib, char **argv) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid == 0) {
    if (lib[0])
      setenv("LD_PRELOAD", lib, 1);
    else
      unsetenv("LD_PRELOAD");
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
    return -1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: startup RUNS LIBS CMD [ARG...]\n");
    return 2;
  }
  int runs = atoi(argv[1]);
  if (runs < 1) return 2;
  char *libs[kMaxLibs];
  int nlibs = 0;
  for (char *p = argv[2];; p++) {
    char *comma = strchr(p, ',');
    if (nlibs == kMaxLibs) return 2;
    libs[nlibs++] = p;
    if (!comma) break;
    *comma = 0;
    p = comma;
  }
  double *us = malloc(sizeof(double) * (size_t)runs * (size_t)nlibs);
  if (!us) return 2;
  unsetenv("LD_PRELOAD");
  for (int i = 0; i < runs; i++)
    for (int l = 0; l < nlibs; l++) {
      /* The order rotates each run, so no library always follows the same one. */
      int k = (l + i) % nlibs;
      double t = run_once(libs[k], argv + 3);
      if (t < 0) {
        fprintf(stderr, "startup: %s failed with LD_PRELOAD=%s\n", argv[3], libs[k]);
        return 1;
      }
      us[(size_t)k * (size_t)runs + (size_t)i] = t;
    }
  for (int l = 0; l < nlibs; l++) {
    double *v = us + (size_t)l * (size_t)runs, total = 0;
    for (int i = 0; i < runs; i++) total += v[i];
    qsort(v, (size_t)runs, sizeof *v, cmp_double);
    printf("{\"lib\": \"%s\", \"runs\": %d, \"median_us\": %.1f, \"mean_us\": %.1f, "
           "\"min_us\": %.1f}\n", libs[l], runs, v[runs / 2], total / runs, v[0]);
  }
  free(us);
  return 0;
}
