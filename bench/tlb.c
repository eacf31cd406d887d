/* bench/tlb.c — a big heap walked at random, where transparent huge pages pay:
 * allocates OBJECTS objects of 64 bytes (256 MiB for 4M), links them into one random
 * cycle and follows it STEPS times. Each step is a dependent load from a random
 * place of the heap, so its cost is mostly the TLB miss and the page walk that 4 KiB
 * pages need and 2 MiB pages mostly avoid. Prints one JSON line: ns per step, the
 * time to allocate and link the objects, peak RSS, and the process's AnonHugePages
 * (kB of anonymous memory backed by huge pages) after the walk.
 *
 * usage: tlb [OBJECTS [STEPS]] */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "proc_self.h"

struct node {
  struct node *next;
  char pad[56];
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : (size_t)4 << 20;
  size_t steps = argc > 2 ? strtoul(argv[2], NULL, 10) : (size_t)20 << 20;
  struct node **objs = malloc(n * sizeof *objs);
  if (!objs || n < 2) return 2;
  double t0 = now();
  for (size_t i = 0; i < n; i++) {
    objs[i] = malloc(sizeof(struct node));
    if (!objs[i]) return 2;
    objs[i]->pad[0] = (char)i;
  }
  /* A random cyclic order (Sattolo's shuffle), linked through the objects. */
  uint64_t s = 88172645463325252ull;
  for (size_t i = n - 1; i > 0; i--) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    size_t j = s % i;
    struct node *t = objs[i];
    objs[i] = objs[j];
    objs[j] = t;
  }
  for (size_t i = 0; i < n; i++) objs[i]->next = objs[(i + 1) % n];
  double t1 = now();
  struct node *p = objs[0];
  for (size_t i = 0; i < steps; i++) p = p->next;
  double t2 = now();
  long huge = anon_huge_kib();
  printf("{\"objects\": %zu, \"steps\": %zu, \"ns_per_step\": %.2f, \"setup_s\": %.3f, "
         "\"peak_rss_kib\": %ld, \"anon_huge_kib\": %ld, \"end\": %d}\n",
         n, steps, (t2 - t1) * 1e9 / (double)steps, t1 - t0, peak_rss_kib(), huge,
         (int)(p->pad[0] & 1));
  for (size_t i = 0; i < n; i++) free(objs[i]);
  free(objs);
  return 0;
}
