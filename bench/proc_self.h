/* bench/proc_self.h — the calling process's memory and threads from /proc, for the
 * benchmark programs and the tests. Files are read with open/read, not stdio: a
 * sample makes no allocator call, so a program "making no call" really makes none
 * (fopen allocates its FILE and buffer). */
#ifndef USLAB_BENCH_PROC_SELF_H
#define USLAB_BENCH_PROC_SELF_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The file at path into buf (NUL-terminated), at most cap - 1 bytes; its length or -1. */
static inline long read_small_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  long len = 0, n;
  while (len < (long)cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0) len += n;
  close(fd);
  buf[len] = 0;
  return len;
}

/* Whether a mapping of this process names a file whose path holds `name` (the first
 * 256 KiB of /proc/self/maps; no allocation, so it answers with the heap exhausted). */
static inline int proc_maps_has(const char *name) {
  static char buf[256 << 10];
  return read_small_file("/proc/self/maps", buf, sizeof buf) > 0 && strstr(buf, name) != NULL;
}

/* The number after "name:" in a status file (kB for the Vm* fields), or -1. */
static inline long status_file_field(const char *path, const char *name) {
  char buf[4096];
  if (read_small_file(path, buf, sizeof buf) < 0) return -1;
  size_t len = strlen(name);
  for (const char *line = buf; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : 0)
    if (!strncmp(line, name, len) && line[len] == ':') return strtol(line + len + 1, NULL, 10);
  return -1;
}

static inline long proc_status_field(const char *name) {
  return status_file_field("/proc/self/status", name);
}

/* VmHWM, the peak RSS of this process's memory (ru_maxrss would carry the parent's
 * peak across fork and exec). */
static inline long peak_rss_kib(void) { return proc_status_field("VmHWM"); }

/* The resident set now, from /proc/self/statm (cheaper than status, for sampling). */
static inline long rss_kib(void) {
  char buf[128];
  long pages = 0, resident = 0;
  if (read_small_file("/proc/self/statm", buf, sizeof buf) <= 0 ||
      sscanf(buf, "%ld %ld", &pages, &resident) != 2)
    return 0;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* AnonHugePages of /proc/self/smaps_rollup: kB of anonymous memory in huge pages
 * (-1 when unreadable). */
static inline long anon_huge_kib(void) {
  char buf[4096];
  const char *s;
  long v = -1;
  if (read_small_file("/proc/self/smaps_rollup", buf, sizeof buf) > 0 &&
      (s = strstr(buf, "AnonHugePages:")) != NULL)
    sscanf(s + 14, "%ld", &v);
  return v;
}

/* Calls fn(tid, arg) for each thread of this process (getdents64: opendir allocates);
 * returns the number of threads. */
static inline int for_each_task(void (*fn)(long tid, void *arg), void *arg) {
  char buf[8192];
  int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC), count = 0;
  long n;
  if (fd < 0) return -1;
  while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
    for (long off = 0; off < n;) {
      struct {  /* the kernel's linux_dirent64 */
        unsigned long long d_ino;
        long long d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[];
      } *d = (void *)(buf + off);
      off += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      count++;
      if (fn) fn(atol(d->d_name), arg);
    }
  close(fd);
  return count;
}

static inline int thread_count(void) { return for_each_task(NULL, NULL); }

struct named_task {
  const char *name;
  long tid;
};
static inline void match_task_name(long tid, void *arg) {
  struct named_task *t = (struct named_task *)arg;
  char path[64], comm[64];
  snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
  if (read_small_file(path, comm, sizeof comm) > 0) {
    comm[strcspn(comm, "\n")] = 0;
    if (!strcmp(comm, t->name)) t->tid = tid;
  }
}
/* The id of this process's thread named `name` (its comm), or 0. */
static inline long find_thread(const char *name) {
  struct named_task t = {name, 0};
  for_each_task(match_task_name, &t);
  return t.tid;
}

/* A field of thread tid's status (voluntary_ctxt_switches, ...), or -1. */
static inline long thread_status_field(long tid, const char *name) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
  return status_file_field(path, name);
}

/* Context switches of thread tid so far (each sleep and wake-up is one), or -1. */
static inline long thread_switches(long tid) {
  long v = thread_status_field(tid, "voluntary_ctxt_switches");
  long n = thread_status_field(tid, "nonvoluntary_ctxt_switches");
  return v < 0 || n < 0 ? -1 : v + n;
}

/* Times thread tid gave up its CPU itself (a sleep, a wait) so far, or -1; unlike
 * thread_switches, no preemption by other work on the machine counts. */
static inline long thread_sleeps(long tid) {
  return thread_status_field(tid, "voluntary_ctxt_switches");
}

/* CPU time of thread tid (user + system) in clock ticks, or -1. */
static inline long thread_cpu_ticks(long tid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  if (read_small_file(path, buf, sizeof buf) <= 0) return -1;
  const char *p = strrchr(buf, ')');  /* after the comm, which may hold spaces */
  long utime = -1, stime = -1;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) != 2)
    return -1;
  return utime + stime;
}

#endif
