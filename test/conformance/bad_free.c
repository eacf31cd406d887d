/* test/conformance/bad_free.c — one bad operation per run, chosen by argv[1]; the
 * driver (bad_free.sh) checks that uslab reports it with the pointer and aborts,
 * or only reports it with USLAB_CONF=abort_on_error=false; the guard cases must
 * fault (USLAB_CONF=guard=true). */
#include <malloc.h>
#include <stdint.h>

#include "test/common/check.h"

int main(int argc, char **argv) {
  require_uslab();
  if (argc < 2) return 2;
  const char *what = argv[1];
  static char not_heap[64];
  if (!strcmp(what, "invalid")) {
    printf("%p\n", (void *)not_heap);
    fflush(stdout);
    free(not_heap);
  } else if (!strcmp(what, "interior")) {
    char *p = malloc(64);
    printf("%p\n", (void *)(p + 16));
    fflush(stdout);
    free(p + 16);
  } else if (!strcmp(what, "double-small")) {
    void *p = malloc(48);
    printf("%p\n", p);
    fflush(stdout);
    free(p);
    free(p);
  } else if (!strcmp(what, "double-flushed")) {
    /* The second free reaches the slab only after the cache flushed the first. */
    void *p = malloc(48), *others[2000];
    printf("%p\n", p);
    fflush(stdout);
    free(p);
    for (int i = 0; i < 2000; i++) others[i] = malloc(48);
    for (int i = 0; i < 2000; i++) free(others[i]);
    free(p);
    for (int i = 0; i < 2000; i++) others[i] = malloc(48);
    for (int i = 0; i < 2000; i++) free(others[i]);
    malloc_trim(0);
  } else if (!strcmp(what, "double-large")) {
    void *p = malloc(100000);
    printf("%p\n", p);
    fflush(stdout);
    free(p);
    free(p);
  } else if (!strcmp(what, "write-after-free")) {
    /* (poison=true) Neighbours keep the slab; the object comes back from it. */
    char *keep = malloc(48), *p = malloc(48), *keep2 = malloc(48);
    printf("%p\n", (void *)p);
    fflush(stdout);
    free(p);
    p[5] = 0x11;
    for (int i = 0; i < 100000 && malloc(48) != p; i++) {
    }
    free(keep);
    free(keep2);
  } else if (!strcmp(what, "double-interleaved")) {
    /* (poison=true) Another free in between: the object is no cache's top. */
    void *p = malloc(48), *q = malloc(48);
    printf("%p\n", p);
    fflush(stdout);
    free(p);
    free(q);
    free(p);
  } else if (!strcmp(what, "overflow-large") || !strcmp(what, "underflow-large")) {
    /* (guard=true) One byte past the usable size, or one before the start. */
    for (size_t size = 40000; size <= 40000000; size *= 10) {
      char *p = malloc(size);
      size_t usable = malloc_usable_size(p);
      memset(p, 1, usable);
      free(p);
    }
    volatile char *p = malloc(100000);
    printf("%p\n", (void *)p);
    fflush(stdout);
    if (what[0] == 'o')
      p[malloc_usable_size((void *)p)] = 1;
    else
      p[-1] = 1;
  } else if (!strcmp(what, "realloc-invalid")) {
    printf("%p\n", (void *)not_heap);
    fflush(stdout);
    void *q = realloc(not_heap, 100);
    printf("realloc returned %p\n", q);
  } else {
    return 2;
  }
  printf("survived\n");
  return 0;
}
