/* test/stress/cache_bound.c — in the per-CPU mode, the memory cached in front of the
 * slabs depends on the number of CPUs, not of threads. The same million small
 * allocations are made first by 2 threads, then by 1000 threads that all stay alive
 * until the cached bytes are read from uslab's statistics. Passes when no thread has a
 * cache of its own and the cached bytes stay within a bound that does not involve the
 * thread count: the per-CPU budget times the CPUs in use, plus the depots' bound
 * (per class 256 KiB shared out over the shards, at least 64 KiB per shard: at most
 * 1 MiB per class with up to 16 shards). In the per-thread mode only the report runs (there the
 * 1000-thread figure is about 1000 times the 2-thread one).
 *
 * usage: cache_bound */
#include <pthread.h>
#include <stdint.h>

#include "test/common/check.h"

typedef void (*stats_print_fn)(void (*)(void *, const char *), void *);

struct cached {
  int percpu;
  unsigned cpus_used;
  size_t budget, thread_caches, cpu, depot, thread;
};

static void collect(void *opaque, const char *line) {
  struct cached *c = opaque;
  if (strstr(line, "uslab stats (mode: percpu")) {
    c->percpu = 1;
    const char *p = strstr(line, "; ");
    if (p) sscanf(p, "; %u of %*u CPUs used, %zu bytes of capacity per CPU, %zu thread caches",
                  &c->cpus_used, &c->budget, &c->thread_caches);
  }
  sscanf(line, "cached: %zu bytes in CPU sheaves, %zu in depots, %zu in thread caches", &c->cpu,
         &c->depot, &c->thread);
}

static struct cached read_cached(void) {
  struct cached c = {0};
  stats_print_fn print = (stats_print_fn)dlsym(RTLD_DEFAULT, "uslab_stats_print");
  print(collect, &c);
  return c;
}

static pthread_barrier_t freed, done;
static long bursts;

static uint64_t next_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static void *worker(void *arg) {
  uint64_t s = (uintptr_t)arg + 1;
  void *v[1000];
  for (long b = 0; b < bursts; b++) {
    for (int i = 0; i < 1000; i++) {
      v[i] = malloc(16 + next_rand(&s) % 241);
      memset(v[i], 0x5a, 16);
    }
    for (int i = 0; i < 1000; i++) free(v[i]);
  }
  pthread_barrier_wait(&freed); /* main reads the stats while every thread lives */
  pthread_barrier_wait(&done);
  return NULL;
}

static struct cached phase(int threads, long per_thread_bursts) {
  pthread_t *ts = malloc(sizeof *ts * (size_t)threads);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 << 10);
  bursts = per_thread_bursts;
  pthread_barrier_init(&freed, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
  for (int t = 0; t < threads; t++)
    CHECK(pthread_create(&ts[t], &attr, worker, (void *)(uintptr_t)t) == 0);
  pthread_barrier_wait(&freed);
  struct cached c = read_cached();
  pthread_barrier_wait(&done);
  for (int t = 0; t < threads; t++) pthread_join(ts[t], NULL);
  pthread_barrier_destroy(&freed);
  pthread_barrier_destroy(&done);
  pthread_attr_destroy(&attr);
  free(ts);
  return c;
}

int main(void) {
  require_uslab();
  struct cached two = phase(2, 500);
  struct cached many = phase(1000, 1);
  size_t total2 = two.cpu + two.depot + two.thread, total1000 = many.cpu + many.depot + many.thread;
  printf("cache_bound: cached bytes with 2 threads %zu (cpu %zu, depot %zu, thread %zu), "
         "with 1000 threads %zu (cpu %zu, depot %zu, thread %zu)\n",
         total2, two.cpu, two.depot, two.thread, total1000, many.cpu, many.depot, many.thread);
  if (!many.percpu) {
    printf("cache_bound: per-thread mode, nothing to bound\n");
    return check_done("cache_bound");
  }
  size_t depot_bound = (size_t)40 << 20;  /* 40 classes x 1 MiB */
  CHECK(many.thread_caches == 0);
  CHECK(many.thread == 0);
  CHECK(many.cpu <= (size_t)many.cpus_used * many.budget);
  CHECK(many.depot <= depot_bound);
  CHECK(total1000 <= (size_t)many.cpus_used * many.budget + depot_bound);
  return check_done("cache_bound");
}
