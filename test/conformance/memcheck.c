/* test/conformance/memcheck.c — a program for Valgrind's Memcheck over a library
 * built with -Dvalgrind=true (core/platform/track.h); test/conformance/memcheck.sh
 * runs it and reads Memcheck's report. argv[1] picks what it does:
 *   clean       every kind of object used correctly: small, large, huge, calloc,
 *               aligned, realloc that grows, shrinks and moves, bulk, an object
 *               cache with a constructor (its objects read as defined): no error
 *   uaf-small, uaf-large, uaf-huge, uaf-cache, uaf-bulk
 *               one read of an object after its free: an invalid read
 *   uninit      a branch on a fresh malloc's contents: an uninitialised value
 *   leak        one 1000-byte block never freed: definitely lost
 * Exit 0 unless a check of its own fails (the report is Memcheck's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/uslab.h"

static volatile char sink;

static void touch(char *p, size_t n) {
  memset(p, 1, n);
  sink = p[n - 1];
}

static void ctor(void *obj) { memset(obj, 7, 48); }

static int clean(void) {
  size_t sizes[] = {8, 100, 4000, 32768, 100000, 8 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    char *p = malloc(sizes[i]);
    if (!p) return 1;
    touch(p, sizes[i]);
    free(p);
  }
  unsigned char *z = calloc(1000, 100);
  if (!z || z[99999] != 0) return 1;
  free(z);
  z = calloc(1, 6 << 20);  /* a huge block, fresh: zero without a memset */
  if (!z || z[(6 << 20) - 1] != 0) return 1;
  free(z);
  void *a = aligned_alloc(4096, 10000);
  touch(a, 10000);
  free(a);
  /* realloc: small -> large (moves), large grows and shrinks in place, huge moves */
  char *r = malloc(50);
  touch(r, 50);
  r = realloc(r, 200000);
  if (r[49] != 1) return 1;
  touch(r, 200000);
  r = realloc(r, 100000);
  if (r[99999] != 1) return 1;
  r = realloc(r, 20 << 20);
  if (r[99999] != 1) return 1;
  touch(r, 20 << 20);
  r = realloc(r, 60 << 20);
  if (r[(20 << 20) - 1] != 1) return 1;
  free(r);
  void *objs[64];
  if (uslab_alloc_bulk(64, 64, objs) != 64) return 1;
  for (int i = 0; i < 64; i++) touch(objs[i], 64);
  uslab_free_bulk(64, objs);
  uslab_cache_t *c = uslab_cache_create("memcheck", 48, 0, 0, ctor);
  if (!c) return 1;
  unsigned char *o = uslab_cache_alloc(c);
  if (!o || o[47] != 7) return 1;  /* constructed: defined */
  uslab_cache_free(c, o);
  uslab_cache_destroy(c);
  return 0;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "clean";
  if (!strcmp(what, "clean")) return clean();
  if (!strcmp(what, "uninit")) {
    char *p = malloc(64);
    if (p[10] == 42) puts("42");  /* reported: uninitialised */
    free(p);
    return 0;
  }
  if (!strcmp(what, "leak")) {
    char *p = malloc(1000);
    touch(p, 1000);
    p = NULL;
    return 0;
  }
  char *p = NULL;
  size_t n = 0;
  uslab_cache_t *c = NULL;
  if (!strcmp(what, "uaf-small")) n = 100;
  else if (!strcmp(what, "uaf-large")) n = 100000;
  else if (!strcmp(what, "uaf-huge")) n = 8 << 20;
  if (n) {
    p = malloc(n);
    touch(p, n);
    free(p);
  } else if (!strcmp(what, "uaf-cache")) {
    c = uslab_cache_create("memcheck", 48, 0, 0, ctor);
    p = uslab_cache_alloc(c);
    uslab_cache_free(c, p);
  } else if (!strcmp(what, "uaf-bulk")) {
    void *objs[8];
    if (uslab_alloc_bulk(32, 8, objs) != 8) return 1;
    uslab_free_bulk(8, objs);
    p = objs[3];
  } else {
    fprintf(stderr, "memcheck: unknown case %s\n", what);
    return 2;
  }
  sink = p[10];  /* reported: inside a freed block (a huge one may be unmapped: kept) */
  if (c) uslab_cache_destroy(c);
  return 0;
}
