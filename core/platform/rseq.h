// core/platform/rseq.h — restartable sequences: registration, the CPU a thread runs
// on, and fences that abort the critical sections running on another CPU.
//
// Owns: the process-wide choice of how the current thread's rseq area is found —
//  - kGlibc: glibc (2.35+) registered an area for every thread; it lives at
//    thread pointer + __rseq_offset (read through weak references, never dlsym,
//    which may calloc: jemalloc#2505);
//  - kOwn:   glibc did not register (GLIBC_TUNABLES=glibc.pthread.rseq=0, older
//    glibc): uslab registers its own initial-exec TLS area per thread on that
//    thread's first slow path and unregisters it when the thread exits;
//  - kNone:  the kernel refuses rseq (old kernel, seccomp, valgrind, rr) or the
//    configuration forces per-thread caches.
// Only the kernel writes the area's fields (cpu_id, cpu_id_start); uslab writes
// rseq_cs alone, as the ABI allows (tcmalloc#292 broke by writing cpu_id_start).
//
// Locking: rseq_init_process runs once under its own lock; afterwards the mode and
// the area offset are read-only. Registration is per thread and touches only that
// thread's TLS. rseq_fence_cpu is a membarrier system call, or a visit to the CPU
// (no lock).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/platform/os.h"

namespace uslab {

enum class RseqMode : uint8_t { kNone = 0, kGlibc = 1, kOwn = 2 };

// The signature that precedes every abort handler; the same as glibc registers (on
// aarch64 the encoding of `brk #0x45e0`, so that a stray jump there traps).
#if defined(__aarch64__)
constexpr uint32_t kRseqSig = 0xd428bc00;
#else
constexpr uint32_t kRseqSig = 0x53053053;
#endif

// Offsets of the ABI fields in struct rseq.
constexpr size_t kRseqCpuIdOffset = 4;
constexpr size_t kRseqCsOffset = 8;

// cpu_id values that are not CPUs (kernel ABI): before registration, after failure.
constexpr uint32_t kRseqCpuUninitialized = static_cast<uint32_t>(-1);

// Offset of the calling thread's rseq area from the thread pointer (%fs base on
// x86-64, tpidr_el0 on aarch64).
// Valid once rseq_mode() != kNone.
extern ptrdiff_t g_rseq_offset USLAB_HIDDEN;

// Decides the mode once for the process (`wanted` = false forces kNone), and for
// kOwn registers the calling thread; `fences`: registers for the per-CPU fences
// (membarrier; false: none, rseq_fence_available() says so). Thread-safe; later
// calls return the decision.
RseqMode rseq_init_process(bool wanted, bool fences);
RseqMode rseq_mode();
const char* rseq_mode_name(RseqMode m);

// kOwn: register the calling thread if it is not registered yet. Returns false when
// the thread cannot use rseq (registration refused, or the thread is exiting).
bool rseq_register_thread();
// kOwn: unregister the calling thread (thread exit). Later operations of this
// thread see cpu_id = uninitialised and take the slow path, which does not
// register it again.
void rseq_unregister_thread();

// The CPU the calling thread is running on according to its rseq area
// (kRseqCpuUninitialized when it has none). A hint: the thread may move right after.
inline uint32_t rseq_cpu_id() {
#if defined(__x86_64__)
  uint32_t cpu;
  __asm__ volatile("movl %%fs:%c1(%2), %0" : "=r"(cpu) : "i"(kRseqCpuIdOffset), "r"(g_rseq_offset));
  return cpu;
#elif defined(__aarch64__)
  char* tp;
  __asm__("mrs %0, tpidr_el0" : "=r"(tp));
  return __atomic_load_n(reinterpret_cast<const uint32_t*>(tp + g_rseq_offset + kRseqCpuIdOffset),
                         __ATOMIC_RELAXED);
#else
  return kRseqCpuUninitialized;  // the per-CPU sections exist for x86-64 and aarch64
#endif
}

// Aborts (restarts) every rseq critical section running on `cpu` and returns when
// it is done (membarrier PRIVATE_EXPEDITED_RSEQ; where a filter refuses that after
// start, the calling thread visits `cpu`). False when the kernel lacks it.
bool rseq_fence_cpu(uint32_t cpu);
// Words of the CPU masks passed to sched_{get,set}affinity: 4096 CPUs.
constexpr size_t kMaxCpuMaskWords = 64;
bool rseq_fence_available();

}  // namespace uslab
