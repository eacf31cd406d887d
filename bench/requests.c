/* bench/requests.c — request latency after a pause, the shape of a server that goes
 * quiet between requests: it keeps a working set (WORKING objects of 16 B - 2 KiB,
 * allocated once and held), sleeps PAUSE ms, then handles a "request": 2000
 * allocations of 16 B - 2 KiB, every byte written, then all of them freed. The time
 * of each request (clock_gettime, µs) is what a user of the server waits on top of
 * its own work; an allocator that empties its caches during the pause makes every
 * request start cold.
 *
 * usage: requests [PAUSE_MS...]   (default: 1 30 1000)
 * Per pause: two requests without a pause first (warm-up, not counted), then as many
 * requests as fit in about 4 s (at least 8, at most 200). Prints one JSON line per
 * pause: the median and the 90th percentile request time in µs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kObjects = 2000, kWorking = 20000, kMaxSize = 2048 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static size_t next_size(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return 16 + rng % (kMaxSize - 15);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void *objs[kObjects];
static double request(void) {
  double t0 = now_us();
  for (int i = 0; i < kObjects; i++) {
    size_t n = next_size();
    objs[i] = malloc(n);
    if (!objs[i]) abort();
    memset(objs[i], i, n);
  }
  for (int i = 0; i < kObjects; i++) free(objs[i]);
  return now_us() - t0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  long default_pauses[] = {1, 30, 1000}, pauses[16];
  int npauses = 0;
  for (int i = 1; i < argc && npauses < 16; i++) pauses[npauses++] = atol(argv[i]);
  if (npauses == 0) {
    memcpy(pauses, default_pauses, sizeof default_pauses);
    npauses = 3;
  }
  void **working = malloc(kWorking * sizeof *working);
  for (int i = 0; i < kWorking; i++) {
    size_t n = next_size();
    working[i] = malloc(n);
    memset(working[i], 1, n);
  }
  static double t[200];
  for (int p = 0; p < npauses; p++) {
    long ms = pauses[p];
    int n = (int)(4000 / (ms + 1));
    n = n < 8 ? 8 : n > 200 ? 200 : n;
    request(), request();
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    for (int i = 0; i < n; i++) {
      nanosleep(&pause, NULL);
      t[i] = request();
    }
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    printf("{\"pause_ms\": %ld, \"requests\": %d, \"median_us\": %.1f, \"p90_us\": %.1f}\n", ms, n,
           t[n / 2], t[n * 9 / 10]);
    fflush(stdout);
  }
  for (int i = 0; i < kWorking; i++) free(working[i]);
  free(working);
  return 0;
}
