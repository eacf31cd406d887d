/* test/conformance/bulk_cache.c — the object-cache and bulk API of include/uslab.h,
 * through libuslab.so: bulk alloc/free of every size class with mixed sizes and
 * caches in one call, all-or-nothing under RLIMIT_AS, the constructor contract, the
 * cache flags (zero, cache-line alignment, poison), destroy with live objects, bad
 * input, class reuse (also beside threads that malloc), and concurrent bulk traffic between threads with verification.
 *
 * usage: bulk_cache */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"

static uint64_t pattern(const void *p, size_t i) { return ((uintptr_t)p ^ i) * 0x9e3779b97f4a7c15ull; }

static void fill(void *p, size_t bytes) {
  uint64_t *w = p;
  for (size_t i = 0; i < bytes / 8; i++) w[i] = pattern(p, i);
}

static int intact(const void *p, size_t bytes) {
  const uint64_t *w = p;
  for (size_t i = 0; i < bytes / 8; i++)
    if (w[i] != pattern(p, i)) return 0;
  return 1;
}

/* Runs fn in a child with stderr captured; returns the child's exit status and
 * copies its stderr into err. */
/* Objects guarded sampling served so far (each a fresh object: constructed anew). */
static unsigned long long guarded_so_far(void) {
  uslab_stats_t st;
  CHECK(uslab_stats_get(&st, sizeof st) == 0);
  return st.guarded_allocations;
}

static int in_child(void (*fn)(void), char *err, size_t cap) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 2);
    close(pipefd[0]);
    fn();
    _exit(0);
  }
  close(pipefd[1]);
  size_t len = 0;
  ssize_t r;
  while (len + 1 < cap && (r = read(pipefd[0], err + len, cap - 1 - len)) > 0) len += (size_t)r;
  err[len] = 0;
  close(pipefd[0]);
  int status;
  waitpid(pid, &status, 0);
  return status;
}

static void test_bulk_every_class(void) {
  static void *objs[300];
  for (size_t size = 1; size <= 40000; size = size < 64 ? size + 7 : size * 5 / 4) {
    size_t n = size < 4096 ? 300 : 40;
    CHECK(uslab_alloc_bulk(size, n, objs) == n);
    for (size_t i = 0; i < n; i++) {
      CHECK(objs[i] != NULL);
      CHECK(malloc_usable_size(objs[i]) >= size);
      if (size >= 16) CHECK(((uintptr_t)objs[i] & 15) == 0);
      fill(objs[i], size);
    }
    for (size_t i = 0; i < n; i++) CHECK(intact(objs[i], size));
    /* Every other object through free(), the rest in one bulk call with NULL holes. */
    for (size_t i = 0; i < n; i += 2) {
      free(objs[i]);
      objs[i] = NULL;
    }
    uslab_free_bulk(n, objs);
    /* Bulks of up to four take the single-object paths, five a batch: distinct,
     * usable objects, nothing written past the k asked; freed with a NULL hole. */
    for (size_t k = 1; k <= 5; k++) {
      for (size_t i = 0; i <= k; i++) objs[i] = NULL;
      CHECK(uslab_alloc_bulk(size, k, objs) == k);
      CHECK(objs[k] == NULL);
      for (size_t i = 0; i < k; i++) {
        CHECK(objs[i] != NULL && malloc_usable_size(objs[i]) >= size);
        for (size_t j = 0; j < i; j++) CHECK(objs[i] != objs[j]);
        fill(objs[i], size);
      }
      for (size_t i = 0; i < k; i++) CHECK(intact(objs[i], size));
      if (k >= 2) {
        free(objs[k - 2]);
        objs[k - 2] = NULL;
      }
      uslab_free_bulk(k, objs);
    }
  }
}

static int ctor_calls;
static void ctor(void *obj) {
  ctor_calls++;
  memcpy(obj, "constructed", 12);
}

