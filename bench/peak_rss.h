/* bench/peak_rss.h — the peak RSS of the calling process, for the benchmark programs. */
#ifndef USLAB_BENCH_PEAK_RSS_H
#define USLAB_BENCH_PEAK_RSS_H

#include <stdio.h>

/* VmHWM, the peak RSS of this process's memory (ru_maxrss would carry the parent's
 * peak across fork and exec). */
static long peak_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

#endif
