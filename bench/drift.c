/* bench/drift.c — a long-running program whose object sizes drift, the case where
 * transparent huge pages make memory resident that the program never touched: it
 * keeps LIVE objects and replaces one at random REPLACE times per phase, with sizes
 * of 16-256 B, then 256 B-2 KiB, then 2-8 KiB, then 16-256 B again (the working set
 * shrinks back to about 8 MiB), and finally makes no call for IDLE_MS. Like many
 * programs that size a buffer for the worst case, with `sparse` it writes only the
 * first 64 bytes of each object; with `full`, every byte.
 *
 * Prints one JSON line per phase: the bytes live at its end, RSS and AnonHugePages
 * (kB of anonymous memory in huge pages) then, and the peak RSS so far; the last
 * line ("idle") is taken after IDLE_MS without a call.
 *
 * usage: drift sparse|full [LIVE [REPLACE [IDLE_MS]]] */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proc_self.h"

static uint64_t seed = 88172645463325252ull;
static uint64_t next(void) {
  seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
  return seed;
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "sparse") && strcmp(argv[1], "full"))) {
    fprintf(stderr, "usage: drift sparse|full [LIVE [REPLACE [IDLE_MS]]]\n");
    return 2;
  }
  const int full = !strcmp(argv[1], "full");
  const size_t live = argc > 2 ? strtoul(argv[2], NULL, 10) : 60000;
  const long replace = argc > 3 ? atol(argv[3]) : 2000000;
  const long idle_ms = argc > 4 ? atol(argv[4]) : 12000;
  static const struct {
    const char *name;
    size_t lo, hi;
  } phases[] = {{"16-256", 16, 256}, {"256-2K", 256, 2048}, {"2K-8K", 2048, 8192},
                {"back to 16-256", 16, 256}};
  char **objs = calloc(live, sizeof *objs);
  size_t *sizes = calloc(live, sizeof *sizes);
  if (!objs || !sizes) return 1;
  size_t bytes = 0;
  for (size_t p = 0; p < sizeof phases / sizeof *phases; p++) {
    for (long i = 0; i < replace + (p == 0 ? (long)live : 0); i++) {
      size_t k = p == 0 && i < (long)live ? (size_t)i : next() % live;
      free(objs[k]);
      bytes -= sizes[k];
      size_t n = phases[p].lo + next() % (phases[p].hi - phases[p].lo + 1);
      objs[k] = malloc(n);
      if (!objs[k]) return 1;
      memset(objs[k], (int)(i & 0xff), full || n < 64 ? n : 64);
      sizes[k] = n;
      bytes += n;
    }
    printf("{\"phase\": \"%s\", \"touch\": \"%s\", \"live_kib\": %zu, \"rss_kib\": %ld, "
           "\"anon_huge_kib\": %ld, \"peak_rss_kib\": %ld}\n",
           phases[p].name, argv[1], bytes >> 10, rss_kib(), anon_huge_kib(), peak_rss_kib());
    fflush(stdout);
  }
  struct timespec t = {idle_ms / 1000, (idle_ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
  printf("{\"phase\": \"idle\", \"touch\": \"%s\", \"live_kib\": %zu, \"rss_kib\": %ld, "
         "\"anon_huge_kib\": %ld, \"peak_rss_kib\": %ld}\n",
         argv[1], bytes >> 10, rss_kib(), anon_huge_kib(), peak_rss_kib());
  for (size_t k = 0; k < live; k++) free(objs[k]);
  free(objs);
  free(sizes);
  return 0;
}
