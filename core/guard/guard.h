// core/guard/guard.h — guarded sampling: a few allocations, drawn at random, get pages
// of their own between inaccessible ones, so that a bug touching them faults at once
// and is reported with the allocation's and the free's stacks (GWP-ASan's idea, and
// the kernel's KFENCE).
//
// Owns: the pool of guarded slots (pool.cc) and the fault handler and reports
// (fault.cc).
//  - Which allocations: the sampling schedule's (core/alloc/sampler.h), as the
//    heap profiler's client kGuard: a Poisson process of mean guard_sample bytes over
//    the bytes allocated (0 turns it off), so every size class takes part at no cost
//    to the fast paths. The hook serves the sampled object from a slot, or declines
//    (all slots live, a re-entry) and the allocation is served as usual. An object
//    cache's object comes out of its slot as out of a slab: constructed (the cache's
//    constructor runs on it), or poisoned when the cache checks its poison. Large
//    objects up to kAreaBytes take part through the large allocations' byte
//    countdown (sample_large), whose sample points heap.cc gives to the profiler or
//    here as the schedule picks.
//  - A slot: slot_bytes() of address space, kAreaBytes for the object and a guard of
//    a page after it (uslab's or the OS's, the larger: page_granule). The object is
//    as large as the program asked (malloc(1000) gets 1000 usable bytes, not its
//    class's 1024; an object cache's is its class's) and lies at the end of the area,
//    rounded up to the alignment the call needs (16 for malloc, the asked one for the
//    aligned calls), so an overflow past it touches the guard at once or, within that
//    slack, is found at free; or, half of the time, it lies at the start of its last
//    pages (an underflow touches the inaccessible page before it). The rest of its
//    pages, the slack included, is filled with kFill and checked at free. Only the object's
//    pages are accessible while it lives; when it is freed they are made
//    inaccessible and given back, and the slot waits in a quarantine: the least
//    recently freed slot is reused first, so a freed object stays inaccessible for
//    as long as the pool allows. Inaccessible means guard regions where the kernel
//    has them (Linux 6.13: one madvise each way, marks in the page tables, the pool
//    one mapping), else mprotect (which splits the pool's mapping around each live
//    object and merges it back at free) and MADV_DONTNEED.
//  - A deferred free (uslab_free_deferred) of a guarded object records its stack as
//    the free's at the call (note_deferred); the object stays accessible until the
//    grace period's free, and faults after it, as KFENCE does for kfree_rcu.
//  - The pool is mapped at the first sample (guard_slots slots, inaccessible, no
//    memory until used); every page of a slot is in the page map with a span of kind
//    kGuarded (class 0), so free() and the other entry points reach this file through
//    their slow paths.
//  - The fault handler (SIGSEGV, SIGBUS) is installed at the first guarded allocation
//    and again at a later one if the program replaced it; it passes every fault
//    outside the pool to the handler it replaced (or the default action), and
//    reports one inside it: the kind (overflow, underflow, use after free, and at
//    free: double free, invalid free, a corrupted fill), the address, its offset from
//    the object, the object's size, and the stacks (the access, the allocation, the
//    free), then aborts; with guard_recover=true it reports once per slot, makes the
//    slot accessible (taken out of use) and lets the program go on.
//
// Locking: g_pool.lock (rank kGuardPool) guards the slots' states, their quarantine
// and the counters; it is taken with no allocator lock held (the sampling hook runs
// after the CPU's lock is dropped; free's slow path holds none). Stacks are captured
// and pages protected outside it: a slot being allocated or freed is owned by the
// thread doing it (its state says so). The fault handler reads a slot without the
// lock (it may run inside a thread that holds it): what it reads was written before
// the pages it faulted on were protected.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/alloc/alloc.h"
#include "core/prof/stack.h"

