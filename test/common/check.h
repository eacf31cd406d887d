/* test/common/check.h — minimal checking for the C test programs that run under
 * LD_PRELOAD (they cannot use Catch2: they must be plain programs on any libc).
 * CHECK never aborts, so one run reports every failure; check_done() prints the
 * tally and returns the exit status. require_uslab() fails the test unless malloc
 * really resolves to libuslab.so — a test that silently ran on glibc proves nothing.
 * Built with USLAB_TEST_STATIC, for a static binary linked with libuslab.a. */
#ifndef USLAB_TEST_CHECK_H
#define USLAB_TEST_CHECK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_total, check_failed;

/* The OS page uslab works with: the kernel's, or a larger one USLAB_CONF's os_page
 * asks for (65536, 16k...). */
static inline size_t uslab_os_page(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const char *conf = getenv("USLAB_CONF"), *at = conf ? strstr(conf, "os_page=") : NULL;
  if (at) {
    char *end;
    size_t v = strtoul(at + 8, &end, 0);
    if (*end == 'k' || *end == 'K') v <<= 10;
    if (v > page) page = v;
  }
  return page;
}

#define CHECK(cond)                                                              \
  do {                                                                           \
    check_total++;                                                               \
    if (!(cond)) {                                                               \
      check_failed++;                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                            \
  } while (0)

#ifdef USLAB_TEST_STATIC
#include "include/uslab.h"

/* A static binary (test/programs/static_link.sh) has no dynamic symbols to ask. Each
 * name has one definition there, and the script checks that none of glibc's malloc
 * was linked in, so every allocator entry point present is uslab's. */
static inline int symbol_is_uslab(void *fn) { return fn != NULL; }
#define USLAB_TEST_SYMBOL(name) ((void *)&name)

/* uslab served malloc if it mapped memory for it (glibc's malloc would have moved
 * the program break or mapped on its own, and uslab would have mapped nothing). */
static inline void require_uslab(void) {
  void *p = malloc(64);
  uslab_stats_t st;
  int served = p && uslab_stats_get(&st, sizeof st) == 0 && st.mapped > 0 && st.allocated >= 64;
  free(p);
  if (!served) {
    fprintf(stderr, "FAIL: malloc is not uslab's in this static binary\n");
    exit(1);
  }
}
#else
static inline int symbol_is_uslab(void *fn) {
  Dl_info info;
  return fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libuslab");
}
#define USLAB_TEST_SYMBOL(name) dlsym(RTLD_DEFAULT, #name)

static inline void require_uslab(void) {
  void *fn = dlsym(RTLD_DEFAULT, "malloc");
  if (!symbol_is_uslab(fn) || !dlsym(RTLD_DEFAULT, "uslab_version")) {
    fprintf(stderr, "FAIL: malloc does not resolve to libuslab.so (not preloaded?)\n");
    exit(1);
  }
}
#endif

static inline int check_done(const char *name) {
  printf("%s: %d checks, %d failed\n", name, check_total, check_failed);
  return check_failed ? 1 : 0;
}

#endif
