/* test/sandbox/late.c — the allocator's own mappings refused after start: the
 * program installs a seccomp filter that makes mmap, mremap and mprotect fail (EPERM,
 * ENOSYS, or ENOMEM as RLIMIT_AS would), as a sandbox entered late does (a browser's
 * renderer, a server's worker after set-up), then allocates past what uslab holds
 * (guarded sampling's pool, when it comes now, is refused too). Expected:
 * every allocation that needs new memory returns NULL with errno ENOMEM
 * (posix_memalign returns it), realloc that fails leaves the block as it was, frees
 * still work (deferred frees too, whose blocks need memory of their own), memory
 * freed is allocated again, the statistics still render and name mmap as refused,
 * and nothing crashes.
 *
 *   late EPERM|ENOSYS|ENOMEM
 */
#include <errno.h>
#include <malloc.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>

#include "test/common/check.h"
#include "include/uslab.h"

enum { kBlocks = 4096 };

int main(int argc, char **argv) {
  require_uslab();
  if (argc < 2) return 2;
  int err = !strcmp(argv[1], "ENOSYS") ? ENOSYS : !strcmp(argv[1], "ENOMEM") ? ENOMEM : EPERM;
  /* On one CPU until the objects are freed elsewhere below: on several NUMA nodes each
   * node's shard has memory of its own, which another node's allocations do not take
   * (a thread that moved while it allocated would find fewer objects on its way back). */
  cpu_set_t all, one;
  int here = sched_getcpu(), there = -1;
  CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
  CPU_ZERO(&one);
  CPU_SET(here, &one);
  CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  /* Warm: some of every kind, freed, so that uslab holds memory it can hand out
   * again under the filter. */
  static void *keep[kBlocks];
  for (int i = 0; i < 256; i++) keep[i] = malloc((size_t)(i % 64 + 1) * 48);
  for (int i = 0; i < 256; i++) free(keep[i]);
  char *big = malloc(1 << 20);
  CHECK(big != NULL);
  memset(big, 0x5c, 1 << 20);

  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  CHECK(ctx && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), SCMP_SYS(mmap), 0) == 0 &&
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), SCMP_SYS(mremap), 0) == 0 &&
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), SCMP_SYS(mprotect), 0) == 0 &&
        seccomp_load(ctx) == 0);
  seccomp_release(ctx);

  /* New memory: refused, each call with ENOMEM, never a crash. */
  errno = 0;
  void *huge = malloc((size_t)1 << 30);
  CHECK(huge == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(calloc(1, (size_t)64 << 20) == NULL && errno == ENOMEM);
  void *al = NULL;
  CHECK(posix_memalign(&al, 1 << 21, (size_t)8 << 20) == ENOMEM && al == NULL);
  errno = 0;
  char *grown = realloc(big, (size_t)256 << 20);
  CHECK(grown == NULL && errno == ENOMEM);
  CHECK(big[0] == 0x5c && big[(1 << 20) - 1] == 0x5c); /* untouched by the failure */
  /* Small objects until the memory uslab holds runs out: each either an object or
   * NULL with ENOMEM. */
  int got = 0, refused = 0, bad_errno = 0;
  for (int i = 0; i < kBlocks; i++) {
    errno = 0;
    keep[i] = malloc(4000);
    if (keep[i]) {
      memset(keep[i], i & 0xff, 4000);
      got++;
    } else {
      refused++;
      bad_errno += errno != ENOMEM;
    }
  }
  CHECK(refused > 0 && bad_errno == 0);
  /* Every object handed out is intact, and freed; the same memory comes back. */
  int corrupt = 0;
  for (int i = 0; i < kBlocks; i++)
    if (keep[i] && (((unsigned char *)keep[i])[0] != (i & 0xff) ||
                    ((unsigned char *)keep[i])[3999] != (i & 0xff)))
      corrupt++;
  CHECK(corrupt == 0);
  /* Freed on another CPU than the one that allocates them again (a thread that
   * moved): in the per-CPU mode they sit in that CPU's sheaves, which a refill that
   * finds no memory must empty. Half are freed after a grace period: the blocks that
   * batch them come from memory uslab holds, or are chained through the objects, as
   * none can be mapped now. */
  for (int c = 0; c < CPU_SETSIZE && there < 0; c++)
    if (c != here && CPU_ISSET(c, &all)) there = c;
  CPU_ZERO(&one);
  CPU_SET(there >= 0 ? there : here, &one);
  CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  for (int i = 0; i < kBlocks; i++) {
    if (i & 1)
      uslab_free_deferred(keep[i]);
    else
      free(keep[i]);
  }
  uslab_deferred_barrier();
  CPU_ZERO(&one);
  CPU_SET(here, &one);
  CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  int again = 0;
  for (int i = 0; i < kBlocks && again < got; i++)
    if ((keep[i] = malloc(4000))) again++;
  CHECK(again == got);
  CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
  for (int i = 0; i < kBlocks; i++) free(keep[i]);
  free(big);
  /* The statistics, rendered without new memory, say what was refused (the ENOMEM
   * run's mmap answered as a full machine would, which is no refusal). */
  static char doc[1 << 20];
  size_t len = uslab_stats_json(doc, sizeof doc);
  CHECK(len > 0 && len < sizeof doc);
  const char *listed = strstr(doc, "\"refused_syscalls\"");
  CHECK(listed != NULL);
  if (listed) {
    const char *end = strchr(listed, '}');
    const char *named = strstr(listed, "\"mmap\"");
    CHECK((err == ENOMEM) == !(named && named < end));
  }
  printf("late %s: %d objects before the refusal, %d refused\n", argv[1], got, refused);
  return check_done("late");
}
