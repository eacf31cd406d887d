/* test/vm/numa_place.c — where the kernel put the memory an allocator hands out, on a
 * machine with several NUMA nodes (run in the guest; skips with exit 77 on one node).
 *
 * First touch puts fresh memory on the toucher's node under any allocator; only reuse
 * shows whether an allocator keeps nodes apart. For every pair of nodes (a, b) with
 * CPUs and memory, threads bound to a node's CPUs do, with objects of every kind
 * (small classes, a mid-size class, large spans, huge blocks, and huge blocks again,
 * which uslab keeps mapped after a free for reuse):
 *   fresh:  a allocates, writes every byte; the pages must be on a;
 *   reuse:  a frees them, then b allocates the same sizes and writes them; on b;
 *   home:   a allocates, b frees (remote-node frees), a allocates again; on a, and
 *           uslab's remote-node counter grew by at least the small objects' number.
 * The node of a page comes from move_pages(2) with no target (the kernel's answer).
 * A node with CPUs and no memory (QEMU's --memless-node) gets its memory where the
 * kernel's own fallback puts it, the nearest node with memory (its distance list):
 *   memless: threads on it allocate, fresh and after a node with memory freed the same
 *           sizes; every page on that nearest node.
 * usage: numa_place [report | only=NODE]
 *   report     print the counts, exit 0 whatever they are (for the other allocators)
 *   only=NODE  under a memory policy that allows NODE alone (numactl --membind=NODE):
 *              threads on every node allocate, and every page must be on NODE */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "include/uslab.h"
#include "test/common/check.h"

enum { kMaxNodes = 64, kMaxObjs = 4096 };
struct kind {
  const char *name;
  size_t size;
  int count;
};
static const struct kind kinds[] = {
    {"16 B", 16, 4096},       {"256 B", 256, 1024},     {"4 KiB", 4096, 256},
    {"24 KiB", 24576, 64},    {"256 KiB", 262144, 16},  {"2 MiB", 2u << 20, 4},
    {"8 MiB (huge)", 8u << 20, 3},
};
enum { kKinds = sizeof kinds / sizeof kinds[0] };
static int small_objects(void) { return kinds[0].count + kinds[1].count + kinds[2].count; }

static cpu_set_t node_cpus[kMaxNodes];
static int node_ids[kMaxNodes], nnodes;
/* Nodes with CPUs and no memory, and the nearest node with memory of each. */
static cpu_set_t memless_cpus[kMaxNodes];
static int memless_ids[kMaxNodes], memless_nearest[kMaxNodes], nmemless;
static void *objs[kKinds][kMaxObjs];
static int report_only, only_node = -1;
static long misplaced_total;

static int parse_list(const char *path, cpu_set_t *set) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[4096];
  int n = 0;
  if (fgets(buf, sizeof buf, f)) {
    for (char *s = buf; *s && *s != '\n';) {
      char *end;
      long lo = strtol(s, &end, 10), hi = lo;
      if (end == s) break;
      if (*end == '-') hi = strtol(end + 1, &end, 10);
      for (long c = lo; c <= hi; c++) {
        if (set) CPU_SET(c, set);
        n++;
      }
      s = *end == ',' ? end + 1 : end;
    }
  }
  fclose(f);
  return n;
}

/* Nodes with CPUs and memory, in id order. */
static void find_nodes(void) {
  cpu_set_t mem;
  CPU_ZERO(&mem);  /* a cpu_set_t as a bitmap of node ids */
  parse_list("/sys/devices/system/node/has_memory", &mem);
  for (int id = 0; id < kMaxNodes && nnodes < kMaxNodes; id++) {
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", id);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (parse_list(path, &cpus) > 0 && CPU_ISSET(id, &mem)) {
      node_ids[nnodes] = id;
      node_cpus[nnodes++] = cpus;
    } else if (CPU_COUNT(&cpus) > 0 && nmemless < kMaxNodes) {
      /* The distance list, in node id order: the nearest node with memory. */
      snprintf(path, sizeof path, "/sys/devices/system/node/node%d/distance", id);
      FILE *f = fopen(path, "r");
      int best = -1, best_d = 1 << 30, d;
      for (int to = 0; f && fscanf(f, "%d", &d) == 1; to++)
        if (to != id && CPU_ISSET(to, &mem) && d < best_d) best = to, best_d = d;
      if (f) fclose(f);
      memless_ids[nmemless] = id;
      memless_cpus[nmemless] = cpus;
      memless_nearest[nmemless++] = best;
    }
  }
}

static long move_pages_query(void **pages, int *status, unsigned long n) {
  return syscall(SYS_move_pages, 0, n, pages, NULL, status, 0);
}

