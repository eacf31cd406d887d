/* test/stress/idle_return.c — memory freed after a peak goes back to the OS within
 * decay_ms whatever the program does next.
 *
 * A single-threaded program allocates a peak of ~64 MB of small objects (16–512 B,
 * all written), frees them in an order unrelated to allocation, then for up to
 * 10 x DECAY_MS (and the slack below) does one of:
 *   none   no allocator call at all (the background thread must do it: with the
 *          default background_thread=auto it is started lazily, by the frees)
 *   large  malloc/free of 100 KB every 20 ms (call-driven decay from large calls)
 *   huge   malloc/free of 8 MiB every 20 ms (the same from huge ones; the block the
 *          program reuses stays resident: allowed on top of the level)
 *   small  100 malloc(64)/free every 20 ms, which the caches serve without a miss
 *   pairs  malloc/free pairs of 40 B in a tight loop (cache hits only)
 * and checks that RSS comes back within max(2 MiB, 10%) of the level before the
 * peak, in time (DECAY_MS plus 100 ms for a noisy machine, times USLAB_TEST_SLOWDOWN
 * where that is set: the emulated guest's runner sets it; printed).
 *
 * With the thread (USLAB_CONF without background_thread=false) it also checks: no
 * thread before the peak (a program that has not freed much has none), then a thread
 * named uslab-bg that blocks the program's signals; in mode `none`, once memory is
 * back it sleeps with no timeout (its futex call shows none) and has no wake-up at
 * all over 1 s, and while pages were pending no more than one per tick (decay_ms/16).
 *
 * With `fork`, the whole test runs in a child forked first (the child has no thread
 * until it too has memory to return). With `objects=N`, the peak is N objects instead
 * of 250000: 40000 (about 10 MB) leave most of the freed slabs pinned by objects the
 * sheaves and depots cache, and less than the start mark free in each page heap; the
 * central lists' free bytes must start the thread then (central.h); 4000000 (at most)
 * make a peak of about 1 GB (the arm64 guest's check).
 *
 * usage: idle_return DECAY_MS none|large|huge|small|pairs [fork] [objects=N]
 *        (run with USLAB_CONF=decay_ms=DECAY_MS[,...]) */
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/proc_self.h"
#include "include/uslab.h"
#include "test/common/check.h"

/* Whether thread tid waits in futex(2) with no timeout, as /proc's syscall file shows
 * it: the background thread's sleep with nothing left to give back (its sleeps
 * between ticks have a timeout). */
