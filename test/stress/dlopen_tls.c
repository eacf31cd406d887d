/* test/stress/dlopen_tls.c — libuslab.so loaded with dlopen rather than preloaded
 * (jemalloc#937, mimalloc#147): its initial-exec TLS must fit glibc's static TLS surplus, so the
 * load succeeds, and its allocator works from several threads through dlsym'd
 * pointers (this program itself keeps glibc's malloc). Not run under LD_PRELOAD.
 * usage: dlopen_tls PATH/TO/libuslab.so */
#include <pthread.h>
#include <stdint.h>

#include "test/common/check.h"

static void *(*u_malloc)(size_t);
static void (*u_free)(void *);
static size_t (*u_usable)(void *);

static void *worker(void *arg) {
  uintptr_t ok = 1;
  for (int i = 0; i < 10000; i++) {
    size_t n = (size_t)(i * 37 % 5000) + 1 + (uintptr_t)arg;
    unsigned char *p = u_malloc(n);
    if (!p || u_usable(p) < n) ok = 0;
    memset(p, 0x77, n);
    if (p[n - 1] != 0x77) ok = 0;
    u_free(p);
  }
  return (void *)ok;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) fprintf(stderr, "dlopen: %s\n", dlerror());
  CHECK(h != NULL);
  if (!h) return check_done("dlopen_tls");
  u_malloc = (void *(*)(size_t))dlsym(h, "malloc");
  u_free = (void (*)(void *))dlsym(h, "free");
  u_usable = (size_t(*)(void *))dlsym(h, "malloc_usable_size");
  CHECK(u_malloc && u_free && u_usable);
  CHECK(symbol_is_uslab((void *)u_malloc));
  pthread_t ts[4];
  for (int t = 0; t < 4; t++) pthread_create(&ts[t], NULL, worker, (void *)(uintptr_t)t);
  for (int t = 0; t < 4; t++) {
    void *ok = NULL;
    pthread_join(ts[t], &ok);
    CHECK(ok == (void *)1);
  }
  void *mine = malloc(100); /* glibc's, untouched by uslab */
  free(mine);
  return check_done("dlopen_tls");
}
