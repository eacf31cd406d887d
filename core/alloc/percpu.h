// core/alloc/percpu.h — per-CPU sheaves over restartable sequences.
//
// Owns: one region per possible CPU (256 KiB of address space each, reserved at
// start and touched lazily). Slot 0 of a region is never written (reads 0); then
// come, per size class, a 32-bit header {current, end} (slot indexes in the region),
// then a 16-bit hit counter per class (kHitsOffset: allocations served, for the
// statistics and the decay tick), then the classes' slots. `begin`, a per-class
// constant, indexes a guard slot that is never written either; the cached objects
// are the slots (begin, current], so the top object is slots[current], and `end`
// bounds current (capacity end - begin).
// An empty sheaf's top reads 0 (its guard), and so does a header never used or
// drained (0, so current 0 reads slot 0): pop tests the top for 0 and needs no
// bounds check of its own.
//
// Lock-free fast path: malloc pops and free pushes inside an rseq critical section
// that ends in one committing 16-bit store of `current` (a pop bumps its class's hit
// counter just before; a restarted pop may count twice). The kernel restarts the
// section if the thread is preempted, migrated or signalled before the commit (the
// userspace form of SLUB's tid check), so there is no atomic instruction and no
// lock, and an interrupted section has no effect (which also makes fork safe).
//
// Slow paths run the batch sections below, which move up to a whole sheaf in one
// section and are tied to an expected CPU (they fail if the thread is elsewhere).
// Rule for every section: before its commit it writes only slots above `current`
// (and its own output): a restart must find the sheaf as it was. A drain that put
// the freed object into a slot it had just emptied broke this and handed blocks out
// twice (test/stress/churn.c's signal storm catches it every run).
// A CPU's capacity (the `end` fields) and its byte budget change only under that
// CPU's Mutex (CpuMeta::lock) and only through sections that run on that CPU.
//
// A header of 0 ({current 0, end 0}) makes every operation miss: that is the state
// of a CPU never used (the region is fresh zero pages) and of a CPU being drained.
// Draining a CPU from another one (trim) swaps each header for 0 with an atomic
// exchange, then fences the CPU with membarrier(PRIVATE_EXPEDITED_RSEQ),
// which aborts every section in flight there; a section that committed between the
// swap and the fence shows as a non-zero header, and the swap is redone. Once all
// headers stay 0 across a fence, no section on that CPU can commit until they are
// restored: the decay tick's trim (percpu.cc) rewrites a detached sheaf from any CPU
// and stores its header back, capacity unchanged. Order of locks: CPU lock → depot →
// central.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/depot.h"
#include "core/alloc/thread_cache.h"

