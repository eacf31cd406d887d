/* test/stress/deferred.c — deferred frees (uslab_free_deferred) and read-side
 * sections under load.
 *
 * usage: deferred TEST [SECONDS]
 *   readers   readers walk a shared table inside read-side sections and verify every
 *             object while writers replace objects and defer-free the old ones; half
 *             the objects come from a cache that poisons freed objects, so a reader
 *             that reaches freed memory sees the poison and fails
 *   bounded   only allocations and deferred frees (plus a reader thread whose
 *             sections are sometimes long) for SECONDS: resident memory stays
 *             bounded with no other call
 *   oom       deferred frees while the heap is exhausted under RLIMIT_AS go through
 *             the emergency chain, and are all freed after the barrier
 *   fork      fork while deferred frees are queued (and threads defer): the child's
 *             queue drains, the parent's too
 *   exit      threads that exit with deferred frees pending lose none
 *   nesting   nested sections, and sections opened by signal handlers inside a
 *             section, hold a grace period until the outermost unlock
 *   misuse    synchronize/barrier inside a section, an unmatched unlock and a write
 *             into a deferred object on the emergency chain abort with a message
 *   background  (run with USLAB_CONF=background_thread=true) deferred frees that fill
 *             no block and meet no later call still come back, through the background
 *             thread; malloc_trim(0) does it at once without one
 * Each test prints a one-line report; the exit status is the number of failures. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/proc_self.h"
#include "test/common/check.h"
#include "test/common/section_holder.h"
#include "include/uslab.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static uslab_stats_t stats(void) {
  uslab_stats_t s;
  CHECK(uslab_stats_get(&s, sizeof s) == 0);
  return s;
}

/* ---- readers ------------------------------------------------------------------ */

enum { kSlots = 256, kMagic = 0x5eed5eed };
struct obj {
  uint32_t magic;
  uint32_t slot;
  uint64_t id;
  uint64_t check;
  uint64_t pad[5];
};
static _Atomic(struct obj *) table[kSlots];
static uslab_cache_t *poisoned;
static atomic_int stop;
static atomic_ulong reads, bad_reads, writes;
static atomic_ulong next_id;

static struct obj *make(unsigned slot, int from_cache) {
  struct obj *o = from_cache ? uslab_cache_alloc(poisoned) : malloc(sizeof(struct obj) + slot % 64);
  if (!o) return NULL;
  o->magic = kMagic;
  o->slot = slot;
  o->id = atomic_fetch_add(&next_id, 1);
  o->check = o->id * 0x9e3779b97f4a7c15ull ^ slot;
  return o;
}

static int valid(const struct obj *o, unsigned slot) {
  return o->magic == kMagic && o->slot == slot && o->check == (o->id * 0x9e3779b97f4a7c15ull ^ slot);
}

static void *reader(void *arg) {
  uint64_t s = (uintptr_t)arg * 7919 + 1;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    uslab_read_lock();
    for (int k = 0; k < 16; k++) {
      unsigned i = rnd(&s) % kSlots;
      struct obj *o = atomic_load_explicit(&table[i], memory_order_acquire);
      int ok = valid(o, i);
      if (k == 8) {
        uslab_read_lock();  /* nested */
        for (volatile int spin = 0; spin < 200; spin++) {
        }
        uslab_read_unlock();
      }
      ok = ok && valid(o, i);  /* still intact later in the section */
      if (!ok) atomic_fetch_add(&bad_reads, 1);
      atomic_fetch_add_explicit(&reads, 1, memory_order_relaxed);
    }
    uslab_read_unlock();
  }
  return NULL;
}

static void *writer(void *arg) {
  uint64_t s = (uintptr_t)arg * 104729 + 3;
  unsigned long n = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    unsigned i = rnd(&s) % kSlots;
    struct obj *o = make(i, rnd(&s) & 1);
    if (!o) {
      CHECK(!"allocation failed");
      break;
    }
    struct obj *old = atomic_exchange_explicit(&table[i], o, memory_order_acq_rel);
    uslab_free_deferred(old);
    if (++n % 50000 == 0) uslab_synchronize();
  }
  atomic_fetch_add(&writes, n);
  return NULL;
}

