/* test/conformance/stats.c — the statistics match a program with known allocations:
 * N live objects of size S show as N active objects in S's class of the table that
 * uslab_stats_print writes, and uslab_stats_get's allocated bytes grow by at least
 * N x S; after freeing them, the class shows 0 active. The mode reported by
 * uslab_stats_get agrees with the table's first line. N objects deferred while a
 * reader holds a section show in the class's deferred column and in
 * uslab_stats_get's deferred fields, and leave both after the barrier. N objects
 * allocated by a thread on one CPU and freed by a thread on a CPU of another shard
 * show in the class's remote column (when the topology line reports two shards).
 * N mallocs of a class add N to its hits and refills columns. With `trim`, the CPU
 * sheaf of a class in use holds at most a batch after a decay tick.
 *
 * usage: stats
 *        stats trim DECAY_MS   (per-CPU mode, USLAB_CONF=decay_ms=DECAY_MS) */
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"
#include "test/common/section_holder.h"

/* Exact counts: guarded sampling (on by default) would serve a random few of the
 * objects from its own pool, outside their class and node. */
const char *uslab_malloc_conf = "guard_sample=0";

static char text[1 << 16];
static void collect(void *opaque, const char *line) {
  (void)opaque;
  strncat(text, line, sizeof text - strlen(text) - 1);
}

/* Active objects of the class whose object size is `size`, from the table. */
static long active_of(unsigned size) {
  text[0] = 0;
  uslab_stats_print(collect, NULL);
  for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    unsigned cls, sz;
    size_t slabs, objects, active;
    if (sscanf(line, "%u %u %zu %zu %zu", &cls, &sz, &slabs, &objects, &active) == 5 && sz == size)
      return (long)active;
  }
  return 0;
}

/* Column `col` (from 3, after class and size; 10 = hits, 11 = refills, 16 = deferred,
 * 17 = remote) of the class whose object size is `size`. */
enum { COL_CPU = 6, COL_HITS = 10, COL_REFILLS = 11, COL_DEFERRED = 16, COL_REMOTE = 17 };
static long column_of(unsigned size, int col) {
  text[0] = 0;
  uslab_stats_print(collect, NULL);
  for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    unsigned cls, sz;
    size_t f[15];
    if (sscanf(line, "%u %u %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu", &cls,
               &sz, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9], &f[10],
               &f[11], &f[12], &f[13], &f[14]) == 17 && sz == size)
      return (long)f[col - 3];
  }
  return 0;
}
static long deferred_of(unsigned size) { return column_of(size, COL_DEFERRED); }

/* Every malloc of a class is a hit of its CPU sheaf or thread cache, or a refill:
 * N allocations (more than the 4096 hits after which a counter carries into its
 * bank) move the hits by N less the refills (a handful; counted per CPU only), give
 * or take the few hits a restarted section counts twice. */
static void check_hits(void) {
  enum { N = 100000, S = 1536 };  /* a class size */
  long hits = column_of(S, COL_HITS), refills = column_of(S, COL_REFILLS);
  for (int i = 0; i < N; i++) {
    void *p = malloc(S);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
  long dh = column_of(S, COL_HITS) - hits, dr = column_of(S, COL_REFILLS) - refills;
  printf("stats: %d allocations of %d bytes: %ld sheaf hits, %ld refills\n", N, S, dh, dr);
  CHECK(dh >= N - N / 100 && dh + dr <= N + N / 100);
}

/* Producer on one CPU, consumer on another (the first two CPUs this process may use). */
enum { REMOTE_N = 20000, REMOTE_SIZE = 448 };
static void *remote_objs[REMOTE_N];
static int remote_cpus[2];
static void pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
}
static void *remote_producer(void *arg) {
  (void)arg;
  pin(remote_cpus[0]);
  for (int i = 0; i < REMOTE_N; i++) remote_objs[i] = malloc(REMOTE_SIZE);
  return NULL;
}
static void *remote_consumer(void *arg) {
  (void)arg;
  pin(remote_cpus[1]);
  for (int i = 0; i < REMOTE_N; i++) free(remote_objs[i]);
  return NULL;
}

static void check_remote(void) {
  unsigned possible = 0, shards = 0, per = 0;
  text[0] = 0;
  uslab_stats_print(collect, NULL);
  const char *topo = strstr(text, "topology: ");
  CHECK(topo != NULL);
  unsigned nodes = 0;
  const char *sh = topo ? strstr(topo, " NUMA node") : NULL;
  sh = sh ? strstr(sh, ", ") : NULL;  /* after "node," "nodes," or "nodes (synthetic)," */
  CHECK(topo && sscanf(topo, "topology: %u possible CPUs, %u NUMA node", &possible, &nodes) == 2);
  CHECK(sh && sscanf(sh, ", %u shards of %u CPUs", &shards, &per) == 2);
  CHECK(nodes >= 1 && per >= 1);
  if (per == 0) per = 1;
  cpu_set_t set;
  int n = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
      if (CPU_ISSET(c, &set) && (n == 0 || (unsigned)c / per != (unsigned)remote_cpus[0] / per))
        remote_cpus[n++] = c;
  if (shards < 2 || n < 2) {
    printf("stats: remote frees not checked (%u shards, %d usable CPUs in different shards)\n",
           shards, n);
    return;
  }
  long base = column_of(REMOTE_SIZE, COL_REMOTE);
  pthread_t t;
  pthread_create(&t, NULL, remote_producer, NULL);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, remote_consumer, NULL);
  pthread_join(t, NULL);
  long remote = column_of(REMOTE_SIZE, COL_REMOTE) - base;
  printf("stats: %d objects allocated on CPU %d, freed on CPU %d: %ld remote frees\n", REMOTE_N,
         remote_cpus[0], remote_cpus[1], remote);
  /* All but what the consumer's cache still holds (a few batches) went back remotely. */
  CHECK(remote >= REMOTE_N / 2 && remote <= REMOTE_N);
}


