/* test/conformance/jemalloc_api.c — jemalloc's non-standard API as uslab provides it
 * (compat/jemalloc.cc), checked against jemalloc's documented semantics: *allocx with
 * alignment and zero flags, in-place xallocx, nallocx agreeing with sallocx, and the
 * mallctl subset (epoch, version, stats.*, thread.tcache.flush, arena.0.purge), and
 * uslab's huge-page names beside them.
 *
 * usage: jemalloc_api */
#include <errno.h>
#include <stdint.h>
#include <stdbool.h>
#include <strings.h>
#include <sys/types.h>
#include <time.h>

#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench/proc_self.h"
#include "include/uslab.h"
#include "test/common/check.h"

/* jemalloc's flag encoding (jemalloc.h). */
#define MALLOCX_LG_ALIGN(la) ((int)(la))
#define MALLOCX_ALIGN(a) ((int)(ffs((int)(a)) - 1))
#define MALLOCX_ZERO ((int)0x40)
#define MALLOCX_TCACHE_NONE ((int)((-1 + 2) << 8))
#define MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)

void *mallocx(size_t size, int flags);
void *rallocx(void *ptr, size_t size, int flags);
size_t xallocx(void *ptr, size_t size, size_t extra, int flags);
size_t sallocx(const void *ptr, int flags);
void dallocx(void *ptr, int flags);
void sdallocx(void *ptr, size_t size, int flags);
size_t nallocx(size_t size, int flags);
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen);

static int all_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

static void test_allocx(void) {
  for (size_t size = 1; size < (4u << 20); size = size * 3 / 2 + 1) {
    int flags[] = {0, MALLOCX_TCACHE_NONE, MALLOCX_ARENA(0)};
    for (int f = 0; f < 3; f++) {
      void *p = mallocx(size, flags[f]);
      CHECK(p != NULL);
      CHECK(sallocx(p, 0) >= size);
      CHECK(nallocx(size, flags[f]) == sallocx(p, 0));
      memset(p, 0xa5, size);
      if (f == 2) sdallocx(p, size, 0);
      else dallocx(p, 0);
    }
  }
  for (size_t align = 1; align <= (1u << 20); align *= 2) {
    size_t sizes[] = {1, align / 2 + 1, align, 3 * align + 5, 40000};
    for (int i = 0; i < 5; i++) {
      void *p = mallocx(sizes[i], MALLOCX_ALIGN(align));
      CHECK(p != NULL && (uintptr_t)p % align == 0);
      CHECK(sallocx(p, 0) >= sizes[i]);
      CHECK(nallocx(sizes[i], MALLOCX_LG_ALIGN(ffs((int)align) - 1)) == sallocx(p, 0));
      dallocx(p, 0);
    }
  }
  /* Zeroed even when the memory is reused dirty. */
  for (int round = 0; round < 50; round++) {
    size_t size = 24 + (size_t)round * 97;
    char *d = mallocx(size, 0);
    memset(d, 0xff, size);
    dallocx(d, 0);
    char *z = mallocx(size, MALLOCX_ZERO);
    CHECK(all_zero(z, sallocx(z, 0)));
    dallocx(z, 0);
    z = mallocx(size, MALLOCX_ZERO | MALLOCX_ALIGN(64));
    CHECK((uintptr_t)z % 64 == 0 && all_zero(z, sallocx(z, 0)));
    dallocx(z, 0);
  }
  errno = 1234;
  CHECK(mallocx((size_t)1 << 62, 0) == NULL);
  CHECK(errno == 1234); /* the *allocx functions do not set errno */
  CHECK(nallocx(SIZE_MAX, 0) == 0);
}

