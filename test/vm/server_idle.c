/* test/vm/server_idle.c — a server's memory after a peak, once it goes quiet: THREADS
 * threads each allocate their share of PEAK_MB in objects of 16 B to 4 KiB (random
 * sizes, every byte written), hand half of them to the next thread, which frees them
 * (cross-thread frees), free the rest, then stay alive and idle (blocked, no allocator
 * call) for IDLE_MS while the main thread samples nothing but /proc. Its own arrays are
 * mapped directly (bookkeeping below), so that the RSS is the objects' and the
 * allocator's.
 *
 * usage: server_idle THREADS PEAK_MB IDLE_MS
 * Prints "peak_kib N idle_kib N base_kib N": VmHWM, VmRSS at the end of the idle
 * time, and VmRSS once every thread runs, before any allocates: the threads' own
 * stacks, which under THP "always" can be most of the idle RSS. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int nthreads;
static size_t share;
static void ***handed;  /* per thread: the objects it gives to the next one */
static size_t *nhanded;
static pthread_barrier_t started, made, freed, done;

/* The program's own bookkeeping (arrays of pointers, 4 MiB each on a 1 GB peak) is
 * mapped directly, with small pages: through the allocator under test, under THP
 * "always", each got a 2 MiB huge page for a few KiB written, and the idle RSS measured
 * those arrays (20 MiB of 24 in an 8-thread run), not the allocator. */
static void *bookkeeping(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) abort();
  madvise(p, bytes, MADV_NOHUGEPAGE);
  return p;
}

static long status_kib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') v = atol(line + n + 1);
  if (f) fclose(f);
  return v;
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  uint64_t r = (uint64_t)id * 0x9e3779b97f4a7c15ull + 1;
  size_t cap = share / 16 + 1, n = 0, bytes = 0;
  pthread_barrier_wait(&started);
  pthread_barrier_wait(&started);  /* main has taken the baseline */
  void **mine = bookkeeping(cap * sizeof *mine);
  handed[id] = bookkeeping(cap * sizeof(void *));
  nhanded[id] = 0;
  while (bytes < share && n < cap) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    size_t sz = 16 + r % 4081;
    void *p = malloc(sz);
    if (!p) break;
    memset(p, (int)r, sz);
    bytes += sz;
    if (r & 1) handed[id][nhanded[id]++] = p;
    else mine[n++] = p;
  }
  pthread_barrier_wait(&made);
  int prev = (id + nthreads - 1) % nthreads;  /* free what the previous thread made */
  for (size_t i = 0; i < nhanded[prev]; i++) free(handed[prev][i]);
  for (size_t i = 0; i < n; i++) free(mine[i]);
  munmap(mine, cap * sizeof *mine);
  pthread_barrier_wait(&freed);
  pthread_barrier_wait(&done);  /* idle: alive, blocked */
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  nthreads = atoi(argv[1]);
  size_t peak = (size_t)atol(argv[2]) << 20;
  long idle_ms = atol(argv[3]);
  share = peak / (size_t)nthreads;
  handed = calloc((size_t)nthreads, sizeof *handed);
  nhanded = calloc((size_t)nthreads, sizeof *nhanded);
  pthread_t *t = malloc((size_t)nthreads * sizeof *t);
  pthread_barrier_init(&started, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&made, NULL, (unsigned)nthreads);
  pthread_barrier_init(&freed, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&done, NULL, (unsigned)nthreads + 1);
  for (int i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  pthread_barrier_wait(&started);
  long base = status_kib("VmRSS");
  pthread_barrier_wait(&started);
  pthread_barrier_wait(&freed);
  usleep((useconds_t)idle_ms * 1000);
  long idle = status_kib("VmRSS"), hwm = status_kib("VmHWM");
  pthread_barrier_wait(&done);
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  printf("peak_kib %ld idle_kib %ld base_kib %ld\n", hwm, idle, base);
  return 0;
}
