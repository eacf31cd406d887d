/* test/stress/migrate_reuse.c — a thread that moves to another CPU reuses the free
 * memory it left behind. On CPU A it allocates 400000 blocks of 200 bytes (written)
 * and frees 4 of 5, scattered, so every slab keeps survivors; then, pinned to CPU B
 * (another shard with the default shard_cpus=1), it allocates 300000 more. Their
 * room is already free in A's slabs: resident memory may grow by at most 10% of what
 * phase one made resident (uslab grew 70% when shards carved new slabs while another
 * shard's sat 80% free; jemalloc and glibc grow under 1%). Skipped (exit 77) with
 * one CPU.
 *
 * usage: migrate_reuse */
#ifndef _GNU_SOURCE  /* meson passes it; a build by hand may not */
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <unistd.h>

#include "test/common/check.h"

enum { kBlocks = 400000, kSize = 200 };
static void *first[kBlocks], *second[kBlocks];

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  if (f) fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Pins the thread to the n-th CPU it may run on; -1 when there is none. */
static int pin_nth(const cpu_set_t *allowed, int n) {
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, allowed) || n-- > 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    return sched_setaffinity(0, sizeof one, &one) == 0 ? c : -1;
  }
  return -1;
}

int main(void) {
  require_uslab();
  cpu_set_t allowed;
  CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  if (CPU_COUNT(&allowed) < 2) {
    printf("migrate_reuse: one CPU allowed, nothing to move between (skipped)\n");
    return 77;  /* meson's skip: not a pass */
  }
  long start = rss_kib();
  CHECK(pin_nth(&allowed, 0) >= 0);
  for (int i = 0; i < kBlocks; i++) {
    first[i] = malloc(kSize);
    memset(first[i], 1, kSize);
  }
  for (int i = 0; i < kBlocks; i++)
    if (i % 5) {
      free(first[i]);
      first[i] = NULL;
    }
  long one = rss_kib();
  CHECK(pin_nth(&allowed, 1) >= 0);
  for (int i = 0; i < kBlocks * 3 / 4; i++) {
    second[i] = malloc(kSize);
    memset(second[i], 2, kSize);
  }
  long two = rss_kib();
  printf("migrate_reuse: resident %ld KiB at start, %ld after the first CPU, %ld after the "
         "second (+%.1f%%)\n", start, one, two, 100.0 * (two - one) / (one - start));
  CHECK(two - one <= (one - start) / 10);
  for (int i = 0; i < kBlocks; i++) {
    free(first[i]);
    free(second[i]);
  }
  return check_done("migrate_reuse");
}
