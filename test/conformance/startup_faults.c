/* test/conformance/startup_faults.c LIB FLOOR [CMD] — the page faults a process
 * takes because libuslab.so is preloaded into it. Every process pays them under a
 * system-wide preload (/etc/ld.so.preload), and they are a large part of what uslab
 * adds to a start-up (bench/RESULTS.md, startup). Runs CMD (default /bin/true) 20
 * times with LIB preloaded and 20 times with FLOOR, an empty library, and compares
 * the fewest faults of a run (minor + major, from wait4's rusage: exact, where a
 * timing on a shared machine is not). LIB may take at most kMaxExtra more than
 * FLOOR: 4-5 today; 9 with the layout before session 17 (the start-up code in two
 * 64 KiB windows of the text, a window of .rodata read for a few names, small
 * globals over three .bss pages). One to spare for a kernel that does not align the
 * library to 2 MiB, where the start-up code can straddle two windows. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <spawn.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kRuns = 20, kMaxExtra = 6 };

extern char **environ;

/* The fewest faults of kRuns runs of argv with lib preloaded; -1 if a run failed.
 * posix_spawn, with the environment made here: a forked child's own work before
 * exec (copy-on-write faults of this process's pages) would count too. */
static long fewest_faults(const char *lib, char **argv) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof *env), *entry = malloc(strlen(lib) + 12);
  if (!env || !entry) {
    fprintf(stderr, "startup_faults: out of memory\n");
    free(env);
    free(entry);
    return -1;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) env[k++] = environ[i];
  sprintf(entry, "LD_PRELOAD=%s", lib);
  env[k++] = entry;
  env[k] = NULL;
  long best = -1;
  for (int i = 0; i < kRuns && best != -2; i++) {
    pid_t pid;
    int status;
    struct rusage ru;
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, env) != 0 || wait4(pid, &status, 0, &ru) != pid ||
        !WIFEXITED(status) || WEXITSTATUS(status)) {
      fprintf(stderr, "startup_faults: %s failed with LD_PRELOAD=%s\n", argv[0], lib);
      best = -2;
      break;
    }
    long faults = ru.ru_minflt + ru.ru_majflt;
    if (best < 0 || faults < best) best = faults;
  }
  free(entry);
  free(env);
  return best < 0 ? -1 : best;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: startup_faults LIB FLOOR [CMD ARG...]\n");
    return 2;
  }
  static char *def[] = {"/bin/true", NULL};
  char **cmd = argc > 3 ? argv + 3 : def;
  long lib = fewest_faults(argv[1], cmd), floor = fewest_faults(argv[2], cmd);
  if (lib < 0 || floor < 0) return 1;
  printf("%s: %ld page faults with libuslab.so, %ld with an empty library: %ld more (at most %d)\n",
         cmd[0], lib, floor, lib - floor, kMaxExtra);
  return lib - floor <= kMaxExtra ? 0 : 1;
}
