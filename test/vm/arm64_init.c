/* test/vm/arm64_init.c — /init of the arm64 guest's initramfs (test/vm/arm64.sh):
 * mounts /proc, /sys and /dev, runs each check below, prints one line per check
 * ("uslab-guest: NAME: ok" or "... FAIL (why)") and a last one with the count of
 * failures, then powers the guest off. Linked statically: the initramfs holds no
 * shell. A check that names a pattern passes only when its output (stdout and
 * stderr together) also holds it: the preloaded programs' USLAB_STATS report
 * names the fast-path mode, which must be per-CPU. With the kernel argument
 * uslab.rss it runs the memory benchmark instead (rss_compare); with uslab.short,
 * the short shape (the test suite's default run): the unit suite in per-CPU mode
 * alone, no 1 GB peak, 8 s of churn under one registration.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

/* Runs argv with envp; its stdout and stderr (up to cap bytes) in out; its status. */
static int capture(char *const argv[], char *const envp[], char *out, size_t cap) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    close(fd[1]);
    execve(argv[0], argv, envp);
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0;
  ssize_t n;
  while (len < cap - 1 && (n = read(fd[0], out + len, cap - 1 - len)) > 0) len += (size_t)n;
  out[len] = 0;
  char sink[4096];
  while (read(fd[0], sink, sizeof sink) > 0) {
  }
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

/* A number after `"key": ` in a JSON line, or -1. */
static long json_number(const char *json, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(json, pat);
  return p ? atol(p + strlen(pat)) : -1;
}

/* One check: its output to the console, then its line, ok or FAIL, with the guest's
 * seconds it took. */
static void check(const char *name, char *const argv[], char *const envp[], const char *want) {
  static char out[1 << 20];
  fflush(stdout);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int status = capture(argv, envp, out, sizeof out);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long secs = (long)(t1.tv_sec - t0.tv_sec);
  fputs(out, stdout); /* the console log keeps it */
  if (status < 0) {
    printf("uslab-guest: %s: FAIL (pipe)\n", name);
    failures++;
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("uslab-guest: %s: FAIL (status %d, %ld s)\n", name, status, secs);
    failures++;
  } else if (want && !strstr(out, want)) {
    printf("uslab-guest: %s: FAIL (no '%s' in its output)\n", name, want);
    failures++;
  } else {
    printf("uslab-guest: %s: ok (%ld s)\n", name, secs);
  }
}

/* The memory benchmark (kernel argument uslab.rss): bench/rss frag under uslab and
 * each peer whose library the initramfs holds, three alternated rounds, one line
 * each: RSS before, at the peak and after the idle time, in KiB, or why it failed
 * (jemalloc built for 4 KiB pages refuses a 16 KiB kernel). */
static void rss_compare(void) {
  static const struct {
    const char *name, *preload;
  } allocs[] = {{"uslab", "LD_PRELOAD=/libuslab.so"},
                {"glibc", NULL},
                {"jemalloc", "LD_PRELOAD=/lib/libjemalloc.so.2"},
                {"mimalloc", "LD_PRELOAD=/lib/libmimalloc.so.2"}};
  char *argv[] = {"/rss", "frag", "12000", NULL};
  static char out[1 << 20];
  for (int round = 1; round <= 3; round++)
    for (size_t i = 0; i < sizeof allocs / sizeof *allocs; i++) {
      if (allocs[i].preload && access(strchr(allocs[i].preload, '=') + 1, R_OK) != 0) continue;
      char *envp[] = {"PATH=/bin:/", (char *)allocs[i].preload, NULL};
      int status = capture(argv, envp, out, sizeof out);
      if (status != 0) {
        char *nl = strchr(out, '\n');
        if (nl) *nl = 0;
        printf("uslab-guest: rss %d %s: failed (status %d): %.200s\n", round, allocs[i].name,
               status, out);
      } else {
        printf("uslab-guest: rss %d %s: before %ld peak %ld end %ld KiB, back %ld ms\n", round,
               allocs[i].name, json_number(out, "before_kib"), json_number(out, "peak_kib"),
               json_number(out, "end_kib"), json_number(out, "back_ms"));
      }
      fflush(stdout);
    }
}

