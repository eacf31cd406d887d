/* test/stress/oom.c — out of memory under RLIMIT_AS: every allocation function fails
 * cleanly (NULL with errno = ENOMEM, ENOMEM from posix_memalign, realloc keeps the old
 * block), nothing is corrupted, and the process works normally once memory is freed.
 * Small and large objects are exhausted in turn, twice, with content checks.
 * Guarded samples (USLAB_CONF=guard_sample=4m puts the first inside the rounds) that
 * find no room for the guarded slots open no unwinder: libgcc_s's mapping and the
 * loader's objects would take the last free pages and keep the last segment mapped,
 * and the recovery would come a segment short.
 * With `hop`, the thread moves to another allowed CPU between the large and the small
 * objects: on two nodes (hwloc's synthetic ones in the suite) the small ones then come
 * from the other node's shards, whose heaps have nothing free and cannot map a
 * segment; the first malloc failed until heaps borrowed across nodes in that case.
 * First, 4 KiB and 32 KiB objects are exhausted on one node, freed, and asked for on
 * the other.
 *
 * usage: oom [hop] */
#include <errno.h>
#include <malloc.h>
#include <sched.h>
#include <stdint.h>
#include <sys/resource.h>

#include "bench/proc_self.h"
#include "include/uslab.h"
#include "test/common/check.h"

enum { kMax = 1 << 20 };

static unsigned char *blocks[kMax];

/* Allocates blocks of `size` until malloc fails; returns how many it got. */
static int exhaust(size_t size) {
  int n = 0;
  for (; n < kMax; n++) {
    errno = 0;
    blocks[n] = malloc(size);
    if (!blocks[n]) {
      CHECK(errno == ENOMEM);
      break;
    }
    blocks[n][0] = (unsigned char)n;
    blocks[n][size - 1] = (unsigned char)(n >> 3);
  }
  return n;
}

static void release(int n, size_t size) {
  for (int i = 0; i < n; i++) {
    if (blocks[i][0] != (unsigned char)i || blocks[i][size - 1] != (unsigned char)(i >> 3)) {
      CHECK(!"block contents survived exhaustion");
      break;
    }
  }
  for (int i = 0; i < n; i++) free(blocks[i]);
}

/* With the heap exhausted, every other entry point fails the documented way. */
static void check_failures(void) {
  void *p = (void *)1;
  errno = 0;
  CHECK(calloc(1, 64 << 20) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(aligned_alloc(4096, 64 << 20) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(memalign(1 << 20, 64 << 20) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(valloc(64 << 20) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(pvalloc(64 << 20) == NULL && errno == ENOMEM);
  CHECK(posix_memalign(&p, 64, 64 << 20) == ENOMEM && p == (void *)1);
  errno = 0;
  CHECK(reallocarray(NULL, 1 << 20, 64) == NULL && errno == ENOMEM);
}

/* Guarded objects served so far (uslab's statistics). */
static unsigned long long guarded_served(void) {
  int (*get)(uslab_stats_t *, size_t) =
      (int (*)(uslab_stats_t *, size_t))USLAB_TEST_SYMBOL(uslab_stats_get);
  uslab_stats_t s;
  return get && get(&s, sizeof s) == 0 ? s.guarded_allocations : 0;
}

/* Moves the thread to the next allowed CPU after the one it is on. */
static void hop(void) {
  cpu_set_t allowed, one;
  CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  int here = sched_getcpu(), n = CPU_SETSIZE;
  for (int i = 1; i < n; i++) {
    int c = (here + i) % n;
    if (CPU_ISSET(c, &allowed)) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
      return;
    }
  }
}

/* Objects of a class exhausted and freed on one node serve the other: the first
 * malloc there failed while the memory sat in the first node's empty slabs. */
static void reuse_across_nodes(size_t size) {
  int n = exhaust(size);
  CHECK(n > 10);
  release(n, size);
  hop();
  for (int i = 0; i < 4; i++) {
    errno = 0;
    blocks[i] = malloc(size);
    CHECK(blocks[i] != NULL);
  }
  for (int i = 0; i < 4; i++) free(blocks[i]);
  malloc_trim(0); /* the address space back for the rounds */
}

int main(int argc, char **argv) {
  require_uslab();
  int hopping = argc > 1 && !strcmp(argv[1], "hop");
  struct rlimit lim = {0, 0};
  getrlimit(RLIMIT_AS, &lim);
  int unwinder = proc_maps_has("libgcc_s.so");
  struct rlimit tight = lim;
  tight.rlim_cur = (rlim_t)(proc_status_field("VmSize") + (96 << 10)) << 10; /* 96 MiB more than now */
  CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
  if (hopping) {
    reuse_across_nodes(4096);
    reuse_across_nodes(32768);
  }
  for (int round = 0; round < 2; round++) {
    /* Large objects first, then small ones into the last free pages. */
    int nl = exhaust(1 << 20);
    CHECK(nl > 10);
    if (hopping) hop();
    int ns = 0;
    static unsigned char *small[kMax];
    for (; ns < kMax; ns++) {
      errno = 0;
      small[ns] = malloc(48);
      if (!small[ns]) {
        CHECK(errno == ENOMEM);
        break;
      }
      small[ns][0] = (unsigned char)ns;
    }
    CHECK(ns > 0 && ns < kMax);
    if (ns == 0) { /* what uslab held, to tell where the room went */
      fprintf(stderr, "oom: round %d: no small object after %d large ones, on CPU %d\n", round,
              nl, sched_getcpu());
      malloc_stats();
      break; /* nothing below to check, nor to free */
    }
    if (!unwinder && guarded_served() == 0) CHECK(!proc_maps_has("libgcc_s.so"));
    check_failures();
    /* realloc that cannot grow keeps the old block. */
    unsigned char *keep = small[0];
    errno = 0;
    CHECK(realloc(keep, 64 << 20) == NULL && errno == ENOMEM);
    CHECK(keep[0] == 0);
    for (int i = 0; i < ns; i++) {
      if (small[i][0] != (unsigned char)i) {
        CHECK(!"small block survived exhaustion");
        break;
      }
      free(small[i]);
    }
    release(nl, 1 << 20);
    malloc_trim(0);
    /* Everything works again, large and small, and as many large blocks fit, give or
     * take one segment's worth (3 blocks of 1 MiB): the page heaps' descriptor pools
     * map 256 KiB chunks when they fill, and whether one is mapped just before the
     * last segment decides whether that segment still fits under the limit (VmSize at
     * exhaustion: 127056 or 123216 KiB, one segment less one chunk, over 10 runs). With
     * OS pages larger than 4 KiB the count before exhaustion varies by a segment from
     * run to run (where the kernel places the segments' mappings), in either round:
     * two segments' worth. */
    int again = exhaust(1 << 20);
    if (again != nl) fprintf(stderr, "oom: %d large blocks after recovery, %d before\n", again, nl);
    int room = again >= nl - (uslab_os_page() > 4096 ? 6 : 3);
    CHECK(room);
    if (!room) {
      /* what uslab still held, and the mappings, to tell where the room went */
      malloc_stats();
      FILE *maps = fopen("/proc/self/maps", "r");
      char line[256];
      while (maps && fgets(line, sizeof line, maps)) fputs(line, stderr);
      if (maps) fclose(maps);
    }
    release(again, 1 << 20);
    void *v = malloc(100);
    CHECK(v != NULL);
    free(v);
    printf("oom: round %d: %d large and %d small blocks before ENOMEM, %d large after\n",
           round, nl, ns, again);
  }
  setrlimit(RLIMIT_AS, &lim);
  return check_done("oom");
}