static void test_rallocx_xallocx(void) {
  unsigned char *p = mallocx(10, 0);
  for (int i = 0; i < 10; i++) p[i] = (unsigned char)i;
  for (size_t size = 11; size < (2u << 20); size = size * 2 + 3) {
    size_t old = sallocx(p, 0);
    p = rallocx(p, size, MALLOCX_ZERO);
    CHECK(p != NULL);
    for (int i = 0; i < 10; i++) CHECK(p[i] == i);
    CHECK(all_zero(p + old, sallocx(p, 0) - old)); /* zeroed from the old usable size */
    memset(p + 10, 0x77, sallocx(p, 0) - 10);
  }
  p = rallocx(p, 5, 0);
  for (int i = 0; i < 5; i++) CHECK(p[i] == i);
  unsigned char *q = rallocx(p, 3000, MALLOCX_ALIGN(4096));
  CHECK(q && (uintptr_t)q % 4096 == 0);
  for (int i = 0; i < 5; i++) CHECK(q[i] == i);
  dallocx(q, 0);

  /* xallocx never moves: a small object keeps its size class. */
  void *s = mallocx(100, 0);
  size_t usable = sallocx(s, 0);
  CHECK(xallocx(s, 100, 0, 0) == usable);
  CHECK(xallocx(s, 5000, 0, 0) == usable);
  CHECK(sallocx(s, 0) == usable);
  dallocx(s, 0);
  /* A large object grows in place into free pages after it and shrinks in place. */
  char *big = mallocx(100000, 0);
  size_t before = sallocx(big, 0);
  size_t grown = xallocx(big, 200000, 100000, MALLOCX_ZERO);
  CHECK(grown >= before);
  CHECK(sallocx(big, 0) == grown);
  if (grown > before) CHECK(all_zero(big + before, grown - before));
  CHECK(xallocx(big, 50000, 0, 0) >= 50000);
  CHECK(xallocx(big, 50000, 0, 0) < grown);
  dallocx(big, 0);
}

static void test_mallctl(void) {
  uint64_t epoch = 1;
  size_t len = sizeof epoch;
  CHECK(mallctl("epoch", &epoch, &len, &epoch, sizeof epoch) == 0);
  size_t before, after;
  len = sizeof before;
  CHECK(mallctl("stats.allocated", &before, &len, NULL, 0) == 0);
  void *objs[1000];
  for (int i = 0; i < 1000; i++) objs[i] = malloc(1024);
  len = sizeof after;
  CHECK(mallctl("stats.allocated", &after, &len, NULL, 0) == 0);
  CHECK(after == before); /* stats refresh only on an epoch write */
  CHECK(mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0);
  CHECK(mallctl("stats.allocated", &after, &len, NULL, 0) == 0);
  CHECK(after >= before + 1000 * 1024 - 64 * 1024); /* caches may hold a few */
  size_t active, resident, mapped;
  len = sizeof(size_t);
  CHECK(mallctl("stats.active", &active, &len, NULL, 0) == 0 && active >= after);
  CHECK(mallctl("stats.resident", &resident, &len, NULL, 0) == 0);
  CHECK(mallctl("stats.mapped", &mapped, &len, NULL, 0) == 0 && mapped >= active);
  for (int i = 0; i < 1000; i++) free(objs[i]);
  const char *version = NULL;
  len = sizeof version;
  CHECK(mallctl("version", &version, &len, NULL, 0) == 0 && version &&
        strcmp(version, "uslab-" USLAB_VERSION) == 0 && strcmp(uslab_version(), USLAB_VERSION) == 0);
  CHECK(mallctl("thread.tcache.flush", NULL, NULL, NULL, 0) == 0);
  CHECK(mallctl("arena.0.purge", NULL, NULL, NULL, 0) == 0);
  CHECK(mallctl("no.such.name", NULL, NULL, NULL, 0) == ENOENT);
  int small;
  len = sizeof small;
  CHECK(mallctl("stats.allocated", &small, &len, NULL, 0) == EINVAL);
  CHECK(mallctl("stats.allocated", NULL, NULL, &after, sizeof after) == EPERM);
}

/* A peak of ~25 MB of small objects, freed: the pages stay resident for decay_ms. */
static void peak_and_free(void) {
  enum { kObjects = 100000 };
  static void *objs[kObjects];
  for (int i = 0; i < kObjects; i++) {
    objs[i] = malloc(16 + i % 497);
    if (objs[i]) memset(objs[i], 1, 16 + i % 497);
  }
  for (int i = 0; i < kObjects; i++) free(objs[(size_t)i * 7919 % kObjects]);
}

