/* test/conformance/nodes.c — NUMA nodes through the shim, on a machine made of two
 * nodes by hwloc (run with HWLOC_SYNTHETIC="numa:2 pu:1", USLAB_CONF=topology=hwloc:
 * CPU 0 is node 0, CPU 1 node 1). The library's constructor adopts hwloc's topology:
 * uslab_stats_get reports 2 nodes and the table one line per node. N objects
 * malloc'ed by a thread on CPU 0 and freed (after checking their contents) by a
 * thread on CPU 1 are remote-node frees: after malloc_trim, node 0 has received at
 * least N of them, node 1 few, and none wait in the CPUs' remote-node buffers.
 * Exits 77 (skipped) on a machine without CPUs 0 and 1. */
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"

/* Exact counts: guarded sampling (on by default) would serve a random few of the
 * objects from its own pool, outside their class and node. */
const char *uslab_malloc_conf = "guard_sample=0";

enum { N = 20000, SIZE = 48 };
static unsigned char *objs[N];
static char text[1 << 16];

static void collect(void *opaque, const char *line) {
  (void)opaque;
  strncat(text, line, sizeof text - strlen(text) - 1);
}

/* The remote-node frees node n received, from the table's "node n: ..." line. */
static long long received_by(unsigned n) {
  text[0] = 0;
  uslab_stats_print(collect, NULL);
  char head[32];
  snprintf(head, sizeof head, "node %u:", n);
  const char *line = strstr(text, head);
  if (!line) return -1;
  const char *shards = strstr(line, "shards, ");
  long long v = -1;
  if (!shards || sscanf(shards, "shards, %lld remote-node frees received", &v) != 1) return -1;
  return v;
}

static int pin(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

static void *producer(void *arg) {
  (void)arg;
  if (!pin(0)) return (void *)1;
  for (int i = 0; i < N; i++) {
    objs[i] = malloc(SIZE);
    if (!objs[i]) return (void *)1;
    memset(objs[i], i & 0xff, SIZE);
  }
  return NULL;
}

static void *consumer(void *arg) {
  (void)arg;
  if (!pin(1)) return (void *)1;
  long bad = 0;
  for (int i = 0; i < N; i++) {
    bad += objs[i][0] != (i & 0xff) || objs[i][SIZE - 1] != (i & 0xff);
    free(objs[i]);
  }
  return (void *)(intptr_t)bad;
}

static void run(void *(*body)(void *)) {
  pthread_t t;
  void *r = (void *)1;
  CHECK(pthread_create(&t, NULL, body, NULL) == 0 && pthread_join(t, &r) == 0);
  CHECK(r == NULL);
}

int main(void) {
  require_uslab();
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || !pin(1) || !pin(0)) {
    fprintf(stderr, "nodes: needs CPUs 0 and 1, skipped\n");
    return 77;
  }
  uslab_stats_t st;
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  CHECK(st.nodes == 2);
  text[0] = 0;
  uslab_stats_print(collect, NULL);
  CHECK(strstr(text, "2 NUMA nodes (synthetic)") != NULL);
  CHECK(strstr(text, "(hwloc synthetic)") != NULL);
  long long before0 = received_by(0), before1 = received_by(1);
  CHECK(before0 >= 0 && before1 >= 0);
  malloc_trim(0);  /* CPU 0's sheaf empty: its refills come from node 0's shard */
  run(producer);
  run(consumer);
  malloc_trim(0);
  long long got0 = received_by(0) - before0, got1 = received_by(1) - before1;
  fprintf(stderr, "nodes: node 0 received %lld remote-node frees, node 1 %lld\n", got0, got1);
  CHECK(got0 >= N);
  CHECK(got1 < N / 10);
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  CHECK(st.remote_node_frees >= N);
  CHECK(st.remote_node_pending == 0);
  return check_done("nodes");
}
