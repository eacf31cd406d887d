/* bench/threads.c — multi-threaded workloads, run under each allocator by bench/run.py.
 * Each prints one JSON line: operations per second and the process's peak RSS.
 *
 *   threads xthread THREADS SECONDS   producer/consumer: half the threads allocate
 *                                     (16..512 bytes) into per-pair rings, the other
 *                                     half free what they receive (all frees remote)
 *   threads xnode PCPU CCPU SECONDS   one producer/consumer pair of xthread, the
 *                                     producer pinned to CPU PCPU and the consumer to
 *                                     CCPU (CPUs of two NUMA nodes: every free is of
 *                                     an object of the other node)
 *   threads larson THREADS SECONDS    larson-style server: threads replace random
 *                                     slots of one shared array (16..1024 bytes), so
 *                                     most objects are freed by another thread
 *   threads falseshare THREADS ITERS  each thread allocates a small object, writes it
 *                                     ITERS times, frees it, again: objects of
 *                                     different threads sharing a cache line slow
 *                                     every thread down
 *   threads concurrent THREADS N      the seed "concurrent" test: THREADS threads, each
 *                                     pinned to its own CPU, do N x alloc then N x
 *                                     free for sizes 32 … 4096 at the same time; one
 *                                     JSON line per size and pass with the average
 *                                     TSC cycles per operation of each phase. Two
 *                                     passes over the sizes: "cold" (the process's
 *                                     first use of each size: first-touch of caches
 *                                     and slabs) and "warm" (the same again, the
 *                                     steady state the seed test measured)
 *   threads firstuse THREADS K        start-up of a multi-threaded program: THREADS
 *                                     threads, each pinned to its own CPU, make the
 *                                     process's first use of 40 size classes (16 …
 *                                     3799 bytes) at the same time, K objects of each,
 *                                     then free the objects of the next thread; one
 *                                     JSON line with the average TSC cycles per
 *                                     allocation and per free (the first touches of
 *                                     the allocator's metadata and caches)
 *   threads mem THREADS OBJECTS       THREADS threads, all alive until the end,
 *                                     take turns allocating OBJECTS objects (16..256
 *                                     bytes) and freeing them: peak RSS shows what
 *                                     the caches keep per thread
 * The cycle counts are the TSC's on x86-64; on aarch64 (where only mem runs, in the
 * arm64 guest's footprint table) the generic timer's ticks.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t ticks(void) { return __rdtsc(); }
#else
static inline uint64_t ticks(void) {
  uint64_t v;
  __asm__ volatile("isb; mrs %0, cntvct_el0" : "=r"(v));
  return v;
}
#endif
#include <time.h>
#include <sys/mman.h>

#include "proc_self.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t next_rand(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dull;
}

static atomic_int stop;
static atomic_ulong total_ops;
static int nthreads;

/* --- xthread: producer/consumer through single-producer single-consumer rings --- */
#define RING 1024
struct ring {
  _Alignas(64) atomic_size_t head;
  _Alignas(64) atomic_size_t tail;
  void *slot[RING];
};
static struct ring *rings;

static int pin_cpu[2] = {-1, -1}; /* xnode: the producer's and the consumer's CPU */

static void pin_self(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    perror("threads: sched_setaffinity");
    exit(2);
  }
}

static void *producer(void *arg) {
  pin_self(pin_cpu[0]);
  struct ring *r = &rings[(uintptr_t)arg];
  uint64_t s = (uintptr_t)arg * 2654435761u + 1;
  unsigned long ops = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (h - atomic_load_explicit(&r->tail, memory_order_acquire) == RING) {
      sched_yield(); /* more threads than CPUs: let the consumer run */
      continue;
    }
    char *p = malloc(16 + next_rand(&s) % 497);
    p[0] = 1;
    r->slot[h % RING] = p;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    ops++;
  }
  atomic_fetch_add(&total_ops, ops);
  return NULL;
}

static void *consumer(void *arg) {
  pin_self(pin_cpu[1]);
  struct ring *r = &rings[(uintptr_t)arg];
  unsigned long ops = 0;
  for (;;) {
    size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (t == atomic_load_explicit(&r->head, memory_order_acquire)) {
      if (atomic_load(&stop) && t == atomic_load(&r->head)) break;
      sched_yield();
      continue;
    }
    free(r->slot[t % RING]);
    atomic_store_explicit(&r->tail, t + 1, memory_order_release);
    ops++;
  }
  atomic_fetch_add(&total_ops, ops);
  return NULL;
}

/* --- larson: random replacement in a shared array --- */
#define LARSON_SLOTS 10000
static _Atomic(char *) larson_slots[LARSON_SLOTS];