static void test_readers(double seconds) {
  poisoned = uslab_cache_create("rcu-poisoned", sizeof(struct obj), 0, USLAB_CACHE_POISON, NULL);
  CHECK(poisoned != NULL);
  for (unsigned i = 0; i < kSlots; i++) atomic_store(&table[i], make(i, 1));
  enum { kReaders = 4, kWriters = 2 };
  pthread_t r[kReaders], w[kWriters];
  for (long i = 0; i < kReaders; i++) pthread_create(&r[i], NULL, reader, (void *)i);
  for (long i = 0; i < kWriters; i++) pthread_create(&w[i], NULL, writer, (void *)i);
  usleep((useconds_t)(seconds * 1e6));
  atomic_store(&stop, 1);
  for (int i = 0; i < kReaders; i++) pthread_join(r[i], NULL);
  for (int i = 0; i < kWriters; i++) pthread_join(w[i], NULL);
  for (unsigned i = 0; i < kSlots; i++) uslab_free_deferred(atomic_load(&table[i]));
  uslab_deferred_barrier();
  uslab_stats_t st = stats();
  CHECK(atomic_load(&bad_reads) == 0);
  CHECK(atomic_load(&writes) > 10000);
  CHECK(st.deferred_objects == 0);
  CHECK(st.grace_periods > 0);
  uslab_cache_destroy(poisoned);
  printf("readers: %d readers, %d writers, %.1f s: %lu reads, %lu objects replaced and "
         "deferred, %llu grace periods, %lu reads of freed memory\n",
         kReaders, kWriters, seconds, atomic_load(&reads), atomic_load(&writes),
         st.grace_periods, atomic_load(&bad_reads));
}

/* ---- bounded -------------------------------------------------------------------- */

/* Short sections, and every 2000th one held for 20 ms (a reader preempted inside
 * its section holds every grace period up meanwhile). */
static void *short_reader(void *arg) {
  (void)arg;
  for (unsigned long n = 1; !atomic_load_explicit(&stop, memory_order_relaxed); n++) {
    uslab_read_lock();
    if (n % 2000 == 0)
      usleep(20000);
    else
      for (volatile int spin = 0; spin < 1000; spin++) {
      }
    uslab_read_unlock();
  }
  return NULL;
}

static void test_bounded(double seconds) {
  pthread_t t;
  pthread_create(&t, NULL, short_reader, NULL);
  uint64_t s = 12345;
  long base = rss_kib(), peak = base;
  unsigned long ops = 0;
  double bytes = 0, end = now_s() + seconds;
  int failed = 0;
  while (now_s() < end && !failed) {
    for (int i = 0; i < 100000; i++) {
      size_t size = 16 + rnd(&s) % 1024;
      char *p = malloc(size);
      if (!p) {
        failed = 1;
        break;
      }
      p[0] = p[size - 1] = 1;
      uslab_free_deferred(p);
      bytes += size;
    }
    ops += 100000;
    long r = rss_kib();
    if (r > peak) peak = r;
  }
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  uslab_stats_t st = stats();
  CHECK(!failed);
  CHECK(peak - base < 64 * 1024);
  printf("bounded: %.1f s, %lu deferred frees (%.0f MB), peak RSS %ld KiB over a start of %ld "
         "KiB (limit 65536 over), %zu objects pending at the end\n",
         seconds, ops, bytes / 1e6, peak - base, base, st.deferred_objects);
}

/* ---- oom ------------------------------------------------------------------------- */

static char statbuf[1 << 16];
static size_t statlen;
static void collect(void *opaque, const char *text) {
  (void)opaque;
  size_t n = strlen(text);
  if (statlen + n < sizeof statbuf) {
    memcpy(statbuf + statlen, text, n);
    statlen += n;
  }
}
static size_t chained_now(void) {
  statlen = 0;
  uslab_stats_print(collect, NULL);
  statbuf[statlen] = 0;
  const char *line = strstr(statbuf, "deferred:");
  size_t pending = 0, bytes = 0, blocks = 0, chained = 0;
  if (!line || sscanf(line, "deferred: %zu objects pending (%zu bytes in %zu sealed blocks, %zu chained",
                      &pending, &bytes, &blocks, &chained) != 4)
    CHECK(!"stats table has a deferred line");
  return chained;
}

enum { kDeferred = 20000, kHog = 1 << 20 };
static void *hog[kHog];

/* With `corrupt`, every deferred object's first word is then overwritten with the
 * address of a live object (a write after uslab_free_deferred): a chained object's
 * link must not be followed to it, and the barrier must report it (and abort). */
