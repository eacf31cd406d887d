/* test/stress/cache_refill.c — a cache flushed and refilled with other sizes, near a
 * memory limit (the stress suite with memory_limit=64m; the guest suite in a cgroup
 * with memory.max, under uslab and the peers).
 *
 * Keeps LIVE MiB of objects alive and replaces a random one at every step, through
 * five phases whose sizes drift (16-256 B, 256 B-2 KiB, 2-8 KiB, 32-128 KiB, then
 * 16-256 B again), STEPS replacements each, every byte written. Between phases the
 * cache is flushed: every object freed, then LIVE MiB of the next phase's sizes
 * allocated. Those fit no class of the phase before, so the memory just freed is useless
 * to the next phase unless the allocator reuses its pages for other sizes or returns it:
 * one that keeps it (for a decay time, or for ever) holds two phases' worth. The random
 * replacements leave each phase's freed objects cached all over its slabs, so the
 * caches pin slabs until they are drained. Under a limit just above LIVE the run must
 * stay near it: uslab's soft limit gave back its caches and free pages only once per
 * decay tick, and a run this fast (one second) went to 2.7 times LIVE under a limit of
 * 1.25 times (peak 130 MiB for 48 MiB live with memory_limit=60m).
 *
 * `until-enomem`: allocates 1 MiB blocks (written) until malloc returns NULL, which it
 * must do with errno ENOMEM before the kernel's OOM killer acts (run with
 * memory_limit_hard=true in a cgroup), then frees them and allocates 64 MiB again.
 *
 * usage: cache_refill LIVE_MIB STEPS [peak<=MIB | peak>=MIB] | cache_refill until-enomem
 * Prints each phase's peak RSS (VmHWM) and, last, "done"; exits 1 when the peak
 * condition fails (peak>= is the control: the same run without the limit must pass it). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long vm_hwm_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int until_enomem(void) {
  enum { kMax = 1 << 16 };
  static void *blocks[kMax];
  int n = 0;
  errno = 0;
  while (n < kMax && (blocks[n] = malloc(1 << 20)) != NULL) memset(blocks[n++], 1, 1 << 20);
  int err = errno;
  printf("until-enomem: %d MiB allocated, then NULL with errno %d (%s)\n", n, err, strerror(err));
  if (n == kMax || err != ENOMEM) return 1;
  for (int i = 0; i < n; i++) free(blocks[i]);
  void *again = malloc(64 << 20);
  if (!again) return 1;
  memset(again, 2, 64 << 20);
  free(again);
  printf("until-enomem: 64 MiB allocated again after the frees\ndone\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3 && (argc < 2 || strcmp(argv[1], "until-enomem"))) return 2;
  if (!strcmp(argv[1], "until-enomem")) return until_enomem();
  size_t live = (size_t)atol(argv[1]) << 20;
  long steps = atol(argv[2]);
  long max_peak = -1, min_peak = -1;
  if (argc > 3 && sscanf(argv[3], "peak<=%ld", &max_peak) != 1 && sscanf(argv[3], "peak>=%ld", &min_peak) != 1)
    return 2;
  static const size_t lo[] = {16, 256, 2048, 32768, 16}, hi[] = {256, 2048, 8192, 131072, 256};
  uint64_t r = 42;
  size_t slots = 0;
  void **obj = NULL;
  size_t *sz = NULL;
  for (int ph = 0; ph < 5; ph++) {
    /* The cache is flushed (every object freed), then refilled with this phase's. */
    for (size_t i = 0; i < slots; i++) free(obj[i]);
    free(obj);
    free(sz);
    size_t mean = (lo[ph] + hi[ph]) / 2;
    slots = live / mean;
    obj = malloc(slots * sizeof *obj);
    sz = malloc(slots * sizeof *sz);
    if (!obj || !sz) return 3;
    for (size_t i = 0; i < slots; i++) {
      sz[i] = lo[ph] + next_rand(&r) % (hi[ph] - lo[ph]);
      obj[i] = malloc(sz[i]);
      if (!obj[i]) return 4;
      memset(obj[i], (int)i, sz[i]);
    }
    for (long step = 0; step < steps; step++) {
      size_t i = next_rand(&r) % slots;
      free(obj[i]);
      sz[i] = lo[ph] + next_rand(&r) % (hi[ph] - lo[ph]);
      obj[i] = malloc(sz[i]);
      if (!obj[i]) return 4;
      memset(obj[i], (int)step, sz[i]);
    }
    printf("phase %d: %zu objects of %zu-%zu B, peak RSS %ld MiB\n", ph, slots, lo[ph], hi[ph],
           vm_hwm_kib() >> 10);
    fflush(stdout);
  }
  for (size_t i = 0; i < slots; i++) free(obj[i]);
  free(obj);
  free(sz);
  long peak = vm_hwm_kib() >> 10;
  if (max_peak >= 0 && peak > max_peak) {
    printf("FAIL: peak RSS %ld MiB, more than %ld\n", peak, max_peak);
    return 1;
  }
  if (min_peak >= 0 && peak < min_peak) {
    printf("FAIL: peak RSS %ld MiB, less than %ld: the test cannot tell\n", peak, min_peak);
    return 1;
  }
  printf("done\n");
  return 0;
}