static void *larson(void *arg) {
  uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 7;
  unsigned long ops = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    for (int i = 0; i < 64; i++) {
      size_t k = next_rand(&s) % LARSON_SLOTS;
      char *p = malloc(16 + next_rand(&s) % 1009);
      p[0] = (char)k;
      free(atomic_exchange_explicit(&larson_slots[k], p, memory_order_acq_rel));
    }
    ops += 64;
  }
  atomic_fetch_add(&total_ops, ops);
  return NULL;
}

/* --- falseshare: private small objects written in a loop --- */
static long fs_iters;
static void *falseshare(void *arg) {
  (void)arg;
  unsigned long ops = 0;
  for (int round = 0; round < 100; round++) {
    volatile long *p = malloc(sizeof(long));
    for (long i = 0; i < fs_iters; i++) *p += i;
    free((void *)p);
    ops += (unsigned long)fs_iters;
  }
  atomic_fetch_add(&total_ops, ops);
  return NULL;
}

/* --- mem: many live threads, each with a burst of small objects --- */
static pthread_barrier_t mem_barrier;
static pthread_mutex_t mem_turn = PTHREAD_MUTEX_INITIALIZER;
static long mem_objects;
static void *mem_worker(void *arg) {
  uint64_t s = (uintptr_t)arg + 1;
  /* One burst at a time, so the peak is one burst plus whatever the caches of all
   * the (still living) threads kept, not 1000 bursts of live data. */
  pthread_mutex_lock(&mem_turn);
  void **v = malloc(sizeof(void *) * (size_t)mem_objects);
  for (long i = 0; i < mem_objects; i++) {
    v[i] = malloc(16 + next_rand(&s) % 241);
    memset(v[i], 1, 16);
  }
  for (long i = 0; i < mem_objects; i++) free(v[i]);
  free(v);
  pthread_mutex_unlock(&mem_turn);
  pthread_barrier_wait(&mem_barrier); /* every thread has had its burst, none has exited */
  atomic_fetch_add(&total_ops, (unsigned long)mem_objects * 2);
  return NULL;
}

/* --- concurrent: every CPU does N x alloc then N x free of one size at once --- */
static pthread_barrier_t conc_barrier;
static long conc_n;
static size_t conc_size;
static _Atomic uint64_t conc_alloc_cycles, conc_free_cycles;
static void *concurrent(void *arg) {
  pin_self((int)(uintptr_t)arg);
  void **v = malloc(sizeof(void *) * (size_t)conc_n);
  pthread_barrier_wait(&conc_barrier);
  uint64_t t0 = ticks();
  for (long i = 0; i < conc_n; i++) v[i] = malloc(conc_size);
  uint64_t t1 = ticks();
  pthread_barrier_wait(&conc_barrier);
  uint64_t t2 = ticks();
  for (long i = 0; i < conc_n; i++) free(v[i]);
  uint64_t t3 = ticks();
  free(v);
  atomic_fetch_add(&conc_alloc_cycles, t1 - t0);
  atomic_fetch_add(&conc_free_cycles, t3 - t2);
  return NULL;
}

/* --- firstuse: every CPU's first use of many size classes at once --- */
enum { kFirstUseClasses = 40 };
static long fu_k;
static void ***fu_objs; /* [thread][class * fu_k + i] */
static _Atomic uint64_t fu_alloc_cycles, fu_free_cycles;
static void *firstuse(void *arg) {
  int t = (int)(uintptr_t)arg;
  pin_self(t);
  void **mine = fu_objs[t], **next = fu_objs[(t + 1) % nthreads];
  pthread_barrier_wait(&conc_barrier);
  uint64_t t0 = ticks();
  for (int c = 0; c < kFirstUseClasses; c++)
    for (long i = 0; i < fu_k; i++) mine[c * fu_k + i] = malloc(16 + (size_t)c * 97);
  uint64_t t1 = ticks();
  pthread_barrier_wait(&conc_barrier);
  uint64_t t2 = ticks();
  for (long i = 0; i < kFirstUseClasses * fu_k; i++) free(next[i]);
  uint64_t t3 = ticks();
  atomic_fetch_add(&fu_alloc_cycles, t1 - t0);
  atomic_fetch_add(&fu_free_cycles, t3 - t2);
  return NULL;
}