static int asleep_with_no_timeout(long tid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
  if (read_small_file(path, buf, sizeof buf) <= 0) return 0;
  long nr;
  unsigned long addr, op, val, timeout;
  if (sscanf(buf, "%ld %lx %lx %lx %lx", &nr, &addr, &op, &val, &timeout) != 5) return 0;
  return nr == SYS_futex && timeout == 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static void use(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* One round of the mode's calls after the frees (none: nothing). */
static void calls(const char *mode) {
  if (!strcmp(mode, "large") || !strcmp(mode, "huge")) {
    size_t n = mode[0] == 'l' ? 100000 : (size_t)8 << 20;
    char *p = malloc(n);
    CHECK(p != NULL);
    if (p) memset(p, 1, n);
    use(p);
    free(p);
  } else if (!strcmp(mode, "small")) {
    void *q[100];
    for (int i = 0; i < 100; i++) use(q[i] = malloc(64));
    for (int i = 0; i < 100; i++) free(q[i]);
  } else if (!strcmp(mode, "pairs")) {
    double t0 = now_ms();
    while (now_ms() - t0 < 20)
      for (int i = 0; i < 1000; i++) {
        void *p = malloc(40);
        use(p);
        free(p);
      }
  }
}

static int background_expected(void) {
  const char *conf = getenv("USLAB_CONF");
  return !conf || !strstr(conf, "background_thread=false");
}

/* The thread blocks the signals a program uses (SigBlk of its status, in hex). */
static int blocks_program_signals(long tid) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
  if (read_small_file(path, buf, sizeof buf) <= 0) return 0;
  const char *s = strstr(buf, "SigBlk:");
  if (!s) return 0;
  unsigned long long mask = strtoull(s + 7, NULL, 16);
  int sigs[] = {SIGHUP, SIGINT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGCHLD, SIGPROF};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    if (!(mask >> (sigs[i] - 1) & 1)) return 0;
  return 1;
}

enum { kMaxObjects = 4000000 }; /* about 1 GB of 16-512 B objects */

/* uslab's own metadata in KiB, from its statistics (0 when it is not preloaded). */
static long metadata_kib(void) {
  int (*get)(uslab_stats_t *, size_t) =
      (int (*)(uslab_stats_t *, size_t))USLAB_TEST_SYMBOL(uslab_stats_get);
  uslab_stats_t s;
  return get && get(&s, sizeof s) == 0 ? (long)(s.metadata >> 10) : 0;
}

/* On a failure: where the memory is. uslab's own view (its statistics), and the
 * process's mappings with the most resident memory (smaps), biggest first. */
static void explain_rss(void) {
  int (*get)(uslab_stats_t *, size_t) =
      (int (*)(uslab_stats_t *, size_t))USLAB_TEST_SYMBOL(uslab_stats_get);
  uslab_stats_t s;
  if (get && get(&s, sizeof s) == 0)
    printf("idle_return: uslab says resident %zu KiB (mapped %zu, metadata %zu, cached %zu), "
           "%u CPUs' sheaves in use, remote-node pending %zu\n",
           s.resident >> 10, s.mapped >> 10, s.metadata >> 10, s.cached >> 10, s.cpus,
           s.remote_node_pending);
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return;
  enum { kTop = 8 };
  char head[kTop][160] = {{0}}, cur[160] = "", line[512];
  long rss[kTop] = {0};
  while (fgets(line, sizeof line, f)) {
    long kib;
    if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ')) {
      size_t n = strcspn(line, "\n");
      if (n >= sizeof cur) n = sizeof cur - 1;
      memcpy(cur, line, n);
      cur[n] = 0;
    } else if (sscanf(line, "Rss: %ld kB", &kib) == 1) {
      for (int i = 0; i < kTop; i++)
        if (kib > rss[i]) {
          memmove(&rss[i + 1], &rss[i], sizeof rss[0] * (kTop - 1 - i));
          memmove(&head[i + 1], &head[i], sizeof head[0] * (kTop - 1 - i));
          rss[i] = kib;
          memcpy(head[i], cur, sizeof cur);
          break;
        }
    }
  }
  fclose(f);
  for (int i = 0; i < kTop && rss[i]; i++) printf("  %6ld KiB  %s\n", rss[i], head[i]);
  /* The whole process's account: memory in transparent huge pages, or freed lazily,
   * is resident for the kernel whatever uslab returned. */
  if ((f = fopen("/proc/self/smaps_rollup", "r"))) {
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "Rss:", 4) || !strncmp(line, "AnonHugePages:", 14) ||
          !strncmp(line, "LazyFree:", 9) || !strncmp(line, "Private_Dirty:", 14))
        printf("  rollup %s", line);
    fclose(f);
  }
}

