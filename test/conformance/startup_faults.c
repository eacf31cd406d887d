/* test/conformance/startup_faults.c LIB FLOOR [CMD] — the page faults a process
 * takes because libuslab.so is preloaded into it. Every process pays them under a
 * system-wide preload (/etc/ld.so.preload), and they are a large part of what uslab
 * adds to a start-up (bench/RESULTS.md, startup). Runs CMD (default /bin/true) 20
 * times with LIB preloaded and 20 times with FLOOR, an empty library, and compares
 * the fewest faults of a run (minor + major, from wait4's rusage: exact, where a
 * timing on a shared machine is not). LIB may take at most kMaxExtra more than
 * FLOOR: 4-5 today; 9 with the earlier layout (the start-up code in two
 * 64 KiB windows of the text, a window of .rodata read for a few names, small
 * globals over three .bss pages). One to spare for a kernel that does not align the
 * library to 2 MiB, where the start-up code can straddle two windows. Both libraries
 * are measured as copies in $TMPDIR (/tmp): a library on a filesystem whose mappings
 * get no fault-around (the emulated guest shares the build over 9p) faulted each page
 * it read, 9-10 more there against 3-5 from a copy on the guest's tmpfs. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <spawn.h>
#include <string.h>
#include <fcntl.h>
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

/* Copies file `from` into directory `dir` as `name`; the copy's path in out. */
static int copy_into(const char *from, const char *dir, const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", dir, name);
  int in = open(from, O_RDONLY), to = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0755);
  char buf[65536];
  ssize_t n = 0;
  while (in >= 0 && to >= 0 && (n = read(in, buf, sizeof buf)) > 0)
    if (write(to, buf, (size_t)n) != n) n = -1;
  int ok = in >= 0 && to >= 0 && n == 0;
  if (in >= 0) close(in);
  if (to >= 0) close(to);
  if (!ok) fprintf(stderr, "startup_faults: cannot copy %s to %s\n", from, out);
  return ok;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: startup_faults LIB FLOOR [CMD ARG...]\n");
    return 2;
  }
  static char *def[] = {"/bin/true", NULL};
  char **cmd = argc > 3 ? argv + 3 : def;
  const char *tmp = getenv("TMPDIR");
  char dir[4096], libcopy[4200], floorcopy[4200];
  snprintf(dir, sizeof dir, "%s/startup_faults.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("startup_faults: mkdtemp");
    return 1;
  }
  int copied = copy_into(argv[1], dir, "libuslab.so", libcopy, sizeof libcopy) &&
               copy_into(argv[2], dir, "floor.so", floorcopy, sizeof floorcopy);
  long lib = copied ? fewest_faults(libcopy, cmd) : -1;
  long floor = copied ? fewest_faults(floorcopy, cmd) : -1;
  unlink(libcopy);
  unlink(floorcopy);
  rmdir(dir);
  if (lib < 0 || floor < 0) return 1;
  printf("%s: %ld page faults with libuslab.so, %ld with an empty library: %ld more (at most %d)\n",
         cmd[0], lib, floor, lib - floor, kMaxExtra);
  return lib - floor <= kMaxExtra ? 0 : 1;
}
