// core/platform/rseq.cc — rseq registration and fences; see rseq.h.
#include "core/platform/rseq.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "core/platform/libc_calls.h"
#include "core/platform/mutex.h"
#include "core/platform/os.h"

// glibc's registration (GLIBC_2.35, exported by ld.so). Weak: absent on older glibc.
extern "C" {
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}

namespace uslab {

namespace {

// struct rseq of the kernel ABI (the original 32-byte layout).
struct alignas(32) RseqArea {
  uint32_t cpu_id_start;
  uint32_t cpu_id;
  uint64_t rseq_cs;
  uint32_t flags;
  uint32_t node_id;
  uint32_t mm_cid;
  uint32_t reserved;
};
static_assert(sizeof(RseqArea) == 32);
static_assert(__builtin_offsetof(RseqArea, cpu_id) == kRseqCpuIdOffset);
static_assert(__builtin_offsetof(RseqArea, rseq_cs) == kRseqCsOffset);

constexpr int kRseqFlagUnregister = 1;

// The area uslab registers when glibc did not (kOwn mode only).
__thread RseqArea t_area
    __attribute__((tls_model("initial-exec"))) = {0, kRseqCpuUninitialized, 0, 0, 0, 0, 0};
// 0: not registered yet; 1: registered; 2: refused or exited (never try again).
__thread uint8_t t_registration __attribute__((tls_model("initial-exec"))) = 0;

constinit Mutex init_lock_;
USLAB_LOCK_ONE(kRseqInit, init_lock_);
constinit std::atomic<int> mode_{-1};  // -1 until decided
bool fence_ok_ = false;
pthread_key_t exit_key_;

char* thread_pointer() { return static_cast<char*>(__builtin_thread_pointer()); }

void on_thread_exit(void*) { rseq_unregister_thread(); }

bool register_area() {
  long r = os::syscall6(SYS_rseq, reinterpret_cast<long>(&t_area), sizeof(RseqArea), 0,
                        static_cast<long>(kRseqSig));
  t_registration = r == 0 ? 1 : 2;
  return r == 0;
}

void enable_fences() {
  long cmds = os::membarrier(MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)) return;
  fence_ok_ = os::membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0;
}

RseqMode decide(bool wanted) {
#if !defined(__x86_64__) && !defined(__aarch64__)
  wanted = false;  // the per-CPU sections are written for x86-64 and aarch64 only
#endif
  if (!wanted) return RseqMode::kNone;
  if (&__rseq_size != nullptr && &__rseq_offset != nullptr && __rseq_size != 0) {
    g_rseq_offset = __rseq_offset;
    // glibc registered; its area says whether the kernel accepted it for this thread.
    if (rseq_cpu_id() < (1u << 31)) return RseqMode::kGlibc;
    return RseqMode::kNone;
  }
  g_rseq_offset = reinterpret_cast<char*>(&t_area) - thread_pointer();
  if (!register_area()) return RseqMode::kNone;
  if (libc::key_create(&exit_key_, on_thread_exit) != 0) {
    rseq_unregister_thread();
    return RseqMode::kNone;
  }
  libc::set_specific(exit_key_, &t_area);
  return RseqMode::kOwn;
}

}  // namespace

constinit ptrdiff_t g_rseq_offset = 0;

RseqMode rseq_init_process(bool wanted, bool fences) {
  int m = mode_.load(std::memory_order_acquire);
  if (m >= 0) return static_cast<RseqMode>(m);
  LockGuard g(init_lock_);
  m = mode_.load(std::memory_order_relaxed);
  if (m < 0) {
    RseqMode d = decide(wanted);
    if (d != RseqMode::kNone && fences) enable_fences();
    m = static_cast<int>(d);
    mode_.store(m, std::memory_order_release);
  }
  return static_cast<RseqMode>(m);
}

RseqMode rseq_mode() {
  int m = mode_.load(std::memory_order_acquire);
  return m < 0 ? RseqMode::kNone : static_cast<RseqMode>(m);
}

const char* rseq_mode_name(RseqMode m) {
  switch (m) {
    case RseqMode::kGlibc:
      return "percpu (rseq, glibc's registration)";
    case RseqMode::kOwn:
      return "percpu (rseq, uslab's registration)";
    case RseqMode::kNone:
      break;
  }
  return "per-thread caches";
}

bool rseq_register_thread() {
  if (rseq_mode() != RseqMode::kOwn) return rseq_mode() == RseqMode::kGlibc;
  if (t_registration == 1) return true;
  if (t_registration == 2 || !register_area()) return false;
  // May calloc (keys past the first 32); cpu_id is valid by now, so that nests.
  libc::set_specific(exit_key_, &t_area);
  return true;
}

void rseq_unregister_thread() {
  if (t_registration != 1) return;
  // The kernel resets cpu_id to "uninitialised" on unregistration.
  os::syscall6(SYS_rseq, reinterpret_cast<long>(&t_area), sizeof(RseqArea), kRseqFlagUnregister,
               static_cast<long>(kRseqSig));
  t_registration = 2;
}

bool rseq_fence_available() { return fence_ok_; }

// The fence without membarrier, refused by a filter installed after start (the
// registration at start succeeded): the calling thread runs on `cpu` for a moment.
// Whatever ran there was preempted by it, and the kernel restarts an rseq critical
// section whose thread is preempted, so none that began on `cpu` before can still
// commit. The thread's CPU set is put back after; false where it may not run there.
static bool fence_by_running_on(uint32_t cpu) {
  uint64_t old[kMaxCpuMaskWords], one[kMaxCpuMaskWords] = {};
  long bytes = os::syscall6(SYS_sched_getaffinity, 0, sizeof old, reinterpret_cast<long>(old));
  if (bytes <= 0 || cpu >= static_cast<uint64_t>(bytes) * 8) return false;
  one[cpu / 64] = uint64_t{1} << (cpu % 64);
  if (os::syscall6(SYS_sched_setaffinity, 0, bytes, reinterpret_cast<long>(one)) != 0) return false;
  unsigned here = ~0u;
  os::syscall6(SYS_getcpu, reinterpret_cast<long>(&here), 0, 0);
  os::syscall6(SYS_sched_setaffinity, 0, bytes, reinterpret_cast<long>(old));
  return here == cpu;
}

bool rseq_fence_cpu(uint32_t cpu) {
  if (!fence_ok_) return false;
  long r = os::membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_FLAG_CPU,
                          static_cast<int>(cpu));
  if (r == 0) return true;
  return (r == -EPERM || r == -ENOSYS) && fence_by_running_on(cpu);
}

}  // namespace uslab