static void run(void *(*fn)(void *), int n, uintptr_t arg_base, pthread_t *ts) {
  pthread_attr_t attr; /* small stacks: RSS should show heaps, not stacks */
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 << 10);
  for (int i = 0; i < n; i++)
    pthread_create(&ts[i], &attr, fn, (void *)(arg_base + (uintptr_t)i));
  pthread_attr_destroy(&attr);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: threads xthread|larson|falseshare|mem THREADS ARG\n");
    return 2;
  }
  const char *what = argv[1];
  if (!strcmp(what, "xnode")) { /* one pinned pair: xthread's code with 2 threads */
    if (argc < 5) {
      fprintf(stderr, "usage: threads xnode PCPU CCPU SECONDS\n");
      return 2;
    }
    pin_cpu[0] = atoi(argv[2]);
    pin_cpu[1] = atoi(argv[3]);
    what = "xthread";
    argv[2] = "2";
    argv[3] = argv[4];
  }
  nthreads = atoi(argv[2]);
  double arg = atof(argv[3]);
  pthread_t *ts = calloc((size_t)nthreads * 2, sizeof *ts);
  double t0 = now();
  if (!strcmp(what, "xthread")) {
    int pairs = nthreads / 2 > 0 ? nthreads / 2 : 1;
    rings = aligned_alloc(64, sizeof(struct ring) * (size_t)pairs);
    memset(rings, 0, sizeof(struct ring) * (size_t)pairs);
    run(consumer, pairs, 0, ts);
    run(producer, pairs, 0, ts + pairs);
    struct timespec d = {(time_t)arg, (long)((arg - (long)arg) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < 2 * pairs; i++) pthread_join(ts[i], NULL);
  } else if (!strcmp(what, "larson")) {
    run(larson, nthreads, 1, ts);
    struct timespec d = {(time_t)arg, (long)((arg - (long)arg) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < nthreads; i++) pthread_join(ts[i], NULL);
    for (int k = 0; k < LARSON_SLOTS; k++) free(atomic_exchange(&larson_slots[k], NULL));
  } else if (!strcmp(what, "falseshare")) {
    fs_iters = (long)arg;
    run(falseshare, nthreads, 0, ts);
    for (int i = 0; i < nthreads; i++) pthread_join(ts[i], NULL);
  } else if (!strcmp(what, "concurrent")) {
    conc_n = (long)arg;
    static const size_t sizes[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};
    enum { kSizes = sizeof sizes / sizeof *sizes };
    for (size_t k = 0; k < 2 * kSizes; k++) {
      conc_size = sizes[k % kSizes];
      atomic_store(&conc_alloc_cycles, 0);
      atomic_store(&conc_free_cycles, 0);
      pthread_barrier_init(&conc_barrier, NULL, (unsigned)nthreads);
      run(concurrent, nthreads, 0, ts);
      for (int i = 0; i < nthreads; i++) pthread_join(ts[i], NULL);
      pthread_barrier_destroy(&conc_barrier);
      double ops = (double)conc_n * nthreads;
      printf("{\"workload\": \"concurrent\", \"threads\": %d, \"pass\": \"%s\", "
             "\"size\": %zu, \"alloc_cycles\": %.1f, \"free_cycles\": %.1f}\n",
             nthreads, k < kSizes ? "cold" : "warm", conc_size,
             (double)atomic_load(&conc_alloc_cycles) / ops,
             (double)atomic_load(&conc_free_cycles) / ops);
    }
    return 0;
  } else if (!strcmp(what, "firstuse")) {
    /* The objects' arrays come from mmap: the allocator's first use is the threads'. */
    fu_k = (long)arg;
    size_t bytes = sizeof(void *) * kFirstUseClasses * (size_t)fu_k;
    fu_objs = mmap(NULL, sizeof(void **) * (size_t)nthreads, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < nthreads; i++)
      fu_objs[i] = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_barrier_init(&conc_barrier, NULL, (unsigned)nthreads);
    run(firstuse, nthreads, 0, ts);
    for (int i = 0; i < nthreads; i++) pthread_join(ts[i], NULL);
    double ops = (double)kFirstUseClasses * (double)fu_k * nthreads;
    printf("{\"workload\": \"firstuse\", \"threads\": %d, \"alloc_cycles\": %.1f, "
           "\"free_cycles\": %.1f}\n",
           nthreads, (double)atomic_load(&fu_alloc_cycles) / ops,
           (double)atomic_load(&fu_free_cycles) / ops);
    return 0;
  } else if (!strcmp(what, "mem")) {
    mem_objects = (long)arg;
    pthread_barrier_init(&mem_barrier, NULL, (unsigned)nthreads);
    run(mem_worker, nthreads, 0, ts);
    for (int i = 0; i < nthreads; i++) pthread_join(ts[i], NULL);
  } else {
    fprintf(stderr, "threads: unknown workload %s\n", what);
    return 2;
  }
  double secs = now() - t0;
  printf("{\"workload\": \"%s\", \"threads\": %d, \"seconds\": %.3f, \"ops_per_sec\": %.0f, "
         "\"peak_rss_kib\": %ld}\n",
         what, nthreads, secs, (double)atomic_load(&total_ops) / secs, peak_rss_kib());
  free(ts);
  return 0;
}