namespace uslab {

constexpr size_t kCpuRegionShift = 18;
constexpr size_t kCpuRegionSlots = (size_t{1} << kCpuRegionShift) / sizeof(void*);
constexpr size_t kMaxCpus = 4096;  // CPU ids at or above use the per-thread caches

// Most objects a CPU may cache of one class: 256 KiB worth, 16 … 1024 objects for a
// size class, at most kCacheSheafCap for a cache class (the slots reserved below).
inline uint32_t sheaf_max_capacity(unsigned cls) { return class_info(cls).sheaf_cap; }

// Byte offset of the headers in a region (after the zero slot 0).
constexpr size_t kHeaderOffset = sizeof(void*);

// After the classes' sheaves, each region holds the CPU's deferred-free sheaf
// (core/deferred.h): pointers waiting for a grace period, moved into a page-sized
// block when it is full. Its header index follows the classes'; its capacity is
// fixed (it is not part of the byte budget) and set on its first use.
constexpr unsigned kDeferSheaf = kMaxClasses;
constexpr uint32_t kDeferCap = 508;  // (4096 - a block's 32-byte header) / 8
// Then the CPU's remote-node buffer: on a machine with several NUMA nodes, objects
// of any class whose slabs belong to another node than the CPU's are pushed here by
// free (not onto the class's sheaf, whose objects this CPU hands out again), and a
// full buffer is flushed to the owning nodes in one go (percpu_remote_flush:
// grouped by class and shard, one class lock per group). Fixed capacity, outside the budget,
// opened on first use; the decay tick and malloc_trim flush what is left in it.
constexpr unsigned kRemoteSheaf = kMaxClasses + 1;
constexpr uint32_t kRemoteCap = 256;
constexpr unsigned kSheafHeaders = kMaxClasses + 2;

// After the headers, a 16-bit hit counter per class (thread_cache.h's kHitStep per
// pop; its carry sends the pop through percpu_alloc_tick).
constexpr size_t kHitsOffset = kHeaderOffset + kSheafHeaders * sizeof(uint32_t);

struct SheafLayout {
  uint16_t begin[kSheafHeaders];  // the guard slot of each class
  size_t slots;
};

constexpr SheafLayout make_sheaf_layout() {
  SheafLayout l{};
  size_t next = (kHitsOffset + kMaxClasses * sizeof(uint16_t) + sizeof(void*) - 1) / sizeof(void*);
  for (unsigned c = 1; c < kSheafHeaders; c++) {
    l.begin[c] = static_cast<uint16_t>(next);
    next += 1 + (c == kDeferSheaf    ? kDeferCap
                 : c == kRemoteSheaf ? kRemoteCap
                 : c < kNumClasses   ? kClassInfo[c].sheaf_cap
                                     : kCacheSheafCap);
  }
  l.slots = next;
  return l;
}

inline constexpr SheafLayout kSheafLayout = make_sheaf_layout();
static_assert(kSheafLayout.slots <= kCpuRegionSlots, "per-CPU region too small");
static_assert(kSheafLayout.slots < 65536, "slot offsets are 16-bit");
static_assert(kRseqSig == 0x53053053, "the signature below is spelled out in asm");

// The regions of CPUs 0 … g_cpu_count-1, each 1 << kCpuRegionShift bytes; set once
// when the per-CPU mode is chosen (before g_percpu) and never changed.
extern char* g_cpu_region USLAB_HIDDEN;
extern uint32_t g_cpu_count USLAB_HIDDEN;
// True once the per-CPU mode is on (decided at the first slow path; never reset).
extern bool g_percpu USLAB_HIDDEN;
// g_percpu on a machine with one NUMA node: free pushes every object onto the
// class's sheaf without asking whose node it is from (free_object in heap.h).
extern bool g_percpu_one_node USLAB_HIDDEN;
// Recomputes g_percpu_one_node after the topology changed (shard.h).
void percpu_nodes_changed();

// Slow paths of the fast operations below, and their retry after an abort (out of
// line, so that the fast paths need no loop and no callee-saved registers).
void* percpu_alloc_slow(unsigned cls);
void percpu_free_slow(void* p, unsigned cls);
void* percpu_alloc_retry(unsigned cls);
void* percpu_alloc_tick(unsigned cls);  // a hit counter carried (see kHitsOffset)
void percpu_free_retry(void* p, unsigned cls);

// Bulk moves on the current CPU's sheaf of cls: take pops up to n objects into out;
// put pushes the last k of ptrs[0..n) that fit. Both return k (0 when the thread has
// no usable CPU, or n is 0). The sections below need n ≥ 1: with 0, a push copied two
// stale pointers above the sheaf's top, one into the next class's guard slot, which
// malloc then handed out (uslab_free_bulk and deferred frees on several nodes).
size_t percpu_take(unsigned cls, void** out, size_t n);
size_t percpu_put(unsigned cls, void* const* ptrs, size_t n);

// Decides the front end once (per-CPU when rseq works and the configuration allows);
// returns g_percpu.
bool percpu_decide();
bool percpu_decided();

// The shard (shard.h) whose depots the calling thread uses: its CPU's in per-CPU
// mode, else its thread cache's.
unsigned current_shard();

// Drains every CPU's sheaves and the depots back to the slabs (malloc_trim), or only
// those of one class (a cache being destroyed). Without membarrier's rseq fence only
// the depots are drained.
void percpu_drain_all();
void percpu_drain_class(unsigned cls);

// The decay tick's share of the CPU sheaves (decay.h): on every CPU, the classes
// that neither missed nor served an allocation since the last tick are drained and
// their capacity goes back to the budget (idle capacity shrinks; a class in use
// regrows it by a batch per miss); the others are emptied and keep their capacity
// (a busy class pays one refill per tick for it). Remote-node buffers are flushed.
void percpu_decay_sheaves();
// Arms the heap profiler's sampling streams of every CPU in use (sampler.h), as
// sampling turns on: a CPU armed only at its next carry would sample nothing of its
// first 4096 pops per class (a program that allocates 2000 blocks of 16 KiB: none).
void percpu_sample_arm();
// Bytes of objects in the CPUs' class sheaves (a racy sum).
size_t percpu_cached_bytes();

// The deferred-free sheaves (pushes go through percpu_push_one with kDeferSheaf).
// Only used when rseq_fence_available(): a barrier must be able to empty them all.
// percpu_defer_take opens the current CPU's deferred sheaf if it is not open yet
// and moves its pointers (at most kDeferCap) to out; -1 when the thread has no
// usable CPU. percpu_defer_drain_all empties every CPU's through sink.
long percpu_defer_take(void** out);
void percpu_defer_drain_all(void (*sink)(void* const* objs, size_t n, void* arg), void* arg);
size_t percpu_defer_pending();  // pointers in the CPUs' deferred sheaves (racy sum)

struct PerCpuClassStats {
  size_t cpu_objects;  // cached in CPU sheaves (racy sum)
  uint64_t hits;       // allocations served by the sheaves
  uint64_t refills;    // sheaf misses on allocation (a batch came in)
  uint64_t drains;     // sheaf misses on free that moved a batch out
};
void percpu_class_stats(PerCpuClassStats out[kMaxClasses]);
struct PerCpuStats {
  uint32_t cpus_possible;
  uint32_t cpus_used;
  size_t budget;  // bytes of capacity allowed per CPU
  uint64_t grows, steals, drains;
};
PerCpuStats percpu_stats();
// The resident header pages of the CPUs' regions (headers and hit counters; the
// slot pages hold cached objects and go back with them), for the statistics.
size_t percpu_header_bytes();

// ThreadSanitizer cannot see that a restartable section orders what the freeing
// thread did to an object before the allocating thread's use of it; in TSan builds
// the sheaves say so (release on push, acquire on pop). Nothing otherwise. The
// address is taken below 2^47: a remote-node buffer's entries carry tags above it
// (remote_entry below), which TSan's tables cannot take.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline void* sheaf_sync_addr(void* p) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ((uint64_t{1} << 47) - 1));
}
inline void sheaf_acquire(void* const* objs, size_t n) {
  for (size_t i = 0; i < n; i++) __tsan_acquire(sheaf_sync_addr(objs[i]));
}
inline void sheaf_release(void* const* objs, size_t n) {
  for (size_t i = 0; i < n; i++) __tsan_release(sheaf_sync_addr(objs[i]));
}
#else
inline void sheaf_acquire(void* const*, size_t) {}
inline void sheaf_release(void* const*, size_t) {}
#endif