static long ctl_long(const char *name, size_t width) {
  long long v = 0;
  size_t len = width;
  CHECK(mallctl(name, &v, &len, NULL, 0) == 0);
  return width == 4 ? (long)*(int *)&v : (long)v;
}

static void test_purge_names(void) {
  /* The program's own level first (the objs array of peak_and_free is resident). */
  peak_and_free();
  CHECK(mallctl("arena.0.purge", NULL, NULL, NULL, 0) == 0);
  long before = rss_kib();
  /* As redis does after FLUSHALL: the purge index is arenas.narenas ("all"). */
  peak_and_free();
  long peak = rss_kib();
  unsigned narenas = 0;
  size_t len = sizeof narenas;
  CHECK(mallctl("arenas.narenas", &narenas, &len, NULL, 0) == 0 && narenas == 1);
  char name[64];
  snprintf(name, sizeof name, "arena.%u.purge", narenas);
  CHECK(mallctl(name, NULL, NULL, NULL, 0) == 0);
  long after = rss_kib();
  printf("jemalloc_api: %s after a freed peak: RSS %ld -> %ld KiB (before the peak %ld)\n", name,
         peak, after, before);
  CHECK(peak > before + 16 * 1024);
  CHECK(after <= before + 2048); /* at once: decay_ms is 10 s */
  CHECK(mallctl("arena.4096.purge", NULL, NULL, NULL, 0) == 0); /* MALLCTL_ARENAS_ALL */
  CHECK(mallctl("arena.2.purge", NULL, NULL, NULL, 0) == ENOENT); /* no such arena */
  CHECK(mallctl("arena.0.purge", &narenas, &len, NULL, 0) == EPERM); /* takes no value */
  CHECK(mallctl("arena.0.nonsense", NULL, NULL, NULL, 0) == ENOENT);

  /* Decay times: dirty_decay_ms is uslab's decay_ms; -1 is never; no muzzy state. */
  ssize_t decay = 0, want;
  len = sizeof decay;
  CHECK(mallctl("arenas.dirty_decay_ms", &decay, &len, NULL, 0) == 0 && decay == 10000);
  CHECK(mallctl("opt.dirty_decay_ms", &decay, &len, NULL, 0) == 0 && decay == 10000);
  want = 5000;
  CHECK(mallctl("arenas.dirty_decay_ms", &decay, &len, &want, sizeof want) == 0 && decay == 10000);
  CHECK(mallctl("arena.0.dirty_decay_ms", &decay, &len, NULL, 0) == 0 && decay == 5000);
  want = -1;
  CHECK(mallctl("arena.0.dirty_decay_ms", NULL, NULL, &want, sizeof want) == 0);
  CHECK(mallctl("arenas.dirty_decay_ms", &decay, &len, NULL, 0) == 0 && decay == -1);
  want = -2;
  CHECK(mallctl("arenas.dirty_decay_ms", NULL, NULL, &want, sizeof want) == EFAULT);
  int narrow = 0;
  CHECK(mallctl("arenas.dirty_decay_ms", NULL, NULL, &narrow, sizeof narrow) == EINVAL);
  CHECK(mallctl("opt.dirty_decay_ms", &decay, &len, NULL, 0) == 0 && decay == 10000);
  CHECK(mallctl("opt.dirty_decay_ms", NULL, NULL, &want, sizeof want) == EPERM);
  CHECK(mallctl("arenas.muzzy_decay_ms", &decay, &len, NULL, 0) == 0 && decay == 0);
  CHECK(mallctl("opt.muzzy_decay_ms", &decay, &len, NULL, 0) == 0 && decay == 0);
  want = 0;
  CHECK(mallctl("arena.0.muzzy_decay_ms", NULL, NULL, &want, sizeof want) == 0);

  /* arena.<i>.decay returns what stayed unused for the decay time: with 0, all. */
  want = 0;
  CHECK(mallctl("arenas.dirty_decay_ms", NULL, NULL, &want, sizeof want) == 0);
  peak_and_free();
  peak = rss_kib();
  CHECK(mallctl("arena.1.decay", NULL, NULL, NULL, 0) == 0);
  /* Pages freed within the coarse clock's last tick age once it ticks again: two of
   * its ticks, 4 ms each where the kernel runs at 250 Hz as Debian's does (the 2 ms
   * slept before is shorter than one there; the emulated guest once kept 6800 KiB). */
  struct timespec res = {0, 1000000}, ms;
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  long ns = 2 * (res.tv_sec * 1000000000L + res.tv_nsec);
  if (ns < 2000000) ns = 2000000;
  ms.tv_sec = ns / 1000000000L;
  ms.tv_nsec = ns % 1000000000L;
  nanosleep(&ms, NULL);
  CHECK(mallctl("arena.0.decay", NULL, NULL, NULL, 0) == 0);
  after = rss_kib();
  printf("jemalloc_api: arena.<i>.decay with dirty_decay_ms 0: RSS %ld -> %ld KiB\n", peak, after);
  CHECK(after <= before + 2048);
  want = 10000;
  CHECK(mallctl("arenas.dirty_decay_ms", NULL, NULL, &want, sizeof want) == 0);

  /* One arena, and uslab's page (large objects are whole pages of it). */
  CHECK(ctl_long("opt.narenas", sizeof(unsigned)) == 1);
  size_t page = 0;
  len = sizeof page;
  CHECK(mallctl("arenas.page", &page, &len, NULL, 0) == 0);
  CHECK(page >= 4096 && (page & (page - 1)) == 0);
  CHECK(mallctl("arenas.page", NULL, NULL, &page, sizeof page) == EPERM);
  size_t threads = 0;
  CHECK(mallctl("max_background_threads", &threads, &len, NULL, 0) == 0 && threads == 1);
  threads = 0;
  CHECK(mallctl("max_background_threads", NULL, NULL, &threads, sizeof threads) == EINVAL);
}

