/* test/conformance/stats.c — the statistics match a program with known allocations:
 * N live objects of size S show as N active objects in S's class of the table that
 * uslab_stats_print writes, and uslab_stats_get's allocated bytes grow by at least
 * N x S; after freeing them, the class shows 0 active. The mode reported by
 * uslab_stats_get agrees with the table's first line.
 *
 * usage: stats */
#include <stdint.h>

#include "include/uslab.h"
#include "test/common/check.h"

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

int main(void) {
  require_uslab();
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
  return check_done("stats");
}
