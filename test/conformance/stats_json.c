/* test/conformance/stats_json.c — the JSON statistics say what the table says. A
 * program with known allocations (1000 objects of 48 bytes, 10 of 100 KB, one of
 * 8 MiB, 10 objects of an object cache whose name needs escaping) writes, with no
 * allocation in between, the table (uslab_stats_print) to TABLE, the JSON document
 * (uslab_stats_print_json) to JSON and uslab_stats_get's numbers to NUMBERS, for
 * test/conformance/stats_json.py to compare field by field. Here: uslab_stats_json
 * returns the same document, its length as snprintf does, and cuts it
 * NUL-terminated into a buffer too small.
 *
 * usage: stats_json TABLE JSON NUMBERS */
#include <fcntl.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"

/* Exact counts: no object served from the guarded pool. */
const char *uslab_malloc_conf = "guard_sample=0";

/* Cache names come from the program: this one needs each kind of escape. */
static const char kCacheName[] = "json \"quoted\" back\\slash\ttab";

static char doc[1 << 20], again[1 << 20];

static void to_fd(void *opaque, const char *text) {
  int fd = *(int *)opaque;
  size_t n = strlen(text);
  CHECK(write(fd, text, n) == (ssize_t)n);
}

static int open_out(const char *path) { return open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644); }

int main(int argc, char **argv) {
  require_uslab();
  if (argc != 4) {
    fprintf(stderr, "usage: stats_json TABLE JSON NUMBERS\n");
    return 2;
  }
  int fds[3];
  for (int i = 0; i < 3; i++) CHECK((fds[i] = open_out(argv[1 + i])) >= 0);
  static void *small[1000], *large[10], *objs[10];
  for (int i = 0; i < 1000; i++) small[i] = malloc(48);
  for (int i = 0; i < 10; i++) large[i] = malloc(100000);
  void *huge = malloc(8 << 20);
  uslab_cache_t *cache = uslab_cache_create(kCacheName, 200, 0, 0, NULL);
  CHECK(cache != NULL);
  for (int i = 0; i < 10; i++) objs[i] = uslab_cache_alloc(cache);

  /* Nothing allocates from here to the last report. */
  uslab_stats_print(to_fd, &fds[0]);
  uslab_stats_print_json(to_fd, &fds[1]);
  uslab_stats_t st;
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  size_t n = uslab_stats_json(doc, sizeof doc);
  CHECK(n > 0 && n < sizeof doc && strlen(doc) == n);
  CHECK(uslab_stats_json(NULL, 0) == n);
  CHECK(uslab_stats_json(again, n + 1) == n && strcmp(again, doc) == 0);
  char cut[16];
  memset(cut, 'x', sizeof cut);
  CHECK(uslab_stats_json(cut, sizeof cut) == n);
  CHECK(cut[15] == 0 && memcmp(cut, doc, 15) == 0);
  CHECK(uslab_stats_json(cut, 1) == n && cut[0] == 0);
  char numbers[512];
  int len = snprintf(numbers, sizeof numbers,
                     "version %s\nallocated %zu\nactive %zu\nresident %zu\nmapped %zu\n"
                     "metadata %zu\ncached %zu\nreturned %zu\ncache_name %s\n",
                     uslab_version(), st.allocated, st.active, st.resident, st.mapped,
                     st.metadata, st.cached, st.returned, kCacheName);
  CHECK(len > 0 && write(fds[2], numbers, (size_t)len) == len);
  /* The document written through the callback is the one uslab_stats_json gave. */
  CHECK(lseek(fds[1], 0, SEEK_CUR) == (off_t)n);

  for (int i = 0; i < 10; i++) uslab_cache_free(cache, objs[i]);
  uslab_cache_destroy(cache);
  free(huge);
  for (int i = 0; i < 10; i++) free(large[i]);
  for (int i = 0; i < 1000; i++) free(small[i]);
  for (int i = 0; i < 3; i++) close(fds[i]);
  return check_done("stats_json");
}
