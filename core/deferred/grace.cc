// core/grace.cc — reader registration, grace-period scans and waits; see
// grace.h for the protocol and why it is safe.
#include "core/deferred/grace.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "core/alloc/alloc.h"
#include "core/platform/libc_calls.h"

namespace uslab {

// Starts at 1 so that a stamp is never 0 (blocks carry stamps in their headers).
constinit std::atomic<uint64_t> g_grace_seq{1};
constinit bool g_grace_reader_fence = false;
__thread ReaderRecord* t_reader __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

constinit std::atomic<ReaderRecord*> records_{nullptr};
constinit Mutex init_lock_;
USLAB_LOCK_ONE(kGraceInit, init_lock_);
constinit std::atomic<bool> ready_{false};
bool membarrier_ = false;
pthread_key_t exit_key_;
// Counter values below which every grace period was seen complete (stats).
constinit std::atomic<uint64_t> completed_upto_{1};

// The thread is exiting: its record goes back for reuse. A thread that exits
// inside a section (a program bug) does not hold grace periods up forever.
void on_thread_exit(void* arg) {
  auto* r = static_cast<ReaderRecord*>(arg);
  if (t_reader == r) t_reader = nullptr;
  r->ctr.store(0, std::memory_order_release);
  r->in_use.store(0, std::memory_order_release);
}

// Once per process, before the first record is handed out: membarrier or fences,
// and the exit key.
void init_once() {
  if (ready_.load(std::memory_order_acquire)) return;
  LockGuard g(init_lock_);
  if (ready_.load(std::memory_order_relaxed)) return;
  config_init();
  long cmds = g_config.membarrier ? os::membarrier(MEMBARRIER_CMD_QUERY, 0, 0) : 0;
  membarrier_ = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                os::membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  g_grace_reader_fence = !membarrier_;
  if (libc::key_create(&exit_key_, on_thread_exit) != 0)
    os::fatal("uslab: no pthread key left for read-side sections\n");
  ready_.store(true, std::memory_order_release);
}

// The writers' half of the protocol (grace.h). Where membarrier fails for good (a
// filter installed after start, a kernel that stays out of memory), a plain fence
// cannot stand in for it, as readers do not fence: they fence from then on, and the
// sections already open, whose counter stores did not fence, are given 1 ms, which
// every store buffer drains in many times over, before the scan.
void fence_all() {
  if (__atomic_load_n(&membarrier_, __ATOMIC_ACQUIRE)) {
    if (os::membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
    __atomic_store_n(&g_grace_reader_fence, true, __ATOMIC_SEQ_CST);
    if (__atomic_exchange_n(&membarrier_, false, __ATOMIC_ACQ_REL))
      os::print_stderr("uslab: membarrier failed; deferred frees' readers fence from now on\n");
    os::sleep_ns(1000000);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace

ReaderRecord* grace_register_reader() {
  init_once();
  uint32_t me = current_tid();
  ReaderRecord* r = nullptr;
  for (ReaderRecord* c = records_.load(std::memory_order_acquire); c; c = c->next) {
    uint32_t expected = 0;
    if (c->in_use.load(std::memory_order_relaxed) == 0 &&
        c->in_use.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
      r = c;
      break;
    }
  }
  if (!r) {
    r = static_cast<ReaderRecord*>(g_meta_arena.alloc(sizeof(ReaderRecord), alignof(ReaderRecord)));
    if (!r) os::fatal("uslab: out of memory registering a reader\n");
    r->in_use.store(1, std::memory_order_relaxed);
    // Linked before its first epoch store: a scan that misses the record also
    // misses that store (see grace.h).
    ReaderRecord* head = records_.load(std::memory_order_relaxed);
    do {
      r->next = head;
    } while (!records_.compare_exchange_weak(head, r, std::memory_order_release,
                                             std::memory_order_relaxed));
  }
  r->tid = me;
  r->ctr.store(0, std::memory_order_relaxed);
  t_reader = r;
  // May calloc (keys past the first 32); no section is open yet, so that nests.
  libc::set_specific(exit_key_, r);
  return r;
}

void grace_misuse(const char* what) { os::fatal("uslab: %s\n", what); }

uint64_t grace_stamp() { return g_grace_seq.fetch_add(0, std::memory_order_acq_rel); }

void grace_start() {
  init_once();
  g_grace_seq.fetch_add(1, std::memory_order_acq_rel);
  fence_all();
}

uint64_t grace_oldest() {
  uint64_t seq = g_grace_seq.load(std::memory_order_acquire);
  uint64_t oldest = UINT64_MAX;
  for (ReaderRecord* r = records_.load(std::memory_order_acquire); r; r = r->next) {
    uint64_t v = r->ctr.load(std::memory_order_acquire);
    if ((v & kNestMask) && (v >> kNestBits) < oldest) oldest = v >> kNestBits;
  }
  uint64_t upto = oldest < seq ? oldest : seq;
  uint64_t prev = completed_upto_.load(std::memory_order_relaxed);
  while (prev < upto &&
         !completed_upto_.compare_exchange_weak(prev, upto, std::memory_order_relaxed)) {
  }
  return oldest;
}

void grace_wait(uint64_t stamp) {
  uint64_t sleep = 20000;  // ns, doubling to 1 ms
  for (int round = 0; grace_oldest() <= stamp; round++) {
    if (round < 64) {
      os::cpu_relax();
    } else {
      os::sleep_ns(sleep);
      if (sleep < 1000000) sleep *= 2;
    }
  }
}

void grace_synchronize() {
  if (grace_in_section()) grace_misuse("uslab_synchronize called inside a read-side section");
  uint64_t stamp = grace_stamp();
  grace_start();
  grace_wait(stamp);
}

uint64_t grace_completed() { return completed_upto_.load(std::memory_order_relaxed) - 1; }

bool grace_uses_membarrier() {
  init_once();
  return __atomic_load_n(&membarrier_, __ATOMIC_ACQUIRE);
}

void grace_fork_child() {
  for (ReaderRecord* r = records_.load(std::memory_order_acquire); r; r = r->next)
    if (r != t_reader) {
      r->ctr.store(0, std::memory_order_relaxed);
      r->in_use.store(0, std::memory_order_relaxed);
    }
  if (t_reader) t_reader->tid = current_tid();
}

}  // namespace uslab
