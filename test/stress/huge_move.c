/* test/stress/huge_move.c — a huge object moved by realloc while other threads map
 * and free huge objects. A realloc that cannot grow in place moves the pages with
 * mremap; the range it leaves is free at once, and another thread's next huge
 * object is often mapped there, with its page-map entry at the same address as the
 * moved object's old one. A mover that clears that entry after the move wipes the
 * newcomer's now and then, and that object's free aborts as the free of an invalid
 * pointer (3 of 4 runs of this test). Every object carries a pattern on its first
 * and last page, checked after each move and before each free.
 *
 * usage: huge_move [MOVES] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "test/common/check.h"

enum { kMappers = 2 };
static const size_t kSmall = (size_t)70 << 20, kBig = (size_t)140 << 20;
static atomic_int done;
static atomic_ulong moved, mapped, bad;

static void stamp(unsigned char *p, size_t bytes, unsigned char v) {
  p[0] = v;
  p[bytes - 1] = (unsigned char)~v;
}

static int intact(const unsigned char *p, size_t bytes, unsigned char v) {
  return p[0] == v && p[bytes - 1] == (unsigned char)~v;
}

static void *mover(void *arg) {
  long moves = (long)(intptr_t)arg;
  for (long i = 0; i < moves; i++) {
    unsigned char *p = malloc(kSmall);
    if (!p) {
      atomic_fetch_add(&bad, 1);
      break;
    }
    stamp(p, kSmall, (unsigned char)i);
    unsigned char *q = realloc(p, kBig);
    if (!q || q[0] != (unsigned char)i || q[kSmall - 1] != (unsigned char)~i) {
      atomic_fetch_add(&bad, 1);
      free(q ? q : p);
      break;
    }
    if (q != p) atomic_fetch_add(&moved, 1);
    free(q);
  }
  atomic_store(&done, 1);
  return NULL;
}

static void *mapper(void *arg) {
  unsigned char v = (unsigned char)(intptr_t)arg;
  while (!atomic_load(&done)) {
    unsigned char *p = malloc(kSmall);
    if (!p) {
      atomic_fetch_add(&bad, 1);
      break;
    }
    stamp(p, kSmall, v);
    if (!intact(p, kSmall, v)) atomic_fetch_add(&bad, 1);
    free(p);
    atomic_fetch_add(&mapped, 1);
  }
  return NULL;
}

int main(int argc, char **argv) {
  require_uslab();
  long moves = argc > 1 ? atol(argv[1]) : 30000;
  pthread_t m, t[kMappers];
  CHECK(pthread_create(&m, NULL, mover, (void *)(intptr_t)moves) == 0);
  for (int i = 0; i < kMappers; i++)
    CHECK(pthread_create(&t[i], NULL, mapper, (void *)(intptr_t)(i + 1)) == 0);
  pthread_join(m, NULL);
  for (int i = 0; i < kMappers; i++) pthread_join(t[i], NULL);
  printf("huge_move: %lu of %ld reallocs moved, %lu huge objects mapped beside them\n",
         atomic_load(&moved), moves, atomic_load(&mapped));
  CHECK(atomic_load(&bad) == 0);
  CHECK(atomic_load(&moved) > (unsigned long)moves / 2); /* the race needs moves */
  CHECK(atomic_load(&mapped) > 0);
  return check_done("huge_move");
}
