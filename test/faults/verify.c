/* test/faults/verify.c — content-verified churn for the fault-injection build
 * (core/platform/fault.h): threads allocate with every entry point (malloc, calloc,
 * realloc, aligned_alloc, posix_memalign, the bulk API), from 8 bytes to 6 MB, fill
 * each object with its own pattern, hand some to other threads to free, defer some
 * (uslab_free_deferred), trim, and check every object before it goes. While system
 * calls fail as USLAB_FAULT asks, an allocation may fail, and then only cleanly:
 * NULL (0 from the bulk call) with errno ENOMEM, ENOMEM from posix_memalign, realloc
 * leaving the old object as it was. Nothing else may change: no object's contents, no
 * calloc's zeros, and the statistics afterwards (nothing live once all is freed, the
 * deferred frees done).
 *
 * usage: verify THREADS SECONDS
 * Prints the tally: operations, allocations that failed, checks that failed (0). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/uslab.h"
#include "test/common/check.h"

enum { kSlots = 256, kShared = 64 };

typedef struct {
  unsigned char* p;
  size_t size;
  unsigned char tag;
} Object;

static atomic_ulong ops, failed_allocs, bad_errno, corrupt;
static _Atomic(Object*) shared[kShared];  /* objects handed to another thread to free */
static atomic_int stop;

static uint64_t next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* 8 B to 6 MB, most of them small. */
static size_t pick_size(uint64_t* s) {
  unsigned r = next(s) % 100;
  if (r < 70) return 8 + next(s) % 1024;
  if (r < 90) return 1024 + next(s) % (256 << 10);
  return (256 << 10) + next(s) % (6 << 20);
}

static void fill(Object* o) { memset(o->p, o->tag, o->size); }

static int intact(const Object* o) {
  /* First, last and a stride between: a full scan of 6 MB objects would dominate. */
  size_t step = o->size / 64 + 1;
  for (size_t i = 0; i < o->size; i += step)
    if (o->p[i] != o->tag) return 0;
  return o->p[o->size - 1] == o->tag;
}

static void note_failure(int err) {
  atomic_fetch_add(&failed_allocs, 1);
  if (err != ENOMEM && atomic_fetch_add(&bad_errno, 1) < 5)
    fprintf(stderr, "verify: an allocation failed with errno %d, not ENOMEM\n", err);
}

static void retire(Object* o) {
  if (!intact(o) && atomic_fetch_add(&corrupt, 1) < 5)
    fprintf(stderr, "verify: an object of %zu bytes changed\n", o->size);
}

/* A new object in *o by one of the entry points; 0 when it failed (cleanly or not). */
static int make(Object* o, uint64_t* s) {
  o->size = pick_size(s);
  o->tag = (unsigned char)(next(s) | 1);
  errno = 0;
  switch (next(s) % 5) {
    case 0:
      o->p = malloc(o->size);
      break;
    case 1:
      o->p = calloc(1, o->size);
      if (o->p) {
        size_t step = o->size / 64 + 1;
        for (size_t i = 0; i < o->size; i += step)
          if (o->p[i] && atomic_fetch_add(&corrupt, 1) < 5)
            fprintf(stderr, "verify: calloc(%zu) read non-zero at %zu\n", o->size, i);
      }
      break;
    case 2:
      o->p = aligned_alloc(64, (o->size + 63) & ~(size_t)63);
      break;
    case 3: {
      void* p = NULL;
      int r = posix_memalign(&p, 4096, o->size);
      o->p = r ? NULL : p;
      errno = r;
      break;
    }
    default: {
      void* one[4];
      size_t n = uslab_alloc_bulk(o->size, 4, one);
      o->p = n ? one[0] : NULL;
      if (n) uslab_free_bulk(3, one + 1);
      break;
    }
  }
  if (!o->p) {
    note_failure(errno);
    return 0;
  }
  fill(o);
  return 1;
}

