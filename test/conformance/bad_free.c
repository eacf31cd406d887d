/* test/conformance/bad_free.c — one bad operation per run, chosen by argv[1]; the
 * driver (bad_free.sh) checks that uslab reports it with the pointer and aborts,
 * or only reports it with USLAB_CONF=abort_on_error=false. */
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