/* Whether the system's transparent huge pages are on (madvise or always) and uslab's
 * thp option too (USLAB_CONF may turn it off). */
static bool thp_setting_on(void) {
  const char *conf = getenv("USLAB_CONF");
  if (conf && strstr(conf, "thp=false")) return false;
  // With OS pages of 16 or 64 KiB (or uslab told so), a huge page is larger than a
  // segment: none are used.
  if ((conf && strstr(conf, "os_page=")) || sysconf(_SC_PAGESIZE) > 4096) return false;
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f) return false;
  char line[128] = "";
  bool on = fgets(line, sizeof line, f) && !strstr(line, "[never]");
  fclose(f);
  return on;
}

static bool kernel_at_least(int major, int minor) {
  struct utsname u;
  int ma = 0, mi = 0;
  if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

/* background_thread: true by default (auto: memory comes back with no call); false
 * stops a running thread, true starts one at once. */
/* The huge-page names: uslab's own, in jemalloc's stats.* style. stats.thp_resident is
 * the process's AnonHugePages, read when asked: it must match smaps_rollup read around
 * it, with a region of the test's own advised huge pages (most kernels back it). */
static void test_thp_names(void) {
  size_t segments, splits, collapses, resident, len = sizeof(size_t);
  uint64_t epoch = 1;
  /* 24 MiB of 40 KiB blocks, written, after a trim: full segments measured dense (one
   * in 8 in a heap that advises new segments when it makes them), which an explicit
   * decay collapses into huge pages (where the system gives any: setting madvise or
   * always, Linux 6.1+); an allocation never does. */
  enum { kBlocks = 600 };
  char *blocks[kBlocks];
  size_t collapsed_before;
  /* The background thread collapses what stayed queued a whole tick: where the loop
   * below takes longer than that (an emulated machine), it would collapse during it. */
  bool off = false, was = false;
  size_t blen = sizeof was;
  CHECK(mallctl("background_thread", &was, &blen, &off, sizeof off) == 0);
  CHECK(mallctl("arena.0.purge", NULL, NULL, NULL, 0) == 0);
  CHECK(mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0);
  CHECK(mallctl("stats.thp_collapses", &collapsed_before, &len, NULL, 0) == 0);
  for (int i = 0; i < kBlocks; i++) {
    blocks[i] = malloc(40 << 10);
    memset(blocks[i], 1, 40 << 10);
  }
  CHECK(mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0);
  CHECK(mallctl("stats.thp_collapses", &collapses, &len, NULL, 0) == 0);
  CHECK(collapses == collapsed_before);
  CHECK(mallctl("arena.0.decay", NULL, NULL, NULL, 0) == 0);
  CHECK(mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0);
  CHECK(mallctl("stats.thp_segments", &segments, &len, NULL, 0) == 0);
  CHECK(mallctl("stats.thp_splits", &splits, &len, NULL, 0) == 0);
  CHECK(mallctl("stats.thp_collapses", &collapses, &len, NULL, 0) == 0);
  size_t kept;
  CHECK(mallctl("stats.thp_kept", &kept, &len, NULL, 0) == 0);
  uslab_stats_t st;
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  CHECK(st.thp_segments == segments && st.thp_splits == splits && st.thp_collapses == collapses);
  CHECK(st.thp_kept == kept);
  if (thp_setting_on() && kernel_at_least(6, 1)) CHECK(collapses > collapsed_before);
  CHECK(mallctl("background_thread", NULL, NULL, &was, sizeof was) == 0);
  printf("jemalloc_api: %zu segments advised huge pages, %zu collapsed\n", segments, collapses);
  for (int i = 0; i < kBlocks; i++) free(blocks[i]);
  CHECK(mallctl("stats.thp_resident", NULL, NULL, &resident, sizeof resident) == EPERM);
  size_t huge = 2u << 20;
  char *map = mmap(NULL, 3 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(map != MAP_FAILED);
  if (map == MAP_FAILED) return;
  char *aligned = (char *)(((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1));
  madvise(aligned, huge, MADV_HUGEPAGE);
  memset(aligned, 1, huge);
  int agreed = 0;
  for (int i = 0; i < 3 && !agreed; i++) {
    long before = anon_huge_kib();
    CHECK(mallctl("stats.thp_resident", &resident, &len, NULL, 0) == 0);
    long after = anon_huge_kib();
    agreed = before >= 0 && ((long)(resident >> 10) == before || (long)(resident >> 10) == after);
  }
  CHECK(agreed);
  printf("jemalloc_api: stats.thp_resident %zu bytes with a 2 MiB region advised (%s)\n",
         resident, resident >= huge ? "backed by a huge page" : "no huge page given");
  munmap(map, 3 * huge);
}

static void test_background_names(void) {
  bool on = false, off = false;
  size_t len = sizeof on;
  CHECK(mallctl("opt.background_thread", &on, &len, NULL, 0) == 0 && on);
  CHECK(mallctl("background_thread", &on, &len, NULL, 0) == 0 && on);
  peak_and_free(); /* the thread starts (if it had not) */
  CHECK(find_thread("uslab-bg") != 0);
  CHECK(mallctl("background_thread", &on, &len, &off, sizeof off) == 0 && on);
  CHECK(find_thread("uslab-bg") == 0);
  CHECK(thread_count() == 1);
  CHECK(mallctl("background_thread", &on, &len, NULL, 0) == 0 && !on);
  on = true;
  CHECK(mallctl("background_thread", NULL, NULL, &on, sizeof on) == 0);
  CHECK(find_thread("uslab-bg") != 0);
  CHECK(mallctl("opt.background_thread", &on, &len, NULL, 0) == 0 && on);
}

int main(void) {
  require_uslab();
  test_allocx();
  test_rallocx_xallocx();
  test_mallctl();
  test_purge_names();
  test_thp_names();
  test_background_names();
  return check_done("jemalloc_api");
}
