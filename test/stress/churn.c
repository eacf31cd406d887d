/* test/stress/churn.c — steady churn of mid-size and large blocks: THREADS threads
 * (more than CPUs, so they migrate and preempt each other inside the allocator)
 * each keep 256 slots and replace a random one at every step with a block of 16 …
 * 50015 bytes (uniform: mostly the 4 … 32 KiB classes, whose CPU sheaves hold two
 * to four batches of two objects and keep stealing capacity from each other, and
 * large spans), for SECONDS. Each block carries its owner's tag at both ends,
 * checked before it is freed. Run with a short decay_ms, so decay ticks drain and
 * trim the sheaves all along. Two changes to the sheaf sections (a copy loop moving
 * two pointers at a time through xmm0, and a drain merged with the push into one
 * section) made this fail, double frees or blocks handed out twice, in 1 or 2 runs
 * of 10 on a 2-CPU AMD EPYC VM, where the threads stress test never did; the cause
 * was not found and both were reverted (issue 3's notes).
 *
 * usage: churn [THREADS] [SECONDS]
 * Prints a report line: operations, threads, failures (must be 0). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "test/common/check.h"

enum { kSlots = 256, kMaxSize = 50000 };
static atomic_int stop;
static atomic_ulong ops, failures;

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct slot {
  unsigned char *p;
  size_t size;
  uint64_t tag;
};

static int intact(const struct slot *s) {
  uint64_t head, tail;
  memcpy(&head, s->p, sizeof head);
  memcpy(&tail, s->p + s->size - sizeof tail, sizeof tail);
  return head == s->tag && tail == s->tag;
}

static void *worker(void *arg) {
  uint64_t r = (uintptr_t)arg;
  struct slot slots[kSlots] = {{0}};
  unsigned long n = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    uint64_t x = next_rand(&r);
    struct slot *s = &slots[x % kSlots];
    if (s->p) {
      if (!intact(s) && atomic_fetch_add(&failures, 1) < 10) {
        fprintf(stderr, "churn: block %p of %zu bytes overwritten while its owner held it\n",
                (void *)s->p, s->size);
      }
      free(s->p);
    }
    s->size = (x >> 32) % kMaxSize + 16;  /* head and tail tags do not overlap */
    s->p = malloc(s->size);
    s->tag = next_rand(&r);
    memcpy(s->p, &s->tag, sizeof s->tag);
    memcpy(s->p + s->size - sizeof s->tag, &s->tag, sizeof s->tag);
    n++;
  }
  for (int k = 0; k < kSlots; k++) {
    if (slots[k].p && !intact(&slots[k])) atomic_fetch_add(&failures, 1);
    free(slots[k].p);
  }
  atomic_fetch_add(&ops, n);
  return NULL;
}

int main(int argc, char **argv) {
  require_uslab();
  int nthreads = argc > 1 ? atoi(argv[1]) : 4;
  double seconds = argc > 2 ? atof(argv[2]) : 3;
  pthread_t t[64];
  if (nthreads < 1 || nthreads > 64) return 2;
  for (int i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
  struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
  nanosleep(&ts, NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  CHECK(atomic_load(&failures) == 0);
  printf("churn: %lu operations, %d threads, %.1f s, %lu failures\n", atomic_load(&ops), nthreads,
         seconds, atomic_load(&failures));
  return check_done("churn");
}