// Results of percpu_push_draining below besides the objects it moved.
constexpr long kSheafMoved = -1, kSheafDoubleFree = -2, kSheafClosed = -3;

#if defined(__x86_64__)
// clang-format off (the sections keep their hand layout)

// --- restartable sections (x86-64) ---------------------------------------------
//
// OPEN publishes this section's descriptor in rseq_cs and marks its start (1:);
// CLOSE marks the end after the commit (2:) and places the abort handler, preceded
// by the signature, out of line. The kernel clears rseq_cs when it aborts, so the
// handler jumps to `target`: a C label that re-runs the whole asm statement (fast
// paths) or label 7 at the statement's start (batch sections). Both out-of-line
// pieces join the section group of the function they are expanded in ("?"), so
// when the linker drops a duplicate copy of an inline function (COMDAT), it drops
// its descriptor and handler too. In every section rdx holds the CPU's region, so
// a header is 8(%rdx, cls, 4) and slot i (%rdx, i, 8).
// `current` and `end` are read as separate 16-bit loads: a 32-bit load of the header
// right after a pop's 16-bit commit would stall on store forwarding.
#define USLAB_RSEQ_OPEN                 \
  ".pushsection __rseq_cs, \"aw?\"\n\t" \
  ".balign 32\n\t"                      \
  "3:\n\t"                              \
  ".long 0, 0\n\t"                      \
  ".quad 1f, 2f - 1f, 4f\n\t"           \
  ".popsection\n\t"                     \
  "leaq 3b(%%rip), %%rcx\n\t"           \
  "movq %%rcx, %%fs:8(%[rs])\n\t"       \
  "1:\n\t"

#define USLAB_RSEQ_CLOSE_TO(target)          \
  "2:\n\t"                                   \
  ".pushsection __rseq_failure, \"ax?\"\n\t" \
  ".byte 0x0f, 0xb9, 0x3d\n\t"               \
  ".long 0x53053053\n\t"                     \
  "4:\n\t"                                   \
  "jmp " target                              \
  "\n\t"                                     \
  ".popsection\n\t"