int main(void) {
  mount("proc", "/proc", "proc", 0, NULL);
  mount("sysfs", "/sys", "sysfs", 0, NULL);
  mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
  mount("tmpfs", "/tmp", "tmpfs", 0, NULL);
  printf("uslab-guest: %ld CPUs online, page size %ld\n", sysconf(_SC_NPROCESSORS_ONLN),
         sysconf(_SC_PAGESIZE));
  char cmdline[4096];
  int cfd = open("/proc/cmdline", O_RDONLY);
  ssize_t clen = cfd >= 0 ? read(cfd, cmdline, sizeof cmdline - 1) : -1;
  cmdline[clen > 0 ? clen : 0] = 0;
  if (strstr(cmdline, "uslab.rss")) {
    rss_compare();
    printf("uslab-guest: done, 0 failed\n");
    fflush(stdout);
    sync();
    reboot(RB_POWER_OFF);
  }

  char *unit[] = {"/unit_tests", NULL};
  char *env_glibc[] = {"PATH=/bin:/", "TMPDIR=/tmp", NULL};
  char *env_own[] = {"PATH=/bin:/", "TMPDIR=/tmp", "GLIBC_TUNABLES=glibc.pthread.rseq=0", NULL};
  char *env_thread[] = {"PATH=/bin:/", "TMPDIR=/tmp", "USLAB_CONF=percpu=false", NULL};
  int full = !strstr(cmdline, "uslab.short");
  check("unit tests, per-CPU through glibc's rseq", unit, env_glibc, NULL);
  if (full) {
    check("unit tests, per-CPU through uslab's own rseq", unit, env_own, NULL);
    check("unit tests, per-thread caches", unit, env_thread, NULL);
  }

  /* The conformance and stress programs that run alone, preloaded: their statistics
   * at exit must name the per-CPU mode. */
  char *env_pre[] = {"PATH=/bin:/", "TMPDIR=/tmp", "LD_PRELOAD=/libuslab.so", "USLAB_STATS=1",
                     NULL};
  const char *percpu = "mode: percpu (rseq, glibc's registration)";
  struct {
    const char *name;
    char *argv[8];
  } progs[] = {
      {"C API conformance", {"/api", NULL}},
      {"C++ operator new/delete conformance", {"/new_delete", NULL}},
      {"statistics match known allocations", {"/stats", NULL}},
      {"object caches and bulk API", {"/bulk_cache", NULL}},
      {"jemalloc API (mallocx family, mallctl)", {"/jemalloc_api", NULL}},
      {"stress: threads migrating between CPUs, with a signal storm",
       {"/stress_threads", "8", "4", "30", "migrate", "signals", NULL}},
  };
  for (size_t i = 0; i < sizeof progs / sizeof *progs; i++)
    check(progs[i].name, progs[i].argv, env_pre, percpu);

  /* A guarded object's use after free, reported as a write or a read from the fault's
   * syndrome (the signal frame's ESR record), and survived (guard_recover). */
  char *env_guard[] = {"PATH=/bin:/", "LD_PRELOAD=/libuslab.so",
                       "USLAB_CONF=guard_sample=1,guard_recover=true", NULL};
  char *uaf_write[] = {"/guarded", "uaf-write", NULL};
  char *uaf_read[] = {"/guarded", "uaf-read", NULL};
  check("guarded sampling: a use after free, written", uaf_write, env_guard,
        "use after free (write)");
  check("guarded sampling: a use after free, read", uaf_read, env_guard,
        "use after free (read)");

  /* Memory back with no allocator call after a peak of about 1 GB (the background
   * thread's work), in the guest's time (USLAB_TEST_SLOWDOWN: the emulated CPU returns
   * 1 GB of 4 KiB pages in seconds, not milliseconds); and a CPU's sheaves
   * given back while the CPU is offline, used again when it is back. */
  char *idle[] = {"/idle_return", "400", "none", full ? "objects=4000000" : "objects=40000",
                  NULL};
  char *env_idle[] = {"PATH=/bin:/", "TMPDIR=/tmp", "LD_PRELOAD=/libuslab.so", "USLAB_STATS=1",
                      "USLAB_CONF=decay_ms=400", "USLAB_TEST_SLOWDOWN=100", NULL};
  check(full ? "memory freed after a 1 GB peak returns, no allocator call"
             : "memory freed after a 10 MB peak returns, no allocator call",
        idle, env_idle, percpu);
  char *hotplug[] = {"/vm_hotplug", NULL};
  char *env_hotplug[] = {"PATH=/bin:/", "TMPDIR=/tmp", "LD_PRELOAD=/libuslab.so", "USLAB_STATS=1",
                         "USLAB_CONF=decay_ms=400,background_thread=true", NULL};
  check("a CPU's sheaves go back while it is offline, and work when it is back", hotplug,
        env_hotplug, percpu);

  /* More threads than CPUs, a SIGALRM every 50 us (each restarts the section it
   * lands in), decay ticks every 25 ms draining and trimming the sheaves. */
  char *churn[] = {"/churn", "8", full ? "20" : "8", "signals", NULL};
  char *env_churn[] = {"LD_PRELOAD=/libuslab.so", "USLAB_STATS=1",
                       "USLAB_CONF=decay_ms=25", NULL};
  char *env_churn_own[] = {"LD_PRELOAD=/libuslab.so", "USLAB_STATS=1",
                           "USLAB_CONF=decay_ms=25", "GLIBC_TUNABLES=glibc.pthread.rseq=0",
                           NULL};
  check("churn under signals, preloaded, glibc's rseq", churn, env_churn,
        "mode: percpu (rseq, glibc's registration)");
  if (full)
    check("churn under signals, preloaded, uslab's own rseq", churn, env_churn_own,
          "mode: percpu (rseq, uslab's registration)");

  printf("uslab-guest: done, %d failed\n", failures);
  fflush(stdout);
  sync();
  reboot(RB_POWER_OFF);
  return 0;
}