/* Pages of objs[k][0..count) not on node `want` (first, middle and last page of each). */
static int misplaced(int k, int want, int *total) {
  static void *pages[3 * kMaxObjs];
  static int status[3 * kMaxObjs];
  unsigned long n = 0;
  for (int i = 0; i < kinds[k].count; i++) {
    uintptr_t p = (uintptr_t)objs[k][i], sz = kinds[k].size;
    uintptr_t at[3] = {p, p + sz / 2, p + sz - 1};
    for (int j = 0; j < 3; j++) {
      void *page = (void *)(at[j] & ~(uintptr_t)4095);
      if (n && pages[n - 1] == page) continue;
      pages[n++] = page;
    }
  }
  if (move_pages_query(pages, status, n) != 0) {
    fprintf(stderr, "numa_place: move_pages: %s\n", strerror(errno));
    *total = (int)n;
    return (int)n;
  }
  int bad = 0;
  for (unsigned long i = 0; i < n; i++) bad += status[i] != want;
  *total = (int)n;
  return bad;
}

struct job {
  int node;       /* index into node_ids, or -1 - index into memless_ids */
  int op;         /* 0 allocate and write, 1 free */
  int ok;
};

static void *run_job(void *arg) {
  struct job *j = arg;
  cpu_set_t *cpus = j->node >= 0 ? &node_cpus[j->node] : &memless_cpus[-1 - j->node];
  j->ok = sched_setaffinity(0, sizeof *cpus, cpus) == 0;
  if (!j->ok) return NULL;
  for (int k = 0; k < kKinds; k++)
    for (int i = 0; i < kinds[k].count; i++) {
      if (j->op == 0) {
        objs[k][i] = malloc(kinds[k].size);
        if (!objs[k][i]) {
          j->ok = 0;
          return NULL;
        }
        memset(objs[k][i], 0x5a, kinds[k].size);
      } else {
        free(objs[k][i]);
        objs[k][i] = NULL;
      }
    }
  return NULL;
}

/* Runs op on a thread bound to node index n, and waits for it. */
static void on_node(int n, int op) {
  struct job j = {n, op, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, run_job, &j) == 0);
  pthread_join(t, NULL);
  CHECK(j.ok);
}

/* The pages must be on node index n's node (only_node under --membind; a memoryless
 * node's nearest for -1 - its index). */
static void expect_on(const char *phase, int n) {
  int want = only_node >= 0 ? only_node : n >= 0 ? node_ids[n] : memless_nearest[-1 - n];
  for (int k = 0; k < kKinds; k++) {
    int total, bad = misplaced(k, want, &total);
    printf("numa_place: %-13s %-13s node %d: %d of %d pages elsewhere\n", phase, kinds[k].name,
           want, bad, total);
    misplaced_total += bad;
    if (!report_only) CHECK(bad == 0);
  }
}

static unsigned long long remote_frees(void) {
  int (*get)(uslab_stats_t *, size_t) = (int (*)(uslab_stats_t *, size_t))dlsym(RTLD_DEFAULT,
                                                                                "uslab_stats_get");
  uslab_stats_t st;
  if (!get || get(&st, sizeof st) != 0) return 0;
  return st.remote_node_frees;
}

int main(int argc, char **argv) {
  report_only = argc > 1 && !strcmp(argv[1], "report");
  if (argc > 1 && !strncmp(argv[1], "only=", 5)) only_node = atoi(argv[1] + 5);
  find_nodes();
  if (nnodes < 2) {
    printf("numa_place: %d node(s) with CPUs and memory: skipped\n", nnodes);
    return 77;
  }
  int uslab = dlsym(RTLD_DEFAULT, "uslab_stats_get") != NULL;
  for (int a = 0; a < nnodes; a++) {
    int b = (a + 1) % nnodes;
    on_node(a, 0);
    expect_on("fresh", a);
    on_node(a, 1);
    on_node(b, 0);
    expect_on("reuse", b);
    on_node(b, 1);
    on_node(a, 0);
    unsigned long long before = remote_frees();
    on_node(b, 1);
    malloc_trim(0);  /* flushes the CPUs' remote-node buffers */
    unsigned long long sent = remote_frees() - before;
    on_node(a, 0);
    expect_on("home", a);
    printf("numa_place: node %d -> %d: %llu remote-node frees counted for %d small objects\n",
           node_ids[b], node_ids[a], sent, small_objects());
    if (uslab && !report_only) CHECK(sent >= (unsigned long long)small_objects());
    on_node(a, 1);
  }
  for (int m = 0; m < nmemless && only_node < 0; m++) {
    printf("numa_place: node %d has CPUs and no memory; the nearest with memory: %d\n",
           memless_ids[m], memless_nearest[m]);
    if (memless_nearest[m] < 0) continue;
    int other = node_ids[0] == memless_nearest[m] ? 1 : 0;  /* a node with memory, not it */
    on_node(-1 - m, 0);
    expect_on("memless fresh", -1 - m);
    on_node(-1 - m, 1);
    on_node(other, 0);  /* the same sizes allocated and freed on another node first */
    on_node(other, 1);
    on_node(-1 - m, 0);
    expect_on("memless reuse", -1 - m);
    on_node(-1 - m, 1);
  }
  printf("numa_place: %d nodes, %ld pages elsewhere in all\n", nnodes, misplaced_total);
  return check_done("numa_place");
}
