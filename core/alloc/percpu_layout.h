// core/alloc/percpu_layout.h — the per-CPU regions' layout and what the restartable
// sections (percpu_rseq.h) read besides a region: the globals that name the regions
// and the fast paths' form, the slow paths the sections leave to, and the
// ThreadSanitizer annotations of their hand-offs. percpu.h gives the rules of the
// regions and the sheaves; this file only the shape.
//
// Owns: the layout constants, and the declarations of the globals set once when the
// per-CPU mode is chosen (percpu.cc defines them). Locking: none; the globals are
// written once, before g_percpu publishes them (release), and read after it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ds/ds.h"

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
// (core/deferred/): pointers waiting for a grace period, moved into a page-sized
// block when it is full. Its header index follows the classes'; its capacity is
// fixed (it is not part of the byte budget) and set on its first use.
constexpr unsigned kDeferSheaf = kMaxClasses;
constexpr uint32_t kDeferCap = 508;  // (4096 - a block's 32-byte header) / 8
// Then the CPU's remote-node buffer: on a machine with several NUMA nodes, objects
// of any class whose slabs belong to another node than the CPU's are pushed here by
// free (not onto the class's sheaf, whose objects this CPU hands out again), and a
// full buffer is flushed to the owning nodes in one go (percpu_remote_flush:
// grouped by class and shard, one class lock per group). Fixed capacity, outside the budget,
// opened on first use; the decay tick and malloc_trim flush what is left in it. A tick
// on a CPU with no class in use closes both fixed sheaves when they are empty, so that
// their slot pages go back with the rest.
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

// The regions of CPUs 0 … g_cpu_count-1, each 1 << kCpuRegionShift bytes; set once
// when the per-CPU mode is chosen (before g_percpu) and never changed.
extern char* g_cpu_region USLAB_HIDDEN;
extern uint32_t g_cpu_count USLAB_HIDDEN;
// 0 until the per-CPU mode is on (decided at the first slow path; never reset), then
// the form of its fast paths (percpu_rseq.h): kSheafIndex, or kSheafBase from the
// sheaf_addressing option. The fast paths test this byte once for both.
enum : uint8_t { kSheafIndex = 1, kSheafBase = 2 };
extern uint8_t g_percpu USLAB_HIDDEN;
// g_percpu on a machine with one NUMA node, else 0: free pushes every object onto the
// class's sheaf without asking whose node it is from (free_object in front.h).
extern uint8_t g_percpu_one_node USLAB_HIDDEN;
// "index" or "base", for the statistics (per-CPU mode only).
inline const char* sheaf_form_name() { return g_percpu == kSheafBase ? "base" : "index"; }
// Whether one of the two holds kSheafIndex, as one compare of the byte in memory: the
// compiler would load it into a register to test it twice, one instruction more on
// the index form's path, where it shows in the pair's time.
inline bool holds_index_form(const uint8_t& flag) {
#if defined(__x86_64__)
  __asm__ goto("cmpb %[index], %[flag]\n\tjne %l[other]"
               :
               : [flag] "m"(flag), [index] "i"(kSheafIndex)
               : "cc"
               : other);
  return true;
other:
  return false;
#else
  return flag == kSheafIndex;
#endif
}

// Slow paths of the fast operations (percpu_rseq.h; defined in front.cc, which hands
// a thread with no usable CPU to its thread cache), and their retry after an abort (out of
// line, so that the fast paths need no loop and no callee-saved registers). The
// retries are never inlined: into themselves (each one the fast path again, whose
// abort calls the retry), GCC unrolled them several levels deep, a copy of each
// section per level (34 pops in percpu_alloc_retry), each a descriptor the loader
// relocates at start-up.
void* percpu_alloc_slow(unsigned cls, Request r);
void percpu_free_slow(void* p, unsigned cls);
[[gnu::noinline]] void* percpu_alloc_retry(unsigned cls, Request r);
void* percpu_alloc_tick(unsigned cls, Request r);  // a hit counter carried (see kHitsOffset)
[[gnu::noinline]] void percpu_free_retry(void* p, unsigned cls);
// The base form's pop and push (percpu_rseq.h), out of line: callers other than
// malloc, free, new and delete (heap.h) reach them by a jump. Each copy of a section
// inlined into a caller adds a descriptor the loader relocates at start-up; with
// both forms inlined into every entry point they took two more pages, two more page
// faults in every process (test/conformance/startup_faults.c).
void* percpu_alloc_base(unsigned cls, Request r);
void percpu_free_base(void* p, unsigned cls);

// ThreadSanitizer cannot see that a restartable section orders what the freeing
// thread did to an object before the allocating thread's use of it; in TSan builds
// the sheaves say so (release on push, acquire on pop). Nothing otherwise. The
// address is taken below 2^kUserAddressBits: a remote-node buffer's entries carry
// tags above it (remote_entry below), which TSan's tables cannot take.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
inline void* sheaf_sync_addr(void* p) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) &
                                 ((uint64_t{1} << os::kUserAddressBits) - 1));
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

}  // namespace uslab
