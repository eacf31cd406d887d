/* bench/deferred.c — the seed test of deferred frees (kfree_rcu's rcuscale kfree
 * test shape): LOOPS times, allocate OBJECTS objects of varied sizes (16 … 512
 * bytes), then hand every one of them to a deferred free; at the end wait until all
 * of them are freed. Prints one JSON line: total ns, ns per object, batches, peak
 * RSS.
 *
 * usage: deferred MODE LOOPS OBJECTS [SIZE [READERS]]
 *   SIZE: one size for every object (0: varied); READERS: threads that run short
 *   read-side sections back to back meanwhile, so that grace periods take time
 *   blocks     uslab_free_deferred (per-CPU page-sized blocks, bulk free after the
 *              grace period); batches = blocks and chains freed
 *   perobject  the per-object baseline in the same process: each object carries a
 *              callback head {next, func} chained through its own memory; after each
 *              loop one uslab_synchronize, then the callbacks run one by one (free)
 *   urcu       liburcu's call_rcu (membarrier flavour) with free as the callback,
 *              meant to run under jemalloc (built only where liburcu-dev is found)
 * blocks and perobject need libuslab (looked up with dlsym, so the program runs under
 * any preload). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef WITH_URCU
#include <urcu/urcu-memb.h>
#endif

#include "proc_self.h"

struct cb_head {
  struct cb_head *next;
  void (*func)(struct cb_head *);
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static void free_cb(struct cb_head *h) { free(h); }

static size_t fixed_size;
static size_t size_of(size_t i) { return fixed_size ? fixed_size : 16 + (i * 37) % 497; }

typedef struct {
  size_t allocated, active, resident, mapped, metadata, cached, returned;
  unsigned mode, cpus;
  size_t deferred_objects, deferred_bytes, deferred_blocks;
  unsigned long long grace_periods, deferred_batches;
} stats_t;  /* the prefix of uslab_stats_t this program reads */

static void *need(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  if (!f) {
    fprintf(stderr, "deferred: %s not found (run under libuslab.so)\n", name);
    exit(2);
  }
  return f;
}

#ifdef WITH_URCU
static void urcu_free_cb(struct rcu_head *h) { free(h); }
#endif

static atomic_int stop;
static int use_urcu;

static void *reader(void *arg) {
  (void)arg;
  void (*lock)(void) = NULL, (*unlock)(void) = NULL;
#ifdef WITH_URCU
  if (use_urcu) {
    urcu_memb_register_thread();
    lock = urcu_memb_read_lock;
    unlock = urcu_memb_read_unlock;
  }
#endif
  if (!lock) {
    lock = (void (*)(void))need("uslab_read_lock");
    unlock = (void (*)(void))need("uslab_read_unlock");
  }
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    lock();
    for (volatile int spin = 0; spin < 200; spin++) {
    }
    unlock();
  }
#ifdef WITH_URCU
  if (use_urcu) urcu_memb_unregister_thread();
#endif
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 6) {
    fprintf(stderr, "usage: deferred blocks|perobject|urcu LOOPS OBJECTS [SIZE [READERS]]\n");
    return 2;
  }
  const char *mode = argv[1];
  long loops = atol(argv[2]), objects = atol(argv[3]);
  fixed_size = argc >= 5 ? (size_t)atol(argv[4]) : 0;
  int readers = argc >= 6 ? atoi(argv[5]) : 0;
  use_urcu = !strcmp(mode, "urcu");
  pthread_t threads[64];
  if (readers > 64) readers = 64;
  for (int i = 0; i < readers; i++) pthread_create(&threads[i], NULL, reader, NULL);
  if (fixed_size && fixed_size < sizeof(struct cb_head)) fixed_size = sizeof(struct cb_head);
  void **objs = calloc((size_t)objects, sizeof(void *));
  unsigned long long batches = 0;
  uint64_t t0 = now_ns();
  if (!strcmp(mode, "blocks")) {
    void (*free_deferred)(void *) = (void (*)(void *))need("uslab_free_deferred");
    void (*barrier)(void) = (void (*)(void))need("uslab_deferred_barrier");
    for (long l = 0; l < loops; l++) {
      for (long i = 0; i < objects; i++) objs[i] = malloc(size_of((size_t)i));
      for (long i = 0; i < objects; i++) free_deferred(objs[i]);
    }
    barrier();
    t0 = now_ns() - t0;
    int (*get)(stats_t *, size_t) = (int (*)(stats_t *, size_t))need("uslab_stats_get");
    stats_t st;
    if (get(&st, sizeof st) == 0) batches = st.deferred_batches;
  } else if (!strcmp(mode, "perobject")) {
    void (*synchronize)(void) = (void (*)(void))need("uslab_synchronize");
    for (long l = 0; l < loops; l++) {
      struct cb_head *list = NULL;
      for (long i = 0; i < objects; i++) objs[i] = malloc(size_of((size_t)i));
      for (long i = 0; i < objects; i++) {
        struct cb_head *h = objs[i];
        h->func = free_cb;
        h->next = list;
        list = h;
      }
      synchronize();
      while (list) {
        struct cb_head *next = list->next;
        list->func(list);
        list = next;
      }
      batches++;
    }
    t0 = now_ns() - t0;
#ifdef WITH_URCU
  } else if (!strcmp(mode, "urcu")) {
    urcu_memb_register_thread();
    for (long l = 0; l < loops; l++) {
      for (long i = 0; i < objects; i++) objs[i] = malloc(size_of((size_t)i));
      for (long i = 0; i < objects; i++) urcu_memb_call_rcu(objs[i], urcu_free_cb);
    }
    urcu_memb_barrier();
    t0 = now_ns() - t0;
    urcu_memb_unregister_thread();
#endif
  } else {
    fprintf(stderr, "deferred: unknown mode '%s'\n", mode);
    return 2;
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < readers; i++) pthread_join(threads[i], NULL);
  printf("{\"mode\": \"%s\", \"loops\": %ld, \"objects\": %ld, \"size\": %zu, \"readers\": %d, "
         "\"ns_total\": %llu, \"ns_per_object\": %.2f, \"batches\": %llu, \"peak_rss_kib\": %ld}\n",
         mode, loops, objects, fixed_size, readers, (unsigned long long)t0, (double)t0 / (loops * objects), batches,
         peak_rss_kib());
  free(objs);
  return 0;
}
