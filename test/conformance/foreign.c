/* test/conformance/foreign.c — blocks of glibc's malloc reaching uslab's free,
 * realloc and malloc_usable_size: a library opened with RTLD_DEEPBIND allocates with
 * glibc (its own scope binds libc first), the program frees and reallocs them with
 * uslab's. With foreign_free=forward (the default) every call works: frees go to
 * glibc, a realloc moves the block into uslab's heap with its bytes, the usable
 * size is glibc's. Sizes from 16 B to 300 KB (mmapped by glibc), and blocks from a
 * thread's arena. Modes: "forward" (all of that), "one" (a single foreign free, for
 * foreign_free=report and =abort in foreign.sh).
 *
 * usage: foreign LIBRARY [forward|one] */
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>

#include "test/common/check.h"

int main(int argc, char **argv) {
  require_uslab();
  if (argc < 3) return 2;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  CHECK(lib != NULL);
  if (!lib) return check_done("foreign");
  void *(*lib_malloc)(size_t) = (void *(*)(size_t))dlsym(lib, "foreign_lib_malloc");
  void *(*lib_malloc_thread)(size_t) = (void *(*)(size_t))dlsym(lib, "foreign_lib_malloc_in_thread");
  CHECK(lib_malloc && lib_malloc_thread);
  if (!strcmp(argv[2], "one")) {
    void *p = lib_malloc(100);
    printf("%p\n", p);
    fflush(stdout);
    free(p);
    printf("survived\n");
    return check_done("foreign");
  }
  enum { N = 300 };
  static const size_t sizes[] = {16, 24, 100, 1000, 4000, 70000, 300000};
  void *blocks[N];
  size_t want[N];
  for (int i = 0; i < N; i++) {
    want[i] = sizes[i % 7];
    blocks[i] = i % 10 == 9 ? lib_malloc_thread(want[i]) : lib_malloc(want[i]);
    CHECK(blocks[i] != NULL);
    memset(blocks[i], (unsigned char)i, want[i]);
    CHECK(malloc_usable_size(blocks[i]) >= want[i]);
  }
  for (int i = 0; i < N; i++) {
    if (i % 2) {
      free(blocks[i]);  /* to glibc */
      continue;
    }
    unsigned char *q = realloc(blocks[i], want[i] * 2 + 8);  /* into uslab's heap */
    CHECK(q != NULL);
    int same = 1;
    for (size_t k = 0; k < want[i]; k++) same &= q[k] == (unsigned char)i;
    CHECK(same);
    q[want[i] * 2 + 7] = 1;
    free(q);
  }
  /* glibc's heap is whole after all that: it still allocates and frees. */
  void *again = lib_malloc(5000);
  CHECK(again != NULL);
  free(again);
  printf("survived\n");
  return check_done("foreign");
}