static void test_oom_run(int corrupt) {
  static char *objs[kDeferred];
  for (int i = 0; i < kDeferred; i++) {
    objs[i] = malloc(64);
    CHECK(objs[i] != NULL);
    memset(objs[i], 0x11, 64);
  }
  size_t before = stats().allocated;
  struct section_holder holder;
  section_hold(&holder);  /* nothing deferred from here on can be freed */
  struct rlimit rl;
  long vm = proc_status_field("VmSize");
  rl.rlim_cur = rl.rlim_max = (rlim_t)(vm + 48 * 1024) * 1024;
  CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
  int n = 0;
  static const size_t sizes[] = {1 << 20, 65536, 4096, 512, 64, 8};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
    while (n < kHog && (hog[n] = malloc(sizes[k])) != NULL) n++;
  CHECK(n < kHog);
  errno = 0;
  CHECK(malloc(4096) == NULL && errno == ENOMEM);
  errno = 1234;
  for (int i = 0; i < kDeferred; i++) uslab_free_deferred(objs[i]);
  CHECK(errno == 1234);  /* a failed block allocation is not the caller's error */
  if (corrupt)
    for (int i = 0; i < kDeferred; i++) memcpy(objs[i], &hog[0], sizeof hog[0]);
  size_t chained = chained_now();
  CHECK(chained > 0);
  CHECK(stats().deferred_objects == kDeferred);  /* none freed while the section is open */
  section_release(&holder);
  for (int i = 0; i < n; i++) free(hog[i]);
  uslab_deferred_barrier();
  uslab_stats_t st = stats();
  CHECK(st.deferred_objects == 0);
  CHECK(chained_now() == 0);
  CHECK(st.allocated + 64 * kDeferred / 2 < before);  /* the deferred objects were freed */
  void *p = malloc(1 << 20);
  CHECK(p != NULL);
  free(p);
  printf("oom: heap exhausted with %d blocks; %d objects deferred, %zu of them chained "
         "through their own memory; all freed after the barrier\n", n, kDeferred, chained);
}

static void test_oom(void) { test_oom_run(0); }

/* ---- fork ------------------------------------------------------------------------ */

static void *deferrer(void *arg) {
  (void)arg;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    uslab_read_lock();
    void *p = malloc(48);
    uslab_read_unlock();
    uslab_free_deferred(p);
  }
  return NULL;
}

static void test_fork(void) {
  enum { kThreads = 2, kForks = 40 };
  pthread_t t[kThreads];
  for (int i = 0; i < kThreads; i++) pthread_create(&t[i], NULL, deferrer, NULL);
  int failed_children = 0;
  for (int k = 0; k < kForks; k++) {
    for (int i = 0; i < 1000; i++) uslab_free_deferred(malloc(32 + i % 100));
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < 1000; i++) uslab_free_deferred(malloc(24));
      uslab_read_lock();
      uslab_read_unlock();
      uslab_deferred_barrier();
      uslab_stats_t s;
      int ok = uslab_stats_get(&s, sizeof s) == 0 && s.deferred_objects == 0;
      void *p = malloc(100);
      ok = ok && p != NULL;
      free(p);
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_children++;
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < kThreads; i++) pthread_join(t[i], NULL);
  uslab_deferred_barrier();
  CHECK(failed_children == 0);
  CHECK(stats().deferred_objects == 0);
  printf("fork: %d forks with %d threads deferring; %d children failed to drain\n", kForks,
         kThreads, failed_children);
}

/* ---- exit ------------------------------------------------------------------------ */

static void *defer_and_exit(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  for (unsigned i = 0; i < 1000 + id; i++) uslab_free_deferred(malloc(16 + i % 512));
  return NULL;
}

static void test_exit(void) {
  size_t before = stats().allocated;
  enum { kThreads = 64 };
  for (int round = 0; round < 4; round++) {
    pthread_t t[16];
    for (uintptr_t i = 0; i < 16; i++) pthread_create(&t[i], NULL, defer_and_exit, (void *)i);
    for (int i = 0; i < 16; i++) pthread_join(t[i], NULL);
  }
  uslab_stats_t mid = stats();
  uslab_deferred_barrier();
  uslab_stats_t st = stats();
  CHECK(st.deferred_objects == 0);
  CHECK(st.allocated <= before + 64 * 1024);
  printf("exit: %d threads exited with deferred frees; %zu pending after them, %zu after the "
         "barrier; allocated %zu -> %zu bytes\n", kThreads, mid.deferred_objects,
         st.deferred_objects, before, st.allocated);
}

/* ---- nesting --------------------------------------------------------------------- */

static atomic_int phase;
static atomic_ulong handler_sections;
static double released_at;

static void handler(int sig) {
  (void)sig;
  uslab_read_lock();
  uslab_read_lock();
  uslab_read_unlock();
  uslab_read_unlock();
  atomic_fetch_add(&handler_sections, 1);
}

static void *holder(void *arg) {
  struct obj *o = arg;
  uslab_read_lock();
  uslab_read_lock();
  atomic_store(&phase, 1);
  double until = now_s() + 0.1;
  int ok = 1;
  while (now_s() < until) ok = ok && valid(o, 7);  /* signals arrive meanwhile */
  uslab_read_unlock();  /* inner: still inside */
  until = now_s() + 0.1;
  while (now_s() < until) ok = ok && valid(o, 7);
  CHECK(ok);
  released_at = now_s();
  uslab_read_unlock();
  atomic_store(&phase, 2);
  return NULL;
}

