/* test/vm/hotplug.c — a CPU's sheaves when the CPU goes offline and comes back (run as
 * root in the guest, under LD_PRELOAD with USLAB_CONF=decay_ms=400,background_thread=true).
 *
 *   1. A thread bound to CPU k frees 4000 small and 200 mid-size objects it allocated:
 *      they stay cached in CPU k's sheaves (stats: cached bytes).
 *   2. CPU k goes offline. With no further allocator call, within 3 × decay_ms the
 *      background thread's ticks must have given back what CPU k cached (no CPU runs
 *      there to drain it itself): cached bytes fall below a tenth of what they were.
 *   3. CPU k comes back online; a thread bound to it again allocates and frees, and
 *      the frees are cached on it again (its sheaves work after the hotplug).
 * Skips (77) unless CPU k (the highest online CPU but 0) can be taken offline. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"

enum { kSmall = 4000, kMid = 200 };
static void *objs[kSmall + kMid];
static int cpu_k;

static size_t cached(void) {
  uslab_stats_t st;
  return uslab_stats_get(&st, sizeof st) == 0 ? st.cached : 0;
}

static int set_online(int cpu, int on) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/online", cpu);
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  int ok = fprintf(f, "%d", on) > 0;
  return fclose(f) == 0 && ok;
}

static void *churn_on_k(void *arg) {
  int *ran_on = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu_k, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) return NULL;
  for (int i = 0; i < kSmall + kMid; i++) {
    objs[i] = malloc(i < kSmall ? 48 : 3000);
    if (objs[i]) memset(objs[i], 1, i < kSmall ? 48 : 3000);
  }
  for (int i = 0; i < kSmall + kMid; i++) free(objs[i]);
  *ran_on = sched_getcpu();
  return NULL;
}

static int run_on_k(void) {
  int ran_on = -1;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, churn_on_k, &ran_on) == 0);
  pthread_join(t, NULL);
  return ran_on;
}

int main(void) {
  require_uslab();
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_k = (int)n - 1;
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/online", cpu_k);
  if (cpu_k < 1 || access(path, W_OK) != 0) {
    printf("hotplug: CPU %d cannot be taken offline here: skipped\n", cpu_k);
    return 77;
  }
  uslab_stats_t st;
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  if (st.mode == USLAB_MODE_PER_THREAD) {
    printf("hotplug: per-thread caches, not per-CPU sheaves: skipped\n");
    return 77;
  }
  CHECK(run_on_k() == cpu_k);
  size_t before = cached();
  printf("hotplug: %zu bytes cached after the frees on CPU %d\n", before, cpu_k);
  CHECK(before >= 4000 * 48);

  CHECK(set_online(cpu_k, 0));
  usleep(3 * 400 * 1000);
  size_t after = cached();
  printf("hotplug: %zu bytes cached 1.2 s after CPU %d went offline\n", after, cpu_k);
  CHECK(after < before / 10);

  CHECK(set_online(cpu_k, 1));
  usleep(100 * 1000);
  size_t low = cached();
  int ran_on = run_on_k();
  size_t again = cached();
  printf("hotplug: CPU %d back online: a thread ran on CPU %d, cached %zu -> %zu bytes\n",
         cpu_k, ran_on, low, again);
  CHECK(ran_on == cpu_k);
  CHECK(again >= low + 4000 * 48 / 2);
  return check_done("hotplug");
}