int main(int argc, char **argv) {
  require_uslab();
  long decay_ms = argc > 1 ? atol(argv[1]) : 400;
  const char *mode = argc > 2 ? argv[2] : "none";
  int forked = 0, objects = 250000;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "fork")) forked = 1;
    else if (!strncmp(argv[i], "objects=", 8)) objects = atoi(argv[i] + 8);
  }
  CHECK(objects > 0 && objects <= kMaxObjects);
  if (forked) {
    pid_t pid = fork();
    if (pid > 0) {
      int st = 0;
      CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
      return check_done("idle_return (parent)");
    }
    CHECK(pid == 0);
    printf("idle_return: in a forked child\n");
  }
  int with_thread = background_expected();
  /* Nothing freed yet: no thread (a short program never gets one), unless asked for
   * from the start. */
  const char *conf = getenv("USLAB_CONF");
  CHECK(thread_count() == (conf && strstr(conf, "background_thread=true") && !forked ? 2 : 1));
  static void *objs[kMaxObjects]; /* not on the heap: only the peak should move RSS */
  memset(objs, 1, (size_t)objects * sizeof *objs); /* resident before the level is taken */
  long before = rss_kib(), meta_before = metadata_kib();

  uint64_t seed = 88172645463325252ull;
  size_t bytes = 0;
  for (int i = 0; i < objects; i++) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    size_t size = 16 + seed % 497;
    objs[i] = malloc(size);
    CHECK(objs[i] != NULL);
    if (objs[i]) memset(objs[i], i & 0xff, size);
    bytes += size;
  }
  long peak = rss_kib();
  double t_free = now_ms();
  for (int i = 0; i < objects; i++) /* in an order unrelated to allocation */
    free(objs[(size_t)i * 7919 % (size_t)objects]);
  double t0 = now_ms();
  long freed = rss_kib();
  long tid = find_thread("uslab-bg");
  long sleeps0 = tid ? thread_sleeps(tid) : 0;

  /* Back within 2 MiB (or a tenth) of the start, plus what uslab's own metadata grew
   * by: a thread that ran on many CPUs made their shards' arrays resident (the
   * statistics count them), which are not memory the program freed. */
  long allowed = before + (before / 10 > 2048 ? before / 10 : 2048) + (metadata_kib() - meta_before);
  if (!strcmp(mode, "huge")) allowed += 8 * 1024 + 64; /* the block the program reuses */
  /* Within decay_ms of the frees, plus 100 ms for a slow machine: ticks and the calls
   * that run them come late there, never early; more under emulation, whose runner
   * says how much slower it is. */
  const char *slowdown = getenv("USLAB_TEST_SLOWDOWN");
  const long slack_ms = 100 * (slowdown && atol(slowdown) > 1 ? atol(slowdown) : 1);
  long now = freed;
  double back_ms = -1, waited = 0;
  while (waited < 10 * decay_ms + slack_ms) {
    calls(mode);
    if (strcmp(mode, "pairs")) sleep_ms(20);
    waited = now_ms() - t0;
    now = rss_kib();
    if (now <= allowed) {
      back_ms = waited;
      break;
    }
  }
  printf("idle_return %s: %zu MB of small objects; RSS %ld KiB before, %ld at the peak, %ld after "
         "the frees (%.0f ms), %ld after %.0f ms (decay %ld ms): %s\n",
         mode, bytes >> 20, before, peak, freed, t0 - t_free, now, waited, decay_ms,
         back_ms >= 0 ? "back" : "NOT back");
  CHECK(peak > before + (long)(bytes >> 11)); /* the peak really happened: half its KiB */
  if (back_ms < 0) explain_rss();
  CHECK(back_ms >= 0);
  CHECK(back_ms < decay_ms + slack_ms);

  if (with_thread) {
    if (!tid) tid = find_thread("uslab-bg");
    CHECK(tid != 0);
    CHECK(thread_count() == 2);
    if (tid) CHECK(blocks_program_signals(tid));
    if (tid && !strcmp(mode, "none")) {
      /* Asleep once nothing is left: no wake-up at all while the program idles. */
      long tick_ms = decay_ms / 16 > 0 ? decay_ms / 16 : 1;
      double t_pending = now_ms() - t_free;
      long pending_sleeps = thread_sleeps(tid) - sleeps0;
      sleep_ms(decay_ms + 4 * tick_ms); /* whatever was left is returned by now */
      /* and the thread's last steps (closing the sheaves, writing the live statistics)
       * done: under emulation they may still run. */
      double asleep_by = now_ms() + 3000.0 * (slowdown && atol(slowdown) > 1 ? atol(slowdown) : 1);
      while (!asleep_with_no_timeout(tid) && now_ms() < asleep_by) sleep_ms(10);
      CHECK(asleep_with_no_timeout(tid));
      long s0 = thread_switches(tid);
      sleep_ms(1000);
      long idle_switches = thread_switches(tid) - s0;
      printf("idle_return: the background thread slept %ld times in the %.0f ms memory "
             "was pending (ticks every %ld ms), switched %ld times in 1 s idle with nothing "
             "pending\n",
             pending_sleeps, t_pending, tick_ms, idle_switches);
      CHECK(idle_switches == 0);
      /* One sleep per tick, and the wake-ups of the frees that found it asleep; its
       * preemptions by other work (the machine's, not uslab's) are not counted. */
      CHECK(pending_sleeps <= 2 * (long)(t_pending / tick_ms) + 4);
    }
  } else {
    CHECK(thread_count() == 1);
  }
  return check_done("idle_return");
}
