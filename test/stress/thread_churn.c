/* test/stress/thread_churn.c — thread lifecycle:
 *  - 100 000 threads created and joined, each allocating and freeing: the heap must
 *    not grow (glibc tst-malloc-tcache-leak: at most a byte per thread);
 *  - threads whose first operation is each size class (snmalloc first_operation);
 *  - threads that only free memory another thread allocated (jemalloc tsd test);
 *  - 33 pthread keys whose destructors allocate and free after uslab's own thread
 *    destructor may have run (snmalloc multi_setspecific / teardown).
 * usage: thread_churn [THREADS] */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>

#include "test/common/check.h"

static void *short_life(void *arg) {
  size_t n = (uintptr_t)arg;
  void *a = malloc(n % 2000 + 1), *b = malloc(64), *c = calloc(1, 100000);
  free(b);
  free(a);
  free(c);
  return NULL;
}

static void *first_op(void *arg) {
  size_t size = (uintptr_t)arg;
  char *p = malloc(size);
  if (p) memset(p, 1, size);
  free(p);
  return p ? (void *)1 : NULL;
}

static void *only_frees(void *arg) {
  free(arg);
  return NULL;
}

#define NKEYS 33
static pthread_key_t keys[NKEYS];
static void key_dtor(void *v) {
  free(v); /* may run after uslab's destructor: must use the slow path, not crash */
  void *again = malloc(200);
  memset(again, 2, 200);
  free(again);
}

static void *uses_keys(void *arg) {
  (void)arg;
  for (int k = 0; k < NKEYS; k++) pthread_setspecific(keys[k], malloc(32 + (size_t)k));
  return NULL;
}

static size_t in_use(void) { return mallinfo2().uordblks; }

int main(int argc, char **argv) {
  require_uslab();
  int threads = argc > 1 ? atoi(argv[1]) : 100000;
  pthread_t t;

  /* Warm up so the steady state is measured, not first-use metadata. */
  for (int i = 0; i < 100; i++) {
    pthread_create(&t, NULL, short_life, (void *)(uintptr_t)i);
    pthread_join(t, NULL);
  }
  malloc_trim(0);
  size_t before = in_use();
  for (int i = 0; i < threads; i++) {
    CHECK(pthread_create(&t, NULL, short_life, (void *)(uintptr_t)i) == 0);
    pthread_join(t, NULL);
  }
  malloc_trim(0);
  size_t after = in_use();
  printf("churn: %d threads, in-use bytes %zu -> %zu\n", threads, before, after);
  CHECK(after <= before + (size_t)threads); /* glibc's bound: one byte per thread */

  for (size_t size = 1; size <= 40000; size = size * 3 / 2 + 1) {
    void *ok = NULL;
    CHECK(pthread_create(&t, NULL, first_op, (void *)size) == 0);
    pthread_join(t, &ok);
    CHECK(ok != NULL);
  }

  for (int i = 0; i < 100; i++) {
    void *p = malloc((size_t)i * 100 + 1);
    CHECK(pthread_create(&t, NULL, only_frees, p) == 0);
    pthread_join(t, NULL);
  }

  for (int k = 0; k < NKEYS; k++) CHECK(pthread_key_create(&keys[k], key_dtor) == 0);
  for (int i = 0; i < 200; i++) {
    CHECK(pthread_create(&t, NULL, uses_keys, NULL) == 0);
    pthread_join(t, NULL);
  }
  return check_done("thread_churn");
}