#define USLAB_RSEQ_CLOSE USLAB_RSEQ_CLOSE_TO("%l[abort]")

// The region of the current CPU into rdx, or a jump to `miss` when the CPU id is
// not below g_cpu_count (no rseq for this thread, or a CPU beyond the regions).
#define USLAB_RSEQ_ANY_CPU        \
  "movl %%fs:4(%[rs]), %%edx\n\t" \
  "cmpl %[ncpu], %%edx\n\t"       \
  "jae %l[miss]\n\t"              \
  "shlq $18, %%rdx\n\t"           \
  "addq %[region], %%rdx\n\t"

static_assert(kCpuRegionShift == 18 && kHeaderOffset == 8, "spelled out in the asm");

// Pop one object of class cls from the current CPU's sheaf. The hit counter is
// bumped before the commit: a section aborted after it counts one hit twice.
inline void* percpu_alloc(unsigned cls) {
  void* obj;
  __asm__ goto(USLAB_RSEQ_OPEN USLAB_RSEQ_ANY_CPU
               "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
               "movq (%%rdx, %%rcx, 8), %[obj]\n\t"
               "testq %[obj], %[obj]\n\t"
               "jz %l[miss]\n\t"
               "addw %[step], %c[hits](%%rdx, %[cls], 2)\n\t"
               "jc %l[tick]\n\t"
               "decl %%ecx\n\t"
               "movw %%cx, 8(%%rdx, %[cls], 4)\n\t" USLAB_RSEQ_CLOSE
               : [obj] "=&a"(obj)  // the return register: no move after the section
               : [rs] "r"(g_rseq_offset), [ncpu] "m"(g_cpu_count), [region] "r"(g_cpu_region),
                 [cls] "r"(uint64_t{cls}), [hits] "i"(kHitsOffset), [step] "i"(kHitStep)
               : "rcx", "rdx", "memory", "cc"
               : abort, miss, tick);
  if (obj == nullptr) __builtin_unreachable();  // tested above
  sheaf_acquire(&obj, 1);
  return obj;
abort:
  return percpu_alloc_retry(cls);
miss:
  return percpu_alloc_slow(cls);
tick:
  return percpu_alloc_tick(cls);
}

// Push p onto the current CPU's sheaf of cls (header index: a class, kDeferSheaf or
// kRemoteSheaf).
// Goes to Miss when the sheaf is full, the thread has no usable CPU, or p is already
// the top object (a double free); to Retry when the kernel aborted the section.
template <void (*Miss)(void*, unsigned), void (*Retry)(void*, unsigned)>
inline void percpu_push_one(void* p, unsigned cls) {
  sheaf_release(&p, 1);
  __asm__ goto(USLAB_RSEQ_OPEN USLAB_RSEQ_ANY_CPU
               "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
               "cmpw 10(%%rdx, %[cls], 4), %%cx\n\t"
               "jae %l[miss]\n\t"
               "cmpq %[p], (%%rdx, %%rcx, 8)\n\t"
               "je %l[miss]\n\t"
               "movq %[p], 8(%%rdx, %%rcx, 8)\n\t"
               "incl %%ecx\n\t"
               "movw %%cx, 8(%%rdx, %[cls], 4)\n\t" USLAB_RSEQ_CLOSE
               :
               : [rs] "r"(g_rseq_offset), [ncpu] "m"(g_cpu_count), [region] "r"(g_cpu_region),
                 [cls] "r"(uint64_t{cls}), [p] "r"(p)
               : "rax", "rcx", "rdx", "memory", "cc"
               : abort, miss);
  return;
abort:
  return Retry(p, cls);
miss:
  return Miss(p, cls);
}

// Free p (a validated object of class cls) onto the current CPU's sheaf.
inline void percpu_free(void* p, unsigned cls) {
  percpu_push_one<percpu_free_slow, percpu_free_retry>(p, cls);
}

