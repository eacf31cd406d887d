/* test/conformance/foreign_lib.c — a library that allocates with whatever malloc its
 * own scope binds: opened with RTLD_DEEPBIND, glibc's (test/conformance/foreign.c). */
#include <pthread.h>
#include <stdlib.h>

void *foreign_lib_malloc(size_t n) { return malloc(n); }

static void *thread_alloc(void *arg) { return malloc((size_t)arg); }

/* A block from a thread of the library's own: glibc gives it a non-main arena. */
void *foreign_lib_malloc_in_thread(size_t n) {
  pthread_t t;
  void *p = NULL;
  if (pthread_create(&t, NULL, thread_alloc, (void *)n) != 0) return NULL;
  pthread_join(t, &p);
  return p;
}