namespace uslab::guard {

// The largest size class fits, and large objects up to 64 KiB (larger ones have the
// mapping of their own that guard=true gives).
constexpr size_t kAreaBytes = size_t{64} << 10;
static_assert(kAreaBytes >= kMaxSmall && kAreaBytes % kPageSize == 0);
static_assert(kAreaBytes % os::kMaxOsPage == 0, "the area is whole OS pages of any size");
inline size_t slot_bytes() { return kAreaBytes + page_granule(); }
constexpr uint8_t kFill = 0xd7;  // the object's pages around it, checked at free

// Registers the sampling client when guard_sample asks for it (the library's
// constructor). Maps nothing.
void init();

// A large object of `size` bytes aligned to `align` in a slot, for a sample point of
// the guard's (heap.cc picks it); nullptr when it is larger than kAreaBytes, aligned
// beyond a page, or no slot is free: it is then allocated as usual.
void* alloc_large(size_t size, size_t align);

// The guarded slot named by page-map entry e, or nullptr.
inline Span* span_of(uintptr_t e) {
  Span* s = PageMap::span_of(e);
  return s && !(e & PageMap::kClassMask) && s->kind == SpanKind::kGuarded ? s : nullptr;
}

// free(p) of a pointer in slot s: the slot goes to the quarantine, or a double or
// invalid free is reported (and the program aborted, as abort_on_error says).
void free(void* p, Span* s);
// The usable size of the live object p in slot s, or 0 after a report of what p is
// (`op`: "realloc", "malloc_usable_size"...).
size_t live_size(const void* p, Span* s, const char* op);
// uslab_free_deferred(p) of a guarded object: its free's stack is this call's (the
// object stays accessible until the grace period's free).
void note_deferred(void* p);
// The class whose object slot s holds or held last.
inline unsigned class_of(const Span* s) { return s->size_class; }
// Live guarded objects of class cls (an object cache being destroyed counts them).
size_t live_in_class(unsigned cls);

struct Stats {
  uint64_t allocations;  // guarded so far
  uint64_t reports;      // errors reported
  uint32_t slots;        // in the pool (0 until the first sample)
  uint32_t live;         // holding an object
  uint32_t quarantined;  // freed, inaccessible, waiting for reuse
};
Stats stats();

// Internals shared by pool.cc and fault.cc.
namespace internal {

// kOpened: live, reported at a fault and left open (guard_recover): its free is
// taken as it comes. kBurned: out of use for good.
enum class SlotState : uint8_t { kNever, kLive, kFreeing, kFreed, kOpened, kBurned };

struct Slot {
  char* object;  // the object's start (live or freed)
  uint32_t size;
  uint8_t cls;                   // set with the state, under the lock (live_in_class reads both)
  std::atomic<SlotState> state;  // written under the lock, read by the handler without
  bool deferred;                 // its free stack is uslab_free_deferred's (note_deferred)
  uint32_t next;                 // quarantine order (kNone at the tail)
  uint32_t alloc_tid, free_tid;
  prof::Stack alloc_stack, free_stack;
};
constexpr uint32_t kNone = ~uint32_t{0};

struct Pool {
  Mutex lock;
  char* base = nullptr;  // slot_bytes() a slot; published once (release), never moved
  Slot* slots = nullptr;
  Span* spans = nullptr;
  uint32_t count = 0;                         // slots (written before base is published)
  uint32_t fresh USLAB_GUARDED_BY(lock) = 0;  // never used yet: count - fresh
  uint32_t head USLAB_GUARDED_BY(lock) = kNone, tail USLAB_GUARDED_BY(lock) = kNone;
  uint32_t live USLAB_GUARDED_BY(lock) = 0, quarantined USLAB_GUARDED_BY(lock) = 0;
  uint64_t allocations USLAB_GUARDED_BY(lock) = 0;
  uint64_t reports = 0;                        // atomic adds (the handler adds without the lock)
  bool failed USLAB_GUARDED_BY(lock) = false;  // the pool could not be mapped
  bool regions = false;  // inaccessible by guard regions, not mprotect (set before base)
};
extern Pool g_pool;

}  // namespace internal

// Whether p lies in the guarded pool (false until it is mapped).
inline bool in_pool(const void* p) {
  const char* b = __atomic_load_n(&internal::g_pool.base, __ATOMIC_ACQUIRE);
  return b && static_cast<size_t>(static_cast<const char*>(p) - b) <
                  size_t{internal::g_pool.count} * slot_bytes();
}

namespace internal {

// The first byte of slot i and its object's accessible pages [first, end).
inline char* slot_base(uint32_t i) { return g_pool.base + size_t{i} * slot_bytes(); }
inline char* area_end(uint32_t i) { return slot_base(i) + kAreaBytes; }
// Makes [p, p + bytes) of the pool accessible (open) or not, by the pool's means; a
// closed range's pages are given back. False when the kernel refused.
inline bool set_access(char* p, size_t bytes, bool open) {
  if (g_pool.regions) return os::guard_region(p, bytes, !open);
  if (!os::protect(p, bytes, open)) return false;
  if (!open) os::purge(p, bytes);
  return true;
}
inline char* pages_start(const Slot& s) {
  return reinterpret_cast<char*>(os::page_down(reinterpret_cast<uintptr_t>(s.object)));
}

// Installs the fault handler, or again when the program replaced it.
void install_handler();
// One report on stderr: `what` happened at `addr` to slot i's object; `access`, when
// not null, is the stack of the faulting access.
void report(uint32_t i, const char* what, uintptr_t addr, const prof::Stack* access);

}  // namespace internal

}  // namespace uslab::guard
