/* test/conformance/threads_at_exit.c [N] — N threads (64) each allocate and keep a
 * few objects of 16 B to 64 KiB, then wait; the process exits with all of them still
 * there: what an allocator has set up for many threads is all mapped at exit (the
 * commit charge check, startup_charge.c). Stacks of 256 KiB, so that they weigh
 * little beside the allocator. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_barrier_t ready;

static void* run(void* arg) {
  for (size_t size = 16; size <= 65536; size *= 2) {
    char* p = malloc(size);
    if (!p) abort();
    memset(p, 1, size);
    if (size & 0x5550) free(p);
  }
  pthread_barrier_wait(&ready);
  for (;;) pause();
  return arg;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 64;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  pthread_barrier_init(&ready, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; i++) {
    pthread_t t;
    if (pthread_create(&t, &attr, run, NULL) != 0) return 1;
  }
  pthread_barrier_wait(&ready);
  exit(0);
}
