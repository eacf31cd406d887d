/* bench/proc_self.h — the calling process's memory and thread count from /proc/self,
 * for the benchmark programs and the tests. */
#ifndef USLAB_BENCH_PROC_SELF_H
#define USLAB_BENCH_PROC_SELF_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The number after "name:" in /proc/self/status (kB for the Vm* fields), or -1. */
static inline long proc_status_field(const char *name) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long value = -1;
  size_t len = strlen(name);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, name, len) && line[len] == ':' && sscanf(line + len + 1, "%ld", &value) == 1)
      break;
  if (f) fclose(f);
  return value;
}

/* VmHWM, the peak RSS of this process's memory (ru_maxrss would carry the parent's
 * peak across fork and exec). */
static inline long peak_rss_kib(void) { return proc_status_field("VmHWM"); }

/* The resident set now, from /proc/self/statm (cheaper than status, for sampling). */
static inline long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  if (f) fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

#endif
