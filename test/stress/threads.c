/* test/stress/threads.c — multi-threaded stress with content verification, modelled
 * on mimalloc's test-stress: threads allocate random sizes (mostly small, some large,
 * a few huge) with malloc, calloc, aligned allocation, uslab_alloc_bulk and an
 * object cache, fill each block with a pattern derived from its address and size,
 * swap blocks through shared transfer slots (so other threads free them), verify
 * every block before freeing it (free, uslab_free_bulk or uslab_free_deferred), and
 * are all destroyed and recreated each round.
 * Options: "signals" runs a signal storm (setitimer every 200 us) throughout, which
 * aborts rseq critical sections all the time; "migrate" makes every thread move
 * itself to a random allowed CPU every 64 operations (sched_setaffinity), so the
 * per-CPU sheaves see constant migration with more threads than CPUs.
 *
 * usage: threads [THREADS] [ROUNDS] [SCALE] [signals] [migrate]
 * Prints a report line: operations, threads, bytes moved, failures (must be 0). */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/time.h>

#include "include/uslab.h"
#include "test/common/check.h"
#include "test/common/signal_storm.h"

#define TRANSFERS 1000

static int nthreads = 8, rounds = 10, scale = 50, migrate, storm;
static cpu_set_t allowed;
static int allowed_count;
static atomic_ulong migrations;
static _Atomic(uint64_t *) transfer[TRANSFERS];
static atomic_ulong ops, bytes, failures, signals_seen;
static uslab_cache_t *cache;
enum { kCacheWords = 40 };  /* the cache's objects: 320 bytes */

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static size_t pick_size(uint64_t *r) {
  uint64_t x = next_rand(r) % 10000;
  if (x < 9880) return 1 + next_rand(r) % 512;             /* small */
  if (x < 9990) return 1 + next_rand(r) % 40000;           /* up to mid */
  if (x < 9999) return 40000 + next_rand(r) % 1000000;     /* large */
  return 4000000 + next_rand(r) % 4000000;                 /* huge */
}

/* Layout: word 0 = size in words, word 1 = seed, words 2.. = pattern of the seed. */
static uint64_t pattern(uint64_t seed, size_t i) { return (seed ^ i) * 0x9e3779b97f4a7c15ull; }

static void stamp(uint64_t *p, size_t from, size_t words) {
  p[0] = words;
  for (size_t i = from; i < words; i++) p[i] = pattern(p[1], i);
}

static int verify(const uint64_t *p, size_t words) {
  for (size_t i = 2; i < words; i++)
    if (p[i] != pattern(p[1], i)) {
      atomic_fetch_add(&failures, 1);
      fprintf(stderr, "corrupted block %p word %zu\n", (const void *)p, i);
      return 0;
    }
  return 1;
}

static size_t pick_words(uint64_t *r) { return (pick_size(r) + 7) / 8 + 2; }

static uint64_t *block_new(uint64_t *r) {
  size_t words = pick_words(r);
  uint64_t *p;
  switch (next_rand(r) % 8) {
    case 0:
    case 1:
      p = calloc(words, 8);
      break;
    case 2: {
      size_t align = (size_t)16 << next_rand(r) % 9;  /* 16 … 4096 */
      if (posix_memalign((void **)&p, align, words * 8) != 0) p = NULL;
      if (p && (uintptr_t)p % align) atomic_fetch_add(&failures, 1);
      break;
    }
    case 3:
      words = kCacheWords;
      p = uslab_cache_alloc(cache);
      break;
    default:
      p = malloc(words * 8);
  }
  if (!p) {
    atomic_fetch_add(&failures, 1);
    return NULL;
  }
  p[1] = next_rand(r);
  stamp(p, 2, words);
  atomic_fetch_add(&bytes, words * 8);
  return p;
}

/* realloc to a new random size: the common prefix must survive the move. */
static uint64_t *block_resize(uint64_t *p, uint64_t *r) {
  if (!p) return block_new(r);
  size_t old = p[0], words = pick_words(r);
  uint64_t *q = realloc(p, words * 8);
  if (!q) {
    atomic_fetch_add(&failures, 1);
    return p;
  }
  verify(q, old < words ? old : words);
  stamp(q, old < words ? old : words, words);
  atomic_fetch_add(&bytes, words * 8);
  return q;
}

static void block_free(uint64_t *p) {
  if (!p) return;
  verify(p, p[0]);
  free(p);
}

/* Frees through the deferred path (no reader holds these blocks: they just take the
 * grace-period route back). */
static void block_free_deferred(uint64_t *p) {
  if (!p) return;
  verify(p, p[0]);
  uslab_free_deferred(p);
}

/* A batch of n blocks of one size from uslab_alloc_bulk into dst. */
static size_t blocks_new_bulk(uint64_t *r, uint64_t **dst, size_t n) {
  size_t words = pick_words(r) % 64 + 2;
  void *out[16];
  if (uslab_alloc_bulk(words * 8, n, out) != n) {
    atomic_fetch_add(&failures, 1);
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t *p = out[i];
    p[1] = next_rand(r);
    stamp(p, 2, words);
    dst[i] = p;
  }
  atomic_fetch_add(&bytes, n * words * 8);
  return n;
}