static void test_nesting(void) {
  signal(SIGUSR1, handler);
  poisoned = uslab_cache_create("rcu-nesting", sizeof(struct obj), 0, USLAB_CACHE_POISON, NULL);
  struct obj *o = make(7, 1);
  pthread_t t;
  pthread_create(&t, NULL, holder, o);
  while (atomic_load(&phase) == 0) usleep(100);
  uslab_free_deferred(o);  /* retired while the holder may still read it */
  pthread_t k = t;
  for (int i = 0; i < 20; i++) {
    pthread_kill(k, SIGUSR1);
    usleep(2000);
  }
  uslab_synchronize();
  double done = now_s();
  CHECK(atomic_load(&phase) == 2);
  CHECK(done >= released_at);
  uslab_deferred_barrier();
  pthread_join(t, NULL);
  CHECK(atomic_load(&handler_sections) > 0);
  CHECK(stats().deferred_objects == 0);
  uslab_cache_destroy(poisoned);
  printf("nesting: synchronize returned %.1f ms after the outermost unlock, %lu sections "
         "opened by signal handlers inside the holder's section\n",
         (done - released_at) * 1e3, atomic_load(&handler_sections));
}

/* ---- misuse ---------------------------------------------------------------------- */

static void expect_abort(const char *what, void (*fn)(void), const char *message) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    fn();
    _exit(0);
  }
  close(fds[1]);
  char buf[512] = {0};
  ssize_t len = 0, r;
  while ((r = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0) len += r;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  int ok = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(buf, message);
  if (!ok) fprintf(stderr, "%s: status %d, stderr '%s'\n", what, status, buf);
  CHECK(ok);
}

static void sync_inside(void) {
  uslab_read_lock();
  uslab_synchronize();
}
static void barrier_inside(void) {
  uslab_read_lock();
  uslab_read_lock();
  uslab_read_unlock();
  uslab_deferred_barrier();
}
static void unmatched_unlock(void) {
  uslab_read_lock();
  uslab_read_unlock();
  uslab_read_unlock();
}

static void chain_corrupted(void) { test_oom_run(1); }

static void test_misuse(void) {
  expect_abort("a chained deferred object written", chain_corrupted,
               "was written after uslab_free_deferred");
  expect_abort("synchronize inside a section", sync_inside, "inside a read-side section");
  expect_abort("barrier inside a section", barrier_inside, "inside a read-side section");
  expect_abort("unmatched unlock", unmatched_unlock, "without a matching uslab_read_lock");
  uslab_free_deferred(NULL);  /* a no-op */
  printf("misuse: 4 misuses reported and aborted\n");
}

/* ---- background ------------------------------------------------------------------ */

static void test_background(void) {
  /* This thread's section keeps every one of them pending until it ends, so the wait
   * below is the background thread's work: without it, a tick of the thread between
   * the frees and the count (a busy 16-CPU machine) could already have freed them all. */
  uslab_read_lock();
  for (int i = 0; i < 3000; i++) uslab_free_deferred(malloc(16 + i % 256));
  size_t after = stats().deferred_objects;
  uslab_read_unlock();
  CHECK(after == 3000);
  double deadline = now_s() + 5;
  while (stats().deferred_objects != 0 && now_s() < deadline) usleep(20000);
  size_t left = stats().deferred_objects;
  CHECK(left == 0);
  CHECK(proc_status_field("Threads") == 2);  /* this one and uslab's */
  /* Without the thread's help: malloc_trim seals and frees at once. */
  for (int i = 0; i < 700; i++) uslab_free_deferred(malloc(32));
  malloc_trim(0);
  size_t trimmed = stats().deferred_objects;
  CHECK(trimmed == 0);
  printf("background: %zu deferred objects pending after the frees, %zu after waiting with "
         "no other call; %zu after malloc_trim\n", after, left, trimmed);
}

int main(int argc, char **argv) {
  require_uslab();
  const char *test = argc > 1 ? argv[1] : "";
  double seconds = argc > 2 ? atof(argv[2]) : 2;
  if (!strcmp(test, "readers"))
    test_readers(seconds);
  else if (!strcmp(test, "bounded"))
    test_bounded(seconds);
  else if (!strcmp(test, "oom"))
    test_oom();
  else if (!strcmp(test, "fork"))
    test_fork();
  else if (!strcmp(test, "exit"))
    test_exit();
  else if (!strcmp(test, "nesting"))
    test_nesting();
  else if (!strcmp(test, "misuse"))
    test_misuse();
  else if (!strcmp(test, "background"))
    test_background();
  else {
    fprintf(stderr, "usage: deferred readers|bounded|oom|fork|exit|nesting|misuse|background "
                    "[SECONDS]\n");
    return 2;
  }
  return check_done("deferred");
}