static void test_mixed_free_bulk(void) {
  uslab_cache_t *a = uslab_cache_create("mixed-a", 40, 0, 0, NULL);
  uslab_cache_t *b = uslab_cache_create("mixed-b", 200, 0, 0, ctor);
  CHECK(a && b);
  void *ptrs[600];
  size_t n = 0;
  for (int i = 0; i < 100; i++) {
    ptrs[n++] = malloc(8 + (size_t)i * 13);
    ptrs[n++] = uslab_cache_alloc(a);
    ptrs[n++] = uslab_cache_alloc(b);
    ptrs[n++] = NULL;
    ptrs[n++] = malloc(70000 + (size_t)i);  /* large */
    ptrs[n++] = calloc(1, 16);
  }
  for (size_t i = 0; i < n; i++) CHECK(i % 6 == 3 || ptrs[i] != NULL);
  uslab_free_bulk(n, ptrs);
  uslab_cache_destroy(a);
  uslab_cache_destroy(b);
}

static void test_constructor_contract(void) {
  ctor_calls = 0;
  uslab_cache_t *c = uslab_cache_create("ctor", 100, 8, 0, ctor);
  CHECK(c != NULL);
  void *objs[500];
  for (int i = 0; i < 500; i++) {
    objs[i] = uslab_cache_alloc(c);
    CHECK(objs[i] && memcmp(objs[i], "constructed", 12) == 0);
  }
  int carved = ctor_calls;
  CHECK(carved >= 500);
  unsigned long long guarded = guarded_so_far();
  for (int i = 0; i < 500; i++) uslab_cache_free(c, objs[i]);
  enum { kRounds = 20 };
  for (int round = 0; round < kRounds; round++) {
    CHECK(uslab_cache_alloc_bulk(c, 500, objs) == 500);
    for (int i = 0; i < 500; i++) CHECK(memcmp(objs[i], "constructed", 12) == 0);
    uslab_cache_free_bulk(c, 500, objs);
  }
  /* Reused objects are not constructed again. Calls beyond the first carving come
   * from guarded objects (USLAB_CONF=guard_sample: each constructed in its slot) and
   * from whole slabs carved anew, after empty ones went back to the page heap or while
   * the thread moved between CPUs: a few slabs' worth, not one per allocation. With
   * every object guarded (guard_sample=1) there is no reuse to check. */
  int fresh = (int)(guarded_so_far() - guarded);
  int reused = kRounds * 500 - fresh;
  if (reused >= 500) CHECK(ctor_calls - carved - fresh < reused / 2);
  uslab_cache_destroy(c);
}

static void test_flags(void) {
  uslab_cache_t *z = uslab_cache_create("zeroed", 72, 0, USLAB_CACHE_ZERO, NULL);
  uslab_cache_t *h = uslab_cache_create("hwalign", 20, 0, USLAB_CACHE_HWALIGN, NULL);
  uslab_cache_t *a = uslab_cache_create("align256", 300, 256, 0, NULL);
  CHECK(z && h && a);
  void *objs[200];
  for (int round = 0; round < 3; round++) {
    CHECK(uslab_cache_alloc_bulk(z, 200, objs) == 200);
    for (int i = 0; i < 200; i++) {
      unsigned char *b = objs[i];
      for (int k = 0; k < 72; k++) CHECK(b[k] == 0);
      memset(b, 0xee, 72); /* dirty before the next round reuses it */
    }
    uslab_cache_free_bulk(z, 200, objs);
  }
  for (int i = 0; i < 200; i++) {
    objs[i] = uslab_cache_alloc(h);
    CHECK(((uintptr_t)objs[i] & 63) == 0);
  }
  for (int i = 0; i < 200; i++) free(objs[i]); /* free() takes cache objects */
  for (int i = 0; i < 50; i++) {
    void *p = uslab_cache_alloc(a);
    CHECK(((uintptr_t)p & 255) == 0);
    uslab_cache_free(a, p);
  }
  uslab_cache_destroy(z);
  uslab_cache_destroy(h);
  uslab_cache_destroy(a);
}

static void poison_writer(void) {
  uslab_cache_t *c = uslab_cache_create("poisoned", 64, 0, USLAB_CACHE_POISON, NULL);
  unsigned long long guarded = guarded_so_far();
  char *p = uslab_cache_alloc(c);
  if (guarded_so_far() > guarded) fprintf(stderr, "guarded\n");
  uslab_cache_free(c, p);
  p[10] = 1; /* use after free */
  for (int i = 0; i < 10000; i++) uslab_cache_free(c, uslab_cache_alloc(c));
  printf("not detected\n");
}

