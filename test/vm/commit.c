/* test/vm/commit.c — an allocator under strict overcommit (vm.overcommit_memory=2, as
 * database hosts run): every private writable mapping counts against the commit limit,
 * MAP_NORESERVE or not, so an allocator that reserves address space it does not use
 * fails early. THREADS threads allocate objects of SIZE bytes, every page written,
 * until malloc returns NULL; then the failure must be ENOMEM, every object must hold
 * what was written to it, and after half are freed the same size must be allocated
 * again (the memory is reused, or given back and committed anew).
 *
 * An address-space limit (RLIMIT_AS, `ulimit -v`) counts every mapping the same way,
 * and is how the host's test suite runs it.
 *
 * usage: commit SIZE THREADS [MIN_PERCENT]
 * Prints "commit: SIZE B x THREADS threads: headroom_kib H got_kib G (P%) ..." where
 * H is what is left under the limit when main starts (the allocator's start-up
 * already counted): RLIMIT_AS less the process's size when one is set, else the
 * commit limit less the system's commit; G is the bytes of objects obtained. Exit 0
 * when the checks hold (and P is at least MIN_PERCENT), 1 when one fails. The objects
 * are chained through their first word, so the program keeps no bookkeeping of its
 * own. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static size_t size;
struct chain {
  void *head;
  size_t n;
  int err;  /* errno when malloc returned NULL */
};

static long proc_kib(const char *file, const char *key) {
  FILE *f = fopen(file, "r");
  char line[256];
  long v = -1;
  size_t k = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, k) && line[k] == ':') v = strtol(line + k + 1, NULL, 10);
  if (f) fclose(f);
  return v;
}

static unsigned char fill_of(const void *p) { return (unsigned char)((uintptr_t)p >> 4) | 1; }

/* The object's bytes after its link, written (every page) and checked. */
static void fill(void *p) { memset((char *)p + sizeof(void *), fill_of(p), size - sizeof(void *)); }
static int intact(const void *p) {
  const unsigned char *b = (const unsigned char *)p + sizeof(void *), want = fill_of(p);
  for (size_t i = 0; i < size - sizeof(void *); i += 512)
    if (b[i] != want) return 0;
  return b[size - sizeof(void *) - 1] == want;
}

static void *grab(void *arg) {
  struct chain *c = arg;
  for (;;) {
    errno = 0;
    void *p = malloc(size);
    if (!p) {
      c->err = errno;
      return NULL;
    }
    fill(p);
    *(void **)p = c->head;
    c->head = p;
    c->n++;
  }
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  size = strtoul(argv[1], NULL, 0);
  int nthreads = atoi(argv[2]);
  if (size < 2 * sizeof(void *) || nthreads < 1 || nthreads > 256) return 2;
  int min_percent = argc > 3 ? atoi(argv[3]) : 0;
  struct rlimit as;
  long headroom = getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY
                      ? (long)(as.rlim_cur / 1024) - proc_kib("/proc/self/status", "VmSize")
                      : proc_kib("/proc/meminfo", "CommitLimit") -
                            proc_kib("/proc/meminfo", "Committed_AS");
  static struct chain chains[256];
  static pthread_t tids[256];
  for (int t = 1; t < nthreads; t++)
    if (pthread_create(&tids[t], NULL, grab, &chains[t]) != 0) return 2;
  grab(&chains[0]);
  for (int t = 1; t < nthreads; t++) pthread_join(tids[t], NULL);

  size_t n = 0, bad = 0, not_enomem = 0;
  for (int t = 0; t < nthreads; t++) {
    n += chains[t].n;
    not_enomem += chains[t].err != ENOMEM;
    for (void *p = chains[t].head; p; p = *(void **)p) bad += !intact(p);
  }
  /* Half freed (every other object of each chain), then the size again. */
  for (int t = 0; t < nthreads; t++)
    for (void **link = &chains[t].head; *link && *(void **)*link;) {
      void *drop = *(void **)*link;
      *(void **)*link = *(void **)drop;
      free(drop);
      link = (void **)*link;
    }
  void *again = malloc(size);
  int ok_again = again != NULL;
  if (again) {
    fill(again);
    ok_again = intact(again);
    free(again);
  }
  long got = (long)(n * size / 1024);
  printf("commit: %zu B x %d threads: headroom_kib %ld got_kib %ld (%ld%%); %zu objects, "
         "%zu failures not ENOMEM, %zu damaged, allocated again after frees: %s\n",
         size, nthreads, headroom, got, headroom > 0 ? got * 100 / headroom : -1, n, not_enomem,
         bad, ok_again ? "yes" : "no");
  return not_enomem == 0 && bad == 0 && ok_again && n > 0 &&
                 (headroom > 0 && got * 100 / headroom >= min_percent)
             ? 0
             : 1;
}
