// Memory locked with mlockall(MCL_CURRENT | MCL_FUTURE), as real-time and
// secret-holding programs lock it: the kernel refuses MADV_DONTNEED on locked pages
// (EINVAL), so a purge gives nothing back and the pages keep their contents. calloc
// must still read zero where uslab counts a purged span as zeroed, and freeing,
// purging and reusing must keep every object's contents. Exit 77 when memory cannot
// be locked here (RLIMIT_MEMLOCK, no CAP_IPC_LOCK).
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "include/uslab.h"

int mallctl(const char* name, void* old, size_t* oldlen, void* new_value, size_t newlen);

static void purge_all(void) {
  // Every arena (MALLCTL_ARENAS_ALL): the page heap's free spans, purged now.
  if (mallctl("arena.4096.purge", NULL, NULL, NULL, 0) != 0) {
    fprintf(stderr, "mallctl arena.4096.purge failed\n");
    exit(1);
  }
}

// Whether the process has CAP_IPC_LOCK (bit 14 of its effective set), which lifts
// RLIMIT_MEMLOCK.
static int can_lock_unlimited(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long caps = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "CapEff: %llx", &caps) == 1) break;
  if (f) fclose(f);
  return caps >> 14 & 1;
}

int main(void) {
  // Without CAP_IPC_LOCK the limit binds every mapping made after MCL_FUTURE.
  struct rlimit r;
  if (!can_lock_unlimited() && getrlimit(RLIMIT_MEMLOCK, &r) == 0 &&
      r.rlim_cur != RLIM_INFINITY && r.rlim_cur < (256u << 20)) {
    printf("RLIMIT_MEMLOCK is %llu bytes: memory cannot be locked here\n", (unsigned long long)r.rlim_cur);
    return 77;
  }
  if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
    printf("mlockall: %s\n", strerror(errno));
    return 77;
  }
  // Small classes, spans of several pages, large objects.
  static const size_t sizes[] = {48, 1000, 8192, 40000, 100000, 300000, 1 << 20, 3 << 20};
  enum { kObjects = 16, kRounds = 10 };
  long nonzero = 0, corrupt = 0;
  for (int round = 0; round < kRounds; round++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      size_t n = sizes[i];
      unsigned char* p[kObjects];
      for (int k = 0; k < kObjects; k++) {
        p[k] = malloc(n);
        if (!p[k]) return fprintf(stderr, "malloc(%zu) failed\n", n), 1;
        memset(p[k], 0xA5, n);
      }
      for (int k = 0; k < kObjects; k++) free(p[k]);
      purge_all();
      for (int k = 0; k < kObjects; k++) {
        p[k] = calloc(1, n);
        if (!p[k]) return fprintf(stderr, "calloc(%zu) failed\n", n), 1;
        for (size_t j = 0; j < n; j++)
          if (p[k][j]) {
            nonzero++;
            break;
          }
        memset(p[k], k + 1, n);  // each object's own byte, checked below
      }
      purge_all();  // nothing free to purge of these: their contents stay
      for (int k = 0; k < kObjects; k++) {
        for (size_t j = 0; j < n; j++)
          if (p[k][j] != (unsigned char)(k + 1)) {
            corrupt++;
            break;
          }
        free(p[k]);
      }
    }
  }
  // The purges were refused, or the test proved nothing: the statistics count them.
  static char json[1 << 16];
  uslab_stats_json(json, sizeof json);
  const char* at = strstr(json, "\"purge_refused_bytes\":");
  unsigned long long refused = at ? strtoull(at + strlen("\"purge_refused_bytes\":"), NULL, 10) : 0;
  printf("%ld callocs read non-zero bytes, %ld objects changed under purges; %llu bytes of "
         "purges refused\n", nonzero, corrupt, refused);
  return nonzero || corrupt || !refused ? 1 : 0;
}