static void* worker(void* arg) {
  uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ull | 1;
  Object slots[kSlots];
  memset(slots, 0, sizeof slots);
  while (!atomic_load(&stop)) {
    Object* o = &slots[next(&s) % kSlots];
    atomic_fetch_add(&ops, 1);
    if (!o->p) {
      make(o, &s);
      continue;
    }
    switch (next(&s) % 6) {
      case 0: { /* realloc: a failure keeps the old object whole */
        size_t size = pick_size(&s);
        errno = 0;
        unsigned char* q = realloc(o->p, size);
        if (!q) {
          note_failure(errno);
          retire(o);
          break;
        }
        size_t keep = size < o->size ? size : o->size;
        Object moved = {q, keep, o->tag};
        retire(&moved);
        o->p = q;
        o->size = size;
        fill(o);
        break;
      }
      case 1: { /* to another thread, which frees it */
        Object* h = malloc(sizeof *h);
        if (!h) {
          note_failure(errno);
          break;
        }
        *h = *o;
        Object* old = atomic_exchange(&shared[next(&s) % kShared], h);
        if (old) {
          retire(old);
          free(old->p);
          free(old);
        }
        o->p = NULL;
        break;
      }
      case 2: /* deferred */
        retire(o);
        uslab_free_deferred(o->p);
        o->p = NULL;
        break;
      default:
        retire(o);
        free(o->p);
        o->p = NULL;
    }
    if (next(&s) % 8192 == 0) {
      /* All of this thread's objects freed and purged, then calloc's zeros read in
       * full: spans a purge left clean come back without a memset. */
      for (int i = 0; i < kSlots; i++)
        if (slots[i].p) {
          retire(&slots[i]);
          free(slots[i].p);
          slots[i].p = NULL;
        }
      uslab_trim();
      for (int i = 0; i < 16; i++) {
        size_t size = (32 << 10) + next(&s) % (1 << 20);
        unsigned char* q = calloc(1, size);
        if (!q) {
          note_failure(errno);
          continue;
        }
        for (size_t j = 0; j < size; j++)
          if (q[j]) {
            if (atomic_fetch_add(&corrupt, 1) < 5)
              fprintf(stderr, "verify: calloc(%zu) after a trim read non-zero at %zu\n", size, j);
            break;
          }
        free(q);
      }
    }
  }
  for (int i = 0; i < kSlots; i++)
    if (slots[i].p) {
      retire(&slots[i]);
      free(slots[i].p);
    }
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 4;
  int seconds = argc > 2 ? atoi(argv[2]) : 5;
  require_uslab();
  uslab_stats_t before;
  CHECK(uslab_stats_get(&before, sizeof before) == 0);
  pthread_t t[64];
  if (threads > 64) threads = 64;
  int started = 0;
  /* pthread_create allocates the thread's TLS with calloc: it fails (EAGAIN) when an
   * injected failure makes that calloc fail, and is tried again. */
  for (int i = 0, tries = 0; i < threads && tries < 1000; tries++)
    if (pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)(i + 1)) == 0) started = ++i;
  CHECK(started > 0);
  struct timespec ts = {seconds, 0};
  nanosleep(&ts, NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < kShared; i++) {
    Object* o = atomic_exchange(&shared[i], NULL);
    if (o) {
      retire(o);
      free(o->p);
      free(o);
    }
  }
  uslab_deferred_barrier();
  uslab_stats_t after;
  CHECK(uslab_stats_get(&after, sizeof after) == 0);
  /* Everything the threads made is freed: what is live is what was live at the start
   * (stdio's buffers) give or take a few objects of the C library's. */
  CHECK(after.allocated < before.allocated + (64 << 10));
  CHECK(after.deferred_objects == 0);
  CHECK(atomic_load(&corrupt) == 0);
  CHECK(atomic_load(&bad_errno) == 0);
  printf("verify: %lu operations, %d threads, %lu allocations failed, %lu corrupt, "
         "%lu bytes live after\n",
         atomic_load(&ops), started, atomic_load(&failed_allocs), atomic_load(&corrupt),
         (unsigned long)after.allocated);
  return check_done("verify");
}