static void test_poison(void) {
  char err[4096];
  int st = in_child(poison_writer, err, sizeof err);
  CHECK(WIFSIGNALED(st)); /* abort_on_error: aborts */
  if (strncmp(err, "guarded\n", 8) == 0) { /* the write faults at once */
    CHECK(strstr(err, "uslab: guarded object: use after free (write)") != NULL);
    CHECK(strstr(err, "10 bytes inside the 64-byte object") != NULL);
  } else {
    CHECK(strstr(err, "cache 'poisoned'") && strstr(err, "written after it was freed"));
    CHECK(strstr(err, "byte 10") != NULL);
  }
}

static void destroy_live(void) {
  uslab_cache_t *c = uslab_cache_create("leaky", 48, 0, 0, NULL);
  char *keep[10];
  for (int i = 0; i < 10; i++) {
    keep[i] = uslab_cache_alloc(c);
    memset(keep[i], 'k', 48);
  }
  void *gone = uslab_cache_alloc(c);
  uslab_cache_free(c, gone);
  uslab_cache_destroy(c);
  for (int i = 0; i < 10; i++) /* still valid after destroy */
    for (int k = 0; k < 48; k++)
      if (keep[i][k] != 'k') _exit(3);
  for (int i = 0; i < 10; i++) free(keep[i]);
  _exit(0);
}

static void test_destroy_with_live_objects(void) {
  char err[4096];
  int st = in_child(destroy_live, err, sizeof err);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(strstr(err, "cache 'leaky' destroyed with 10 live objects") != NULL);
}

