/* bench/spawn.c — runs a command and reports its resources, for bench/launch.py (uslab ab, bench).
 * A small process forks the command so that the child's peak RSS starts from this
 * process's few pages, not from the (larger) caller's, which Linux would carry into
 * the child's ru_maxrss across fork and exec. Writes to OUT one line:
 *   wall_us user_us sys_us maxrss_kib minor_faults status
 * where status is the exit code, or 128 + the signal number. Each -e NAME=VALUE is put
 * into the command's environment only (LD_PRELOAD, LD_DEBUG: the launcher itself, and
 * perf around it, run without them, so the bindings ab reads are the command's).
 *
 * usage: spawn OUT [-e NAME=VALUE]... CMD [ARG...] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long usec(struct timeval t) { return (long long)t.tv_sec * 1000000 + t.tv_usec; }

int main(int argc, char **argv) {
  int cmd = 2;
  while (cmd + 1 < argc && !strcmp(argv[cmd], "-e")) cmd += 2;
  if (cmd >= argc) {
    fprintf(stderr, "usage: spawn OUT [-e NAME=VALUE]... CMD [ARG...]\n");
    return 2;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 2; i < cmd; i += 2) putenv(argv[i + 1]);
    execvp(argv[cmd], argv + cmd);
    perror(argv[cmd]);
    _exit(127);
  }
  int status;
  struct rusage ru;
  if (pid < 0 || wait4(pid, &status, 0, &ru) < 0) return 2;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  FILE *out = fopen(argv[1], "w");
  if (!out) return 2;
  long long wall = (long long)(t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  fprintf(out, "%lld %lld %lld %ld %ld %d\n", wall, usec(ru.ru_utime), usec(ru.ru_stime),
          ru.ru_maxrss, ru.ru_minflt, code);
  return fclose(out) == 0 ? 0 : 2;
}