// Free p with several NUMA nodes: onto the class's sheaf when its slab is of the
// current CPU's node, else onto the CPU's remote-node buffer (kRemoteSheaf).
void percpu_free_nodes(void* p, unsigned cls);
// An entry of a remote-node buffer: the object's address (below 2^47) tagged with
// its class and its slab's shard in the bits above, so that the flush needs no
// page-map lookup. Pushes of the same object give the same entry (the double-free
// check compares entries).
inline uint64_t remote_entry(const void* p, const Span* s) {
  static_assert(kMaxClasses <= 128 && kMaxShards <= 64, "7 + 6 bits above the address");
  return reinterpret_cast<uintptr_t>(p) | uint64_t{s->size_class} << 47 | uint64_t{s->shard} << 54;
}
// An entry's object, and its group key: class | shard << 7.
inline void* remote_entry_object(uint64_t e) {
  return reinterpret_cast<void*>(e & ((uint64_t{1} << 47) - 1));
}
inline unsigned remote_entry_key(uint64_t e) { return static_cast<unsigned>(e >> 47); }
// Frees remote-node entries to the shards that own them: grouped by class and
// shard, each group in one batch (one lock); counted as remote-node frees received
// by the owners' nodes.
void percpu_remote_flush(const uint64_t* entries, size_t n);
// Remote-node frees received per node (shard.h's counters: objects flushed to it
// from CPUs, or thread caches, of other nodes) and objects waiting in the CPUs'
// remote-node buffers (a racy sum).
struct RemoteNodeStats {
  uint64_t received[kTopoMaxNodes];
  uint64_t flushes;
  size_t pending;
  // Of those, per class: free objects the statistics count as cached by the CPUs,
  // not as allocated (they were: a bulk test on two nodes saw 26 objects of 32 KiB
  // that the program had freed in mallinfo's uordblks until malloc_trim).
  uint32_t pending_by_class[kMaxClasses];
};
void percpu_remote_stats(RemoteNodeStats* out);

// The batch sections below serve the slow paths. They return the number of objects
// moved, or -1 when the thread is not running on `cpu`, from a plain asm statement:
// an abort restarts the section inside the statement (label 7), so no result has
// to cross an asm-goto edge (GCC 12 can merge an asm goto output with the value a
// label path returns, which broke these functions in unoptimised inlining).
#define USLAB_RSEQ_OPEN_RETRY "7:\n\t" USLAB_RSEQ_OPEN
#define USLAB_RSEQ_CLOSE_RETRY USLAB_RSEQ_CLOSE_TO("7b")

// The region of the expected CPU into rdx; k = -1 and out (label 9) when the
// thread runs elsewhere.
#define USLAB_RSEQ_ON_CPU_OR_EXIT \
  "movl %%fs:4(%[rs]), %%edx\n\t" \
  "cmpl %[cpu], %%edx\n\t"        \
  "jne 9f\n\t"                    \
  "shlq $18, %%rdx\n\t"           \
  "addq %[region], %%rdx\n\t"

// Copies %[k] (≥ 1) pointers from src to dst (registers, not overlapping): an odd
// one first through tmp, then two at a time through xmm0 (SSE2 is part of x86-64;
// a bulk call's 16 pointers took 16 turns of a one-pointer loop, a third of
// uslab_alloc_bulk's time); uses r8.
#define USLAB_RSEQ_COPY(src, dst, tmp) \
  "xorl %%r8d, %%r8d\n\t"              \
  "testl $1, %k[k]\n\t"                \
  "jz 5f\n\t"                          \
  "movq (" src "), " tmp               \
  "\n\t"                               \
  "movq " tmp ", (" dst                \
  ")\n\t"                              \
  "incl %%r8d\n\t"                     \
  "cmpq %[k], %%r8\n\t"                \
  "jae 10f\n\t"                        \
  "5:\n\t"                             \
  "movdqu (" src                       \
  ", %%r8, 8), %%xmm0\n\t"             \
  "movdqu %%xmm0, (" dst               \
  ", %%r8, 8)\n\t"                     \
  "addq $2, %%r8\n\t"                  \
  "cmpq %[k], %%r8\n\t"                \
  "jb 5b\n\t"                          \
  "10:\n\t"

// Ends a batch section: label 8 is the normal exit, 9 the wrong-CPU one.
#define USLAB_RSEQ_EXIT(k) \
  "jmp 8f\n\t"             \
  "9:\n\t"                 \
  "movq $-1, %" k          \
  "\n\t"                   \
  "8:\n\t"