/* Pin the calling thread to one random CPU of the process's allowed set. */
static void move_to_random_cpu(uint64_t *r) {
  int k = (int)(next_rand(r) % (uint64_t)allowed_count);
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, &allowed) && k-- == 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      if (sched_setaffinity(0, sizeof one, &one) == 0) atomic_fetch_add(&migrations, 1);
      return;
    }
}

static void *worker(void *arg) {
  uint64_t r = (uintptr_t)arg * 7919 + 1;
  if (storm) storm_worker();
  size_t steps = 100 * (size_t)scale * ((uintptr_t)arg % 8 + 1);
  size_t cap = 1000, n = 0;
  uint64_t **mine = malloc(cap * sizeof *mine);
  for (size_t s = 0; s < steps; s++) {
    if (migrate && s % 64 == 0) move_to_random_cpu(&r);
    uint64_t x = next_rand(&r) % 100;
    if (n + 16 > cap) {
      cap *= 2;
      mine = realloc(mine, cap * sizeof *mine);
    }
    if (x < 46 || n == 0) {
      mine[n++] = block_new(&r);
    } else if (x < 48) {
      n += blocks_new_bulk(&r, mine + n, next_rand(&r) % 16 + 1);
    } else if (x < 66) {
      size_t k = next_rand(&r) % n;
      if (x < 60)
        block_free(mine[k]);
      else
        block_free_deferred(mine[k]);
      mine[k] = mine[--n];
    } else if (x < 75) { /* a bulk free of up to 8 random blocks, any sizes */
      void *batch[8];
      size_t m = next_rand(&r) % 8 + 1, k = 0;
      while (k < m && n > 0) {
        size_t i = next_rand(&r) % n;
        if (mine[i]) verify(mine[i], mine[i][0]);
        batch[k++] = mine[i];  /* NULLs (failed allocations) are skipped by the call */
        mine[i] = mine[--n];
      }
      uslab_free_bulk(k, batch);
    } else if (x < 85) {
      size_t k = next_rand(&r) % n;
      mine[k] = block_resize(mine[k], &r);
    } else { /* hand a block to whichever thread takes this slot next */
      size_t k = next_rand(&r) % n, slot = next_rand(&r) % TRANSFERS;
      mine[k] = atomic_exchange(&transfer[slot], mine[k]);
    }
    atomic_fetch_add(&ops, 1);
  }
  for (size_t k = 0; k < n; k++) block_free(mine[k]);
  free(mine);
  return NULL;
}

static void on_alarm(int sig) {
  (void)sig;
  atomic_fetch_add(&signals_seen, 1);
}

int main(int argc, char **argv) {
  require_uslab();
  if (argc > 1) nthreads = atoi(argv[1]);
  if (argc > 2) rounds = atoi(argv[2]);
  if (argc > 3) scale = atoi(argv[3]);
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "signals")) storm = 1;
    else if (!strcmp(argv[i], "migrate")) migrate = 1;
    else {
      fprintf(stderr, "threads: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  allowed_count = CPU_COUNT(&allowed);
  if (storm) storm_start(on_alarm, 200);
  cache = uslab_cache_create("stress", kCacheWords * 8, 0, 0, NULL);
  CHECK(cache != NULL);
  pthread_t *ts = malloc(sizeof *ts * (size_t)nthreads);
  for (int round = 0; round < rounds; round++) {
    for (int t = 0; t < nthreads; t++)
      CHECK(pthread_create(&ts[t], NULL, worker, (void *)(uintptr_t)(round * nthreads + t)) == 0);
    for (int t = 0; t < nthreads; t++) pthread_join(ts[t], NULL);
    /* Half of the transfer slots survive into the next round. */
    for (int k = 0; k < TRANSFERS; k += 2) block_free(atomic_exchange(&transfer[k], NULL));
  }
  for (int k = 0; k < TRANSFERS; k++) block_free(atomic_exchange(&transfer[k], NULL));
  uslab_deferred_barrier();
  uslab_stats_t st;
  CHECK(uslab_stats_get(&st, sizeof st) == 0 && st.deferred_objects == 0);
  uslab_cache_destroy(cache);  /* every object came back: no report */
  if (storm) {
    storm_stop();
    CHECK(atomic_load(&signals_seen) > 0); /* all taken by workers: main blocks them */
  }
  free(ts);
  if (migrate) CHECK(atomic_load(&migrations) > 0);
  printf("stress: %lu operations, %d threads x %d rounds, %lu bytes moved, %lu signals, "
         "%lu migrations, %lu failures\n",
         atomic_load(&ops), nthreads, rounds, atomic_load(&bytes), atomic_load(&signals_seen),
         atomic_load(&migrations), atomic_load(&failures));
  CHECK(atomic_load(&failures) == 0);
  return check_done("threads");
}