static void test_bad_input_and_reuse(void) {
  errno = 0;
  CHECK(uslab_cache_create("zero", 0, 0, 0, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(uslab_cache_create("align3", 16, 3, 0, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(uslab_cache_create("flags", 16, 0, 0x80, NULL) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(uslab_cache_create("ctor+zero", 16, 0, USLAB_CACHE_ZERO, ctor) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(uslab_cache_create("huge", 100000, 0, 0, NULL) == NULL && errno == EINVAL);
  void *out[4] = {0};
  CHECK(uslab_alloc_bulk(64, 0, out) == 0 && out[0] == NULL);
  uslab_free_bulk(0, out);
  uslab_free_bulk(4, out); /* all NULL */
  /* Destroyed caches give their class back: far more creations than classes. */
  for (int i = 0; i < 200; i++) {
    uslab_cache_t *c = uslab_cache_create("churn", 16 + (size_t)i, 0, 0, NULL);
    CHECK(c != NULL);
    if (!c) break;
    void *p = uslab_cache_alloc(c);
    CHECK(p != NULL);
    uslab_cache_free(c, p);
    uslab_cache_destroy(c);
  }
  /* At most 70 live caches; the next gets ENOMEM. */
  uslab_cache_t *live[100];
  int made = 0;
  while (made < 100 && (live[made] = uslab_cache_create("many", 32, 0, 0, NULL))) made++;
  CHECK(made == 70 && errno == ENOMEM);
  for (int i = 0; i < made; i++) uslab_cache_destroy(live[i]);
}

static void wrong_cache(void) {
  uslab_cache_t *a = uslab_cache_create("a", 32, 0, 0, NULL);
  uslab_cache_t *b = uslab_cache_create("b", 32, 0, 0, NULL);
  uslab_cache_free(b, uslab_cache_alloc(a));
  _exit(0);
}

static void test_wrong_cache(void) {
  char err[4096];
  int st = in_child(wrong_cache, err, sizeof err);
  CHECK(WIFSIGNALED(st));
  CHECK(strstr(err, "not from this cache") != NULL);
}

static void test_all_or_nothing(void) {
  struct rlimit old, lim;
  getrlimit(RLIMIT_AS, &old);
  struct mallinfo2 before = mallinfo2();
  lim.rlim_cur = 512ul << 20; /* far below what the requests need */
  lim.rlim_max = old.rlim_max;
  CHECK(setrlimit(RLIMIT_AS, &lim) == 0);
  static void *out[100000];
  errno = 0;
  CHECK(uslab_alloc_bulk(1 << 20, 2000, out) == 0 && errno == ENOMEM); /* 2 GiB of large */
  errno = 0;
  CHECK(uslab_alloc_bulk(32768, 100000, out) == 0 && errno == ENOMEM); /* 3 GiB of small */
  uslab_cache_t *c = uslab_cache_create("pressure", 20000, 0, 0, NULL);
  errno = 0;
  CHECK(c && uslab_cache_alloc_bulk(c, 100000, out) == 0 && errno == ENOMEM);
  /* Bulks of two until memory runs out: the failing call fails whole (the first
   * object it got is given back), and every pair before it is intact. */
  size_t pairs = 0, got = 0;
  void *odd = malloc(32768); /* refills come in twos: make the second of a pair fail */
  for (errno = 0; pairs < 50000 && (got = uslab_alloc_bulk(32768, 2, out + 2 * pairs)) == 2; pairs++)
    memset(out[2 * pairs + 1], 0x5a, 32768);
  CHECK(pairs < 50000 && got == 0 && errno == ENOMEM);
  for (size_t i = 0; i < pairs; i++) CHECK(((unsigned char *)out[2 * i + 1])[32767] == 0x5a);
  uslab_free_bulk(2 * pairs, out);
  /* The same with bulks of three (single pops): with 0, 1 and 2 objects held aside
   * the failing pop is the first, second or third; the call gives back what it had. */
  for (int aside = 0; aside < 3; aside++) {
    void *held[2] = {NULL, NULL};
    for (int i = 0; i < aside; i++) CHECK((held[i] = malloc(32768)) != NULL);
    size_t triples = 0;
    for (errno = 0;
         triples < 30000 && (got = uslab_alloc_bulk(32768, 3, out + 3 * triples)) == 3; triples++)
      memset(out[3 * triples + 2], 0x5b, 32768);
    CHECK(triples < 30000 && got == 0 && errno == ENOMEM);
    for (size_t i = 0; i < triples; i++) CHECK(((unsigned char *)out[3 * i + 2])[32767] == 0x5b);
    uslab_free_bulk(3 * triples, out);
    uslab_free_bulk(2, held);
  }
  free(odd);
  /* Nothing stayed allocated, and the heap still works. */
  struct mallinfo2 after = mallinfo2();
  CHECK(after.uordblks <= before.uordblks + (64u << 10));
  CHECK(uslab_alloc_bulk(64, 1000, out) == 1000);
  uslab_free_bulk(1000, out);
  uslab_cache_destroy(c);
  setrlimit(RLIMIT_AS, &old);
}

/* Threads allocate in bulk, stamp, swap batches through shared slots, verify and
 * free in bulk (objects of one thread freed by another). */
#define SLOTS 64
/* Caches created and destroyed while other threads malloc and free: each destroy
 * finds nothing live and gives its class back. Under guarded sampling a slot taken
 * for a malloc was seen for a moment with the class of the cache object it held
 * before, and the destroy retired that class as if an object were still out (until
 * no class was left). Run in a child: what the destroys print is read. */
static atomic_int stop_mallocs;
static void *malloc_churn(void *arg) {
  uint64_t r = (uintptr_t)arg + 1;
  void *slots[16] = {0};
  while (!atomic_load(&stop_mallocs)) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    size_t k = (r >> 33) % 16;
    free(slots[k]);
    slots[k] = malloc((r >> 40) % 2000 + 1);
  }
  for (int k = 0; k < 16; k++) free(slots[k]);
  return NULL;
}

static void reuse_beside_mallocs(void) {
  pthread_t ts[2];
  for (int t = 0; t < 2; t++) pthread_create(&ts[t], NULL, malloc_churn, (void *)(uintptr_t)t);
  for (int i = 0; i < 2000; i++) {
    uslab_cache_t *c = uslab_cache_create("beside", 48 + 16 * (size_t)(i % 4), 8, 0, NULL);
    if (!c) {
      fprintf(stderr, "cache creation %d failed: no class left\n", i + 1);
      break;
    }
    void *objs[20];
    size_t n = uslab_cache_alloc_bulk(c, 20, objs);
    uslab_cache_free_bulk(c, n, objs);
    uslab_cache_destroy(c);
  }
  atomic_store(&stop_mallocs, 1);
  for (int t = 0; t < 2; t++) pthread_join(ts[t], NULL);
}

static void test_reuse_beside_mallocs(void) {
  static char err[4096];
  int st = in_child(reuse_beside_mallocs, err, sizeof err);
  if (err[0]) fprintf(stderr, "%s", err);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(err[0] == 0);
}

static _Atomic(void **) exchange[SLOTS];
static atomic_ulong verified, corrupt;
static uslab_cache_t *shared_cache;

static void *bulk_worker(void *arg) {
  uint64_t r = (uintptr_t)arg * 7 + 1;
  for (int it = 0; it < 400; it++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = 1 + (r >> 33) % 100;
    size_t size = (r >> 13) % 3 == 0 ? 0 : 8 + (r >> 20) % 2000;  /* 0: the shared cache */
    void **batch = malloc(sizeof(void *) * (n + 2));
    batch[0] = (void *)(uintptr_t)n;
    batch[1] = (void *)(uintptr_t)size;
    size_t bytes = size ? size : 96;
    if ((size ? uslab_alloc_bulk(size, n, batch + 2) : uslab_cache_alloc_bulk(shared_cache, n, batch + 2)) != n) {
      atomic_fetch_add(&corrupt, 1);
      free(batch);
      continue;
    }
    for (size_t i = 0; i < n; i++) fill(batch[2 + i], bytes);
    void **got = atomic_exchange(&exchange[(r >> 40) % SLOTS], batch);
    if (!got) continue;
    size_t gn = (uintptr_t)got[0], gsize = (uintptr_t)got[1];
    for (size_t i = 0; i < gn; i++) {
      if (!intact(got[2 + i], gsize ? gsize : 96)) atomic_fetch_add(&corrupt, 1);
      atomic_fetch_add(&verified, 1);
    }
    if (gsize) uslab_free_bulk(gn, got + 2);
    else uslab_cache_free_bulk(shared_cache, gn, got + 2);
    free(got);
  }
  return NULL;
}

static void test_concurrent_bulk(void) {
  shared_cache = uslab_cache_create("shared", 96, 0, 0, NULL);
  CHECK(shared_cache != NULL);
  pthread_t ts[6];
  for (int t = 0; t < 6; t++) pthread_create(&ts[t], NULL, bulk_worker, (void *)(uintptr_t)t);
  for (int t = 0; t < 6; t++) pthread_join(ts[t], NULL);
  for (int k = 0; k < SLOTS; k++) {
    void **got = atomic_exchange(&exchange[k], NULL);
    if (!got) continue;
    size_t gn = (uintptr_t)got[0], gsize = (uintptr_t)got[1];
    for (size_t i = 0; i < gn; i++)
      if (!intact(got[2 + i], gsize ? gsize : 96)) atomic_fetch_add(&corrupt, 1);
    if (gsize) uslab_free_bulk(gn, got + 2);
    else uslab_cache_free_bulk(shared_cache, gn, got + 2);
    free(got);
  }
  CHECK(atomic_load(&verified) > 10000);
  CHECK(atomic_load(&corrupt) == 0);
  uslab_cache_destroy(shared_cache);
}

static char stats_text[1 << 16];
static void collect(void *opaque, const char *line) {
  (void)opaque;
  strncat(stats_text, line, sizeof stats_text - strlen(stats_text) - 1);
}

static void test_stats_show_caches(void) {
  uslab_cache_t *c = uslab_cache_create("visible-cache", 128, 0, 0, NULL);
  void *objs[50];
  CHECK(uslab_cache_alloc_bulk(c, 50, objs) == 50);
  stats_text[0] = 0;
  uslab_stats_print(collect, NULL);
  const char *line = strstr(stats_text, "cache visible-cache");
  CHECK(line != NULL);
  size_t active = 0;
  if (line) {
    const char *a = strstr(line, "active");
    if (a) sscanf(a, "active %zu", &active);
  }
  CHECK(active == 50);
  uslab_cache_free_bulk(c, 50, objs);
  uslab_cache_destroy(c);
}

int main(void) {
  require_uslab();
  test_bulk_every_class();
  test_mixed_free_bulk();
  test_constructor_contract();
  test_flags();
  test_poison();
  test_destroy_with_live_objects();
  test_bad_input_and_reuse();
  test_reuse_beside_mallocs();
  test_wrong_cache();
  test_stats_show_caches();
  test_concurrent_bulk();
  test_all_or_nothing();
  printf("bulk_cache: %lu objects verified across threads\n", atomic_load(&verified));
  return check_done("bulk_cache");
}