// Commits current (cx) and ends a batch pop or push; label 6 is its early exit,
// with nothing moved.
#define USLAB_RSEQ_COMMIT_BATCH                               \
  "movw %%cx, 8(%%rdx, %[cls], 4)\n\t" USLAB_RSEQ_CLOSE_RETRY \
  "jmp 8f\n\t"                                                \
  "6:\n\t"                                                    \
  "xorl %k[k], %k[k]\n\t" USLAB_RSEQ_EXIT("[k]")

// Pops up to n (≥ 1) objects from the top of cpu's sheaf into out[0..k).
inline long percpu_pop_batch(uint32_t cpu, unsigned cls, void** out, size_t n) {
  long k;
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY USLAB_RSEQ_ON_CPU_OR_EXIT
                   "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
                   "movq %%rcx, %[k]\n\t"
                   "subq %[begin], %[k]\n\t"
                   "jbe 6f\n\t"
                   "cmpq %[n], %[k]\n\t"
                   "cmovaq %[n], %[k]\n\t"
                   "subq %[k], %%rcx\n\t"
                   "leaq 8(%%rdx, %%rcx, 8), %%r10\n\t" USLAB_RSEQ_COPY("%%r10", "%[out]", "%%r9")
                       USLAB_RSEQ_COMMIT_BATCH
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "rm"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [begin] "rm"(uint64_t{kSheafLayout.begin[cls]}),
                     [out] "r"(out), [n] "rm"(uint64_t{n})
                   : "rax", "rcx", "rdx", "r8", "r9", "r10", "xmm0", "memory", "cc");
  if (k > 0) sheaf_acquire(out, static_cast<size_t>(k));
  return k;
}

// Pushes the last k of src[0..n) (n ≥ 1) onto cpu's sheaf, as many as fit.
inline long percpu_push_batch(uint32_t cpu, unsigned cls, void* const* src, size_t n) {
  long k;
  sheaf_release(src, n);
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY USLAB_RSEQ_ON_CPU_OR_EXIT
                   "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
                   "movzwl 10(%%rdx, %[cls], 4), %%eax\n\t"
                   "subl %%ecx, %%eax\n\t"
                   "jbe 6f\n\t"
                   "movl %%eax, %k[k]\n\t"
                   "cmpq %[n], %[k]\n\t"
                   "cmovaq %[n], %[k]\n\t"
                   "movq %[n], %%r10\n\t"
                   "subq %[k], %%r10\n\t"
                   "leaq (%[src], %%r10, 8), %%r10\n\t"
                   "leaq 8(%%rdx, %%rcx, 8), %%r9\n\t" USLAB_RSEQ_COPY(
                       "%%r10", "%%r9", "%%rax") "addl %k[k], %%ecx\n\t" USLAB_RSEQ_COMMIT_BATCH
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "rm"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [src] "r"(src), [n] "rm"(uint64_t{n})
                   : "rax", "rcx", "rdx", "r8", "r9", "r10", "xmm0", "memory", "cc");
  return k;
}

// Pushes p onto cpu's sheaf of cls or, when it is full, moves up to n (≥ 1) objects
// from its top to out[0..k) and leaves p to the caller (a drain in the same section).
// The full case writes no slot: a section restarted after writing one below `current`
// would find the sheaf changed (it once put p in the lowest slot it emptied, and a
// restart then moved p out as well as in: one block handed out twice). Returns k (0:
// p went in), or kSheafMoved (the thread is not on cpu), kSheafDoubleFree (p is the
// top object already) or kSheafClosed (the sheaf has no capacity: never opened, or
// being drained).
inline long percpu_push_draining(uint32_t cpu, unsigned cls, void* p, void** out, size_t n) {
  long k;
  sheaf_release(&p, 1);
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
                   "movzwl 10(%%rdx, %[cls], 4), %%eax\n\t"
                   "movq $-3, %[k]\n\t"
                   "cmpl %k[begin], %%eax\n\t"
                   "jbe 8f\n\t"
                   "movq $-2, %[k]\n\t"
                   "cmpq %[p], (%%rdx, %%rcx, 8)\n\t"
                   "je 8f\n\t"
                   "xorl %k[k], %k[k]\n\t"
                   "cmpl %%eax, %%ecx\n\t"
                   "jb 11f\n\t"
                   "movq %%rcx, %[k]\n\t"
                   "subq %[begin], %[k]\n\t"
                   "cmpq %[n], %[k]\n\t"
                   "cmovaq %[n], %[k]\n\t"
                   "subq %[k], %%rcx\n\t"
                   "leaq 8(%%rdx, %%rcx, 8), %%r10\n\t"
                   USLAB_RSEQ_COPY("%%r10", "%[out]", "%%r9")
                   "jmp 12f\n\t"
                   "11:\n\t"
                   "movq %[p], 8(%%rdx, %%rcx, 8)\n\t"
                   "incl %%ecx\n\t"
                   "12:\n\t"
                   "movw %%cx, 8(%%rdx, %[cls], 4)\n\t"
                   USLAB_RSEQ_CLOSE_RETRY
                   USLAB_RSEQ_EXIT("[k]")
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "rm"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [begin] "r"(uint64_t{kSheafLayout.begin[cls]}),
                     [p] "r"(p), [out] "r"(out), [n] "rm"(uint64_t{n})
                   : "rax", "rcx", "rdx", "r8", "r9", "r10", "xmm0", "memory", "cc");
  if (k > 0) sheaf_acquire(out, static_cast<size_t>(k));
  return k;
}

