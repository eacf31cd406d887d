/* bench/bigblocks.c — the page-fault storm test: ITERATIONS times, allocate a block of
 * 5 … 25 MiB (random), write every page of it, free it. An allocator that returns
 * such blocks to the OS on free and faults them in again on the next allocation
 * pays a page fault per page every time. Prints one JSON line: wall, user and system
 * seconds and minor page faults (getrusage).
 *
 * usage: bigblocks ITERATIONS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

int main(int argc, char **argv) {
  long iterations = argc > 1 ? atol(argv[1]) : 500;
  uint64_t s = 0x9e3779b97f4a7c15ull;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  unsigned long sum = 0;
  for (long i = 0; i < iterations; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    size_t size = ((size_t)5 << 20) + s % ((size_t)20 << 20);
    char *p = malloc(size);
    if (!p) return 1;
    for (size_t off = 0; off < size; off += 4096) p[off] = (char)i;
    sum += (unsigned char)p[size / 2];
    free(p);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("{\"iterations\": %ld, \"wall_s\": %.3f, \"user_s\": %.3f, \"sys_s\": %.3f, "
         "\"minflt\": %ld, \"check\": %lu}\n",
         iterations, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
         seconds(ru.ru_utime), seconds(ru.ru_stime), ru.ru_minflt, sum);
  return 0;
}
