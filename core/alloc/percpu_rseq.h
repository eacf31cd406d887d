// core/alloc/percpu_rseq.h — the per-CPU sheaves' restartable sections: the fast
// paths' single pop and push, and the slow paths' batch pop, push, draining push,
// resize and peek, one file of inline assembly per architecture (x86-64:
// percpu_rseq_x86_64.h; aarch64: percpu_rseq_aarch64.h), and the dispatch between
// the forms of the fast paths.
//
// Owns nothing. Stands alone: the layout, the globals and the slow paths the sections
// use are percpu_layout.h's, the rseq area the platform's; percpu.h includes it
// for the rest of the allocator. Each section's rules (percpu.h): it works on one
// CPU's region, found from the rseq area's cpu_id; its one committing store is the
// last instruction before its end label; the kernel aborts it on preemption,
// migration or a signal, and it restarts from the top. test/unit/percpu_rseq_test.cc
// exercises each one directly. On other architectures there is no per-CPU mode
// (rseq_init_process says kNone) and the functions below are the fallbacks.
//
// Memory ordering: a CPU's region is only ever read and written by threads running
// on that CPU, inside a section (the batch sections check the CPU they were asked
// for). Threads of one CPU are ordered by the context switch between them (the
// kernel's barriers on every switch and migration), so on a weakly ordered CPU too
// no section needs a fence. Objects reach other CPUs only through the depots and
// central lists, whose locks order them.
//
// Locking: none. The batch sections that change a sheaf's capacity or empty it run
// under the CPU's lock (percpu.cc); the pops and pushes need none.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/percpu_layout.h"

#if defined(__x86_64__)
#include "core/alloc/percpu_rseq_x86_64.h"
#elif defined(__aarch64__)
#include "core/alloc/percpu_rseq_aarch64.h"
#endif

namespace uslab {

#if defined(__x86_64__) || defined(__aarch64__)

// The fast paths around each architecture's section (USLAB_POP_FORM and
// USLAB_PUSH_FORM: an asm goto that leaves to abort, miss or tick).
// Pop one object of class cls from the current CPU's sheaf in the form Base names
// (r: what the program asked for, passed on to the slow paths).
template <bool Base>
inline void* percpu_alloc_as(unsigned cls, Request r = kWholeClass) {
  void* obj;
  USLAB_POP_FORM(Base);
  if (obj == nullptr) __builtin_unreachable();  // tested in the section
  sheaf_acquire(&obj, 1);
  return obj;
abort:
  return percpu_alloc_retry(cls, r);
miss:
  return percpu_alloc_slow(cls, r);
tick:
  return percpu_alloc_tick(cls, r);
}
// Push p onto the current CPU's sheaf of cls in the form Base names: to Miss when it
// is full, the thread has no usable CPU or p is its top object already (a double
// free); to Retry when the kernel aborted the section.
template <void (*Miss)(void*, unsigned), void (*Retry)(void*, unsigned), bool Base>
inline void percpu_push_as(void* p, unsigned cls) {
  sheaf_release(&p, 1);
  USLAB_PUSH_FORM(Base);
  return;
abort:
  return Retry(p, cls);
miss:
  return Miss(p, cls);
}

// Pop one object of class cls from the current CPU's sheaf (the form g_percpu names;
// aarch64 has one form, the index one).
inline void* percpu_alloc(unsigned cls, Request r = kWholeClass) {
  return g_percpu == kSheafBase ? percpu_alloc_base(cls, r) : percpu_alloc_as<false>(cls, r);
}
// Push p onto the current CPU's sheaf of cls, in the form g_percpu names.
template <void (*Miss)(void*, unsigned), void (*Retry)(void*, unsigned)>
inline void percpu_push_one(void* p, unsigned cls) {
  if (g_percpu == kSheafBase) return percpu_push_as<Miss, Retry, true>(p, cls);
  percpu_push_as<Miss, Retry, false>(p, cls);
}
// Free p (a validated object of class cls) onto the current CPU's sheaf.
template <bool Base>
inline void percpu_free_as(void* p, unsigned cls) {
  percpu_push_as<percpu_free_slow, percpu_free_retry, Base>(p, cls);
}
inline void percpu_free(void* p, unsigned cls) {
  if (g_percpu == kSheafBase) return percpu_free_base(p, cls);
  percpu_free_as<false>(p, cls);
}

#else  // no per-CPU mode (rseq_init_process says kNone): never called.

template <bool Base>
inline void* percpu_alloc_as(unsigned cls, Request r = kWholeClass) {
  return percpu_alloc_slow(cls, r);
}
inline void* percpu_alloc(unsigned cls, Request r = kWholeClass) {
  return percpu_alloc_slow(cls, r);
}
template <void (*Miss)(void*, unsigned), void (*Retry)(void*, unsigned)>
inline void percpu_push_one(void* p, unsigned cls) {
  Miss(p, cls);
}
template <bool Base>
inline void percpu_free_as(void* p, unsigned cls) {
  percpu_free_slow(p, cls);
}
inline void percpu_free(void* p, unsigned cls) { percpu_free_slow(p, cls); }
inline long percpu_pop_batch(uint32_t, unsigned, void**, size_t) { return -1; }
inline long percpu_push_batch(uint32_t, unsigned, void* const*, size_t) { return -1; }
inline long percpu_resize(uint32_t, unsigned, uint32_t, void**) { return -1; }
inline long percpu_peek(uint32_t, unsigned, void**) { return -1; }
inline long percpu_push_draining(uint32_t, unsigned, void*, void**, size_t) { return kSheafMoved; }

#endif

}  // namespace uslab