static void check_deferred(void) {
  enum { N = 1500, S = 200, CLASS_SIZE = 224 };
  struct section_holder holder;
  section_hold(&holder);
  long base = active_of(CLASS_SIZE);
  for (int i = 0; i < N; i++) uslab_free_deferred(malloc(S));
  malloc_trim(0);  /* seals every open block; the reader keeps them all waiting */
  uslab_stats_t st;
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  CHECK(deferred_of(CLASS_SIZE) == N);
  CHECK(st.deferred_objects == N);
  CHECK(st.deferred_bytes == (size_t)N * CLASS_SIZE);
  CHECK(st.deferred_blocks >= N / 508);
  CHECK(active_of(CLASS_SIZE) == base + N);  /* deferred objects are still allocated */
  section_release(&holder);
  uslab_deferred_barrier();
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  CHECK(deferred_of(CLASS_SIZE) == 0);
  CHECK(st.deferred_objects == 0 && st.deferred_bytes == 0 && st.deferred_blocks == 0);
  CHECK(st.grace_periods > 0 && st.deferred_batches >= N / 508);
  CHECK(active_of(CLASS_SIZE) == base);
}

/* `trim` (run with a short decay_ms): a class that keeps serving allocations holds at
 * most a batch of objects in its CPU sheaf a few decay ticks later, however many it
 * held: the rest goes back to the slabs. N objects freed fill the sheaf of the CPU
 * the thread is pinned to; then pairs of the class keep it in use. (Without ticks,
 * decay_ms=100000, or without the trim, the sheaf keeps all it held and the check
 * fails.) */
static int check_trim(long decay_ms) {
  enum { N = 3000, S = 96, BATCH_MAX = 64 };
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set)) {
        pin(c);
        break;
      }
  static void *objs[N];
  for (int i = 0; i < N; i++) objs[i] = malloc(S);
  for (int i = 0; i < N; i++) free(objs[i]);
  long full = column_of(S, COL_CPU);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    void *p = malloc(S);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
  } while ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 3 * decay_ms);
  long after = column_of(S, COL_CPU);
  printf("stats: %d-byte objects in CPU sheaves: %ld after %d frees, %ld after %ld ms of pairs\n",
         S, full, N, after, 3 * decay_ms);
  CHECK(full > BATCH_MAX);  /* the sheaf really held more than a batch */
  CHECK(after >= 1 && after <= BATCH_MAX);
  return check_done("stats trim");
}

int main(int argc, char **argv) {
  require_uslab();
  if (argc > 2 && !strcmp(argv[1], "trim")) return check_trim(atol(argv[2]));
  enum { N = 777, S = 200, CLASS_SIZE = 224 };
  uslab_stats_t before, after;
  CHECK(uslab_stats_get(&before, sizeof before) == 0);
  long base = active_of(CLASS_SIZE);
  void *objs[N];
  for (int i = 0; i < N; i++) objs[i] = malloc(S);
  CHECK(active_of(CLASS_SIZE) == base + N);
  CHECK(uslab_stats_get(&after, sizeof after) == 0);
  CHECK(after.allocated >= before.allocated + (size_t)N * S);
  CHECK(after.active >= after.allocated);
  CHECK(after.mapped >= after.active);
  for (int i = 0; i < N; i++) free(objs[i]);
  CHECK(active_of(CLASS_SIZE) == base);
  /* The mode agrees with the table's first line. */
  CHECK(uslab_stats_get(&after, sizeof after) == 0);
  const char *want = after.mode == USLAB_MODE_PERCPU_GLIBC ? "glibc's registration"
                     : after.mode == USLAB_MODE_PERCPU_OWN ? "uslab's registration"
                                                           : "per-thread caches";
  text[0] = 0;
  uslab_stats_print(collect, NULL);
  CHECK(strstr(text, want) != NULL);
  CHECK(after.mode == USLAB_MODE_PER_THREAD || after.cpus >= 1);
  /* Bad calls. */
  CHECK(uslab_stats_get(NULL, sizeof after) == -1);
  CHECK(uslab_stats_get(&after, sizeof after + 1) == -1);
  /* An older caller's smaller struct is filled up to its size only. */
  unsigned char small[sizeof(size_t) + 1];
  memset(small, 0xee, sizeof small);
  CHECK(uslab_stats_get((uslab_stats_t *)small, sizeof(size_t)) == 0);
  CHECK(small[sizeof(size_t)] == 0xee);
  check_deferred();
  check_remote();
  check_hits();
  return check_done("stats");
}
