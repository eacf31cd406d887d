/* test/stress/churn.c — steady churn of mid-size and large blocks: THREADS threads
 * (more than CPUs, so they migrate and preempt each other inside the allocator)
 * each keep 256 slots and replace a random one at every step with a block of 16 …
 * 50015 bytes (uniform: mostly the 4 … 32 KiB classes, whose CPU sheaves hold two
 * to four batches of two objects and keep stealing capacity from each other, and
 * large spans), for SECONDS. Each block carries its owner's tag at both ends,
 * checked before it is freed. Run with a short decay_ms, so decay ticks drain and
 * trim the sheaves all along; `signals` adds a SIGALRM every 50 µs, each of which
 * restarts the restartable section it lands in. It caught a free's drain section
 * that wrote a slot below the sheaf's top before its commit: a restart then moved
 * that block out as well as keeping it (double frees, blocks handed out twice) in 7
 * runs of 30 without signals on a 2-CPU AMD EPYC VM, where the threads stress test
 * never failed.
 *
 * usage: churn [THREADS] [SECONDS] [signals]
 * Prints a report line: operations, threads, failures (must be 0). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "test/common/check.h"
#include "test/common/signal_storm.h"

enum { kSlots = 256, kMaxSize = 50000 };
static atomic_int stop, storm;
static atomic_ulong ops, failures, signals;

static void on_alarm(int sig) {
  (void)sig;
  atomic_fetch_add_explicit(&signals, 1, memory_order_relaxed);
}

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
  if (storm) storm_worker();
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
  storm = argc > 3 && strcmp(argv[3], "signals") == 0;
  if (storm) storm_start(on_alarm, 50);
  for (int i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
  struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) { /* interrupted by another signal: sleep the rest */
  }
  atomic_store(&stop, 1);
  if (storm) storm_stop();
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  CHECK(atomic_load(&failures) == 0);
  if (storm) CHECK(atomic_load(&signals) > 0); /* the workers took them */
  printf("churn: %lu operations, %d threads, %.1f s, %lu signals, %lu failures\n",
         atomic_load(&ops), nthreads, seconds, atomic_load(&signals), atomic_load(&failures));
  return check_done("churn");
}