// Sets cpu's capacity end for cls to new_end (≥ begin); objects above it move to
// out[0..k) (at most end - new_end of them). A header never used (0) starts empty.
inline long percpu_resize(uint32_t cpu, unsigned cls, uint32_t new_end, void** out) {
  long k;
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
                   "cmpl %[begin], %%ecx\n\t"
                   "cmovbl %[begin], %%ecx\n\t"
                   "xorl %k[k], %k[k]\n\t"
                   "cmpl %[end], %%ecx\n\t"
                   "jbe 6f\n\t"
                   "movl %%ecx, %k[k]\n\t"
                   "subl %[end], %k[k]\n\t"
                   "movl %[end], %%ecx\n\t"
                   "leaq 8(%%rdx, %%rcx, 8), %%r10\n\t"
                   USLAB_RSEQ_COPY("%%r10", "%[out]", "%%rax")
                   "6:\n\t"
                   "movl %[end], %%eax\n\t"
                   "shll $16, %%eax\n\t"
                   "orl %%ecx, %%eax\n\t"
                   "movl %%eax, 8(%%rdx, %[cls], 4)\n\t"
                   USLAB_RSEQ_CLOSE_RETRY
                   USLAB_RSEQ_EXIT("[k]")
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "rm"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [end] "rm"(new_end), [out] "r"(out),
                     [begin] "rm"(uint32_t{kSheafLayout.begin[cls]})
                   : "rax", "rcx", "rdx", "r8", "r10", "xmm0", "memory", "cc");
  if (out && k > 0) sheaf_acquire(out, static_cast<size_t>(k));
  return k;
}

// The top object of cpu's sheaf for cls (nullptr when empty) into *top; -1 when the
// thread is not on cpu. Reads only: nothing to commit.
inline long percpu_peek(uint32_t cpu, unsigned cls, void** top) {
  long r;
  void* t;
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY USLAB_RSEQ_ON_CPU_OR_EXIT
                   "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
                   "movq (%%rdx, %%rcx, 8), %[t]\n\t"
                   "xorl %k[r], %k[r]\n\t" USLAB_RSEQ_CLOSE_RETRY USLAB_RSEQ_EXIT("[r]")
                   : [r] "=&r"(r), [t] "=&r"(t)
                   : [rs] "r"(g_rseq_offset), [cpu] "rm"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls})
                   : "rax", "rcx", "rdx", "memory", "cc");
  *top = t;
  return r;
}

// clang-format on
#else  // !__x86_64__: no per-CPU mode (rseq_init_process says kNone); never called.

inline void* percpu_alloc(unsigned cls) { return percpu_alloc_slow(cls); }
template <void (*Miss)(void*, unsigned), void (*Retry)(void*, unsigned)>
inline void percpu_push_one(void* p, unsigned cls) {
  Miss(p, cls);
}
inline void percpu_free(void* p, unsigned cls) { percpu_free_slow(p, cls); }
inline long percpu_pop_batch(uint32_t, unsigned, void**, size_t) { return -1; }
inline long percpu_push_batch(uint32_t, unsigned, void* const*, size_t) { return -1; }
inline long percpu_resize(uint32_t, unsigned, uint32_t, void**) { return -1; }
inline long percpu_peek(uint32_t, unsigned, void**) { return -1; }
inline long percpu_push_draining(uint32_t, unsigned, void*, void**, size_t) { return kSheafMoved; }

#endif

}  // namespace uslab
