// core/alloc/percpu_rseq_aarch64.h — the per-CPU sheaves' restartable sections in
// aarch64 inline assembly: the fast paths' single pop and push (one addressing form:
// the base+index operands of x86-64's two forms are one addressing mode here), and
// the slow paths' batch pop, push, draining push, resize and peek.
//
// Owns nothing; included by percpu_rseq.h, whose top comment gives the rules
// every section keeps and why none needs a barrier on this weakly ordered CPU.
// The kernel's rseq ABI on arm64: the 32-bit signature kRseqSig (glibc's, a `brk`
// encoding, so that a stray jump to it traps) is the word before every abort
// handler; the descriptor is the same struct rseq_cs as on x86-64.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/hit_counter.h"
#include "core/alloc/percpu_layout.h"
#include "core/ds/ds.h"

namespace uslab {

static_assert(kRseqSig == 0xd428bc00, "the signature below is spelled out in asm");
static_assert(kCpuRegionShift == 18 && kHeaderOffset == 8, "spelled out in the asm");
static_assert(kHitsOffset % 2 == 0 && kHitsOffset < 4096, "an ldrh/strh offset");

// The sections keep their hand layout:
// clang-format off

// OPEN publishes this section's descriptor in rseq_cs and marks its start (1:); x9
// holds the thread's rseq area from here on. CLOSE marks the end after the commit
// (2:) and places the abort handler, preceded by the signature, out of line; the
// kernel clears rseq_cs when it aborts, so the handler jumps to `target`: a C label
// that re-runs the whole asm statement (fast paths) or label 7 at the statement's
// start (batch sections). Both out-of-line pieces join the section group of the
// function they are expanded in ("?"), as on x86-64. In every section x10 holds the
// CPU's region and x11 the address of the class's header less 8: the header is
// [x11, #8], slot i [x10, i, lsl #3].
#define USLAB_RSEQ_OPEN                 \
  ".pushsection __rseq_cs, \"aw?\"\n\t" \
  ".balign 32\n\t"                      \
  "3:\n\t"                              \
  ".long 0, 0\n\t"                      \
  ".quad 1f, 2f - 1f, 4f\n\t"           \
  ".popsection\n\t"                     \
  "mrs x9, tpidr_el0\n\t"               \
  "add x9, x9, %[rs]\n\t"               \
  "adrp x10, 3b\n\t"                    \
  "add x10, x10, :lo12:3b\n\t"          \
  "str x10, [x9, #8]\n\t"               \
  "1:\n\t"

#define USLAB_RSEQ_CLOSE_TO(target)          \
  "2:\n\t"                                   \
  ".pushsection __rseq_failure, \"ax?\"\n\t" \
  ".inst 0xd428bc00\n\t"                     \
  "4:\n\t"                                   \
  "b " target "\n\t"                         \
  ".popsection\n\t"
#define USLAB_RSEQ_CLOSE USLAB_RSEQ_CLOSE_TO("%l[abort]")

// The region of the current CPU into x10 and the header's base into x11, or a jump
// to `miss` when the CPU id is not below g_cpu_count (no rseq for this thread, or a
// CPU beyond the regions).
#define USLAB_RSEQ_ANY_CPU              \
  "ldr w10, [x9, #4]\n\t"               \
  "cmp w10, %w[ncpu]\n\t"               \
  "b.hs %l[miss]\n\t"                   \
  "add x10, %[region], x10, lsl #18\n\t" \
  "add x11, x10, %[cls], lsl #2\n\t"

// Pop one object of class cls from the current CPU's sheaf. As on x86-64: the hit
// counter is bumped before the commit (a section aborted after it counts one hit
// twice; its carry out of 16 bits goes to `tick`), and the object below the top
// (the next pop's; the guard's 0 at the bottom) is prefetched.
#define USLAB_POP                                   \
  "ldr w12, [x11, #8]\n\t"                        \
  "and w13, w12, #0xffff\n\t"                     \
  "ldr %[obj], [x10, x13, lsl #3]\n\t"            \
  "cbz %[obj], %l[miss]\n\t"                      \
  "sub x14, x13, #1\n\t"                          \
  "ldr x14, [x10, x14, lsl #3]\n\t"               \
  "prfm pldl1keep, [x14]\n\t"                     \
  "add x15, x10, %[cls], lsl #1\n\t"              \
  "ldrh w14, [x15, #%c[hits]]\n\t"                \
  "add w14, w14, #%c[step]\n\t"                   \
  "strh w14, [x15, #%c[hits]]\n\t"                \
  "tbnz w14, #16, %l[tick]\n\t"                   \
  "sub w12, w12, #1\n\t"                          \
  "str w12, [x11, #8]\n\t"

// The pop (percpu_rseq.h's percpu_alloc_as; one form whatever `base` says).
#define USLAB_POP_FORM(base)                                                       \
  __asm__ goto(USLAB_RSEQ_OPEN USLAB_RSEQ_ANY_CPU USLAB_POP USLAB_RSEQ_CLOSE        \
               : [obj] "=&r"(obj)                                                  \
               : [rs] "r"(g_rseq_offset), [ncpu] "r"(g_cpu_count),                 \
                 [region] "r"(g_cpu_region), [cls] "r"(uint64_t{cls}),             \
                 [hits] "i"(kHitsOffset), [step] "i"(kHitStep)                     \
               : "x9", "x10", "x11", "x12", "x13", "x14", "x15", "memory", "cc"    \
               : abort, miss, tick)

// Push p onto the current CPU's sheaf of cls (header index: a class, kDeferSheaf or
// kRemoteSheaf). Goes to Miss when the sheaf is full, the thread has no usable CPU,
// or p is already the top object (a double free); to Retry when the kernel aborted
// the section.
#define USLAB_PUSH                                  \
  "ldr w12, [x11, #8]\n\t"                        \
  "and w13, w12, #0xffff\n\t"                     \
  "cmp w13, w12, lsr #16\n\t"                     \
  "b.hs %l[miss]\n\t"                             \
  "ldr x14, [x10, x13, lsl #3]\n\t"               \
  "cmp x14, %[p]\n\t"                             \
  "b.eq %l[miss]\n\t"                             \
  "add x13, x13, #1\n\t"                          \
  "str %[p], [x10, x13, lsl #3]\n\t"              \
  "add w12, w12, #1\n\t"                          \
  "str w12, [x11, #8]\n\t"

// The push (percpu_rseq.h's percpu_push_as; one form whatever `base` says).
#define USLAB_PUSH_FORM(base)                                                      \
  __asm__ goto(USLAB_RSEQ_OPEN USLAB_RSEQ_ANY_CPU USLAB_PUSH USLAB_RSEQ_CLOSE       \
               :                                                                   \
               : [rs] "r"(g_rseq_offset), [ncpu] "r"(g_cpu_count),                 \
                 [region] "r"(g_cpu_region), [cls] "r"(uint64_t{cls}), [p] "r"(p)  \
               : "x9", "x10", "x11", "x12", "x13", "x14", "memory", "cc"           \
               : abort, miss)

// The batch sections below serve the slow paths. They return the number of objects
// moved, or -1 when the thread is not running on `cpu`, from a plain asm statement
// whose abort restarts it at label 7 (percpu_rseq_x86_64.h says why not asm goto).
#define USLAB_RSEQ_OPEN_RETRY "7:\n\t" USLAB_RSEQ_OPEN
#define USLAB_RSEQ_CLOSE_RETRY USLAB_RSEQ_CLOSE_TO("7b")

// The region of the expected CPU into x10 and the header's base into x11; k = -1
// and out (label 9) when the thread runs elsewhere.
#define USLAB_RSEQ_ON_CPU_OR_EXIT       \
  "ldr w10, [x9, #4]\n\t"               \
  "cmp w10, %w[cpu]\n\t"                \
  "b.ne 9f\n\t"                         \
  "add x10, %[region], x10, lsl #18\n\t" \
  "add x11, x10, %[cls], lsl #2\n\t"

// Copies %[k] (≥ 1) pointers from src to dst (registers other than x9 and x10, not
// overlapping): an odd one first, then two at a time with a load and a store pair;
// moves x9 and x10 along them and uses x15-x17 (the region in x10 is not needed
// after the copy: the commit goes through x11).
#define USLAB_RSEQ_COPY(src, dst)                      \
  "mov x9, " src "\n\t"                               \
  "mov x10, " dst "\n\t"                              \
  "mov x15, %[k]\n\t"                                 \
  "tbz x15, #0, 5f\n\t"                               \
  "ldr x16, [x9], #8\n\t"                             \
  "str x16, [x10], #8\n\t"                            \
  "subs x15, x15, #1\n\t"                             \
  "b.eq 10f\n\t"                                      \
  "5:\n\t"                                            \
  "ldp x16, x17, [x9], #16\n\t"                       \
  "stp x16, x17, [x10], #16\n\t"                      \
  "subs x15, x15, #2\n\t"                             \
  "b.ne 5b\n\t"                                       \
  "10:\n\t"

// Ends a batch section: label 8 is the normal exit, 9 the wrong-CPU one.
#define USLAB_RSEQ_EXIT(k)  \
  "b 8f\n\t"                \
  "9:\n\t"                  \
  "mov %" k ", #-1\n\t"     \
  "8:\n\t"

// Commits the header {current (w12), end (w13, read at the section's start)} and
// ends a batch pop or push; label 6 is its early exit, with nothing moved.
#define USLAB_RSEQ_COMMIT_BATCH              \
  "orr w13, w12, w13, lsl #16\n\t"         \
  "str w13, [x11, #8]\n\t"                 \
  USLAB_RSEQ_CLOSE_RETRY                    \
  "b 8f\n\t"                               \
  "6:\n\t"                                 \
  "mov %[k], #0\n\t"                       \
  USLAB_RSEQ_EXIT("[k]")


// Pops up to n (≥ 1) objects from the top of cpu's sheaf into out[0..k).
inline long percpu_pop_batch(uint32_t cpu, unsigned cls, void** out, size_t n) {
  USLAB_DCHECK(n >= 1);
  long k;
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "ldrh w12, [x11, #8]\n\t"
                   "ldrh w13, [x11, #10]\n\t"
                   "subs %[k], x12, %[begin]\n\t"
                   "b.ls 6f\n\t"
                   "cmp %[k], %[n]\n\t"
                   "csel %[k], %[n], %[k], hi\n\t"
                   "sub x12, x12, %[k]\n\t"
                   "add x14, x10, x12, lsl #3\n\t"
                   "add x14, x14, #8\n\t"
                   USLAB_RSEQ_COPY("x14", "%[out]")
                   USLAB_RSEQ_COMMIT_BATCH
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "r"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [begin] "r"(uint64_t{kSheafLayout.begin[cls]}),
                     [out] "r"(out), [n] "r"(uint64_t{n})
                   : "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17", "memory", "cc");
  if (k > 0) sheaf_acquire(out, static_cast<size_t>(k));
  return k;
}

// Pushes the last k of src[0..n) (n ≥ 1) onto cpu's sheaf, as many as fit.
inline long percpu_push_batch(uint32_t cpu, unsigned cls, void* const* src, size_t n) {
  USLAB_DCHECK(n >= 1);
  long k;
  sheaf_release(src, n);
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "ldrh w12, [x11, #8]\n\t"
                   "ldrh w13, [x11, #10]\n\t"
                   "subs w14, w13, w12\n\t"
                   "b.ls 6f\n\t"
                   "mov %w[k], w14\n\t"
                   "cmp %[k], %[n]\n\t"
                   "csel %[k], %[n], %[k], hi\n\t"
                   "sub x14, %[n], %[k]\n\t"
                   "add x14, %[src], x14, lsl #3\n\t"
                   "add x17, x10, x12, lsl #3\n\t"
                   "add x17, x17, #8\n\t"
                   USLAB_RSEQ_COPY("x14", "x17")
                   "add w12, w12, %w[k]\n\t"
                   USLAB_RSEQ_COMMIT_BATCH
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "r"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [src] "r"(src), [n] "r"(uint64_t{n})
                   : "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17", "memory", "cc");
  return k;
}

// Pushes p onto cpu's sheaf of cls or, when it is full, moves up to n (≥ 1) objects
// from its top to out[0..k) and leaves p to the caller; the results and the reason
// the full case writes no slot are percpu_rseq_x86_64.h's.
inline long percpu_push_draining(uint32_t cpu, unsigned cls, void* p, void** out, size_t n) {
  long k;
  sheaf_release(&p, 1);
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "ldrh w12, [x11, #8]\n\t"
                   "ldrh w13, [x11, #10]\n\t"
                   "mov %[k], #-3\n\t"
                   "cmp w13, %w[begin]\n\t"
                   "b.ls 8f\n\t"
                   "mov %[k], #-2\n\t"
                   "ldr x14, [x10, x12, lsl #3]\n\t"
                   "cmp x14, %[p]\n\t"
                   "b.eq 8f\n\t"
                   "mov %[k], #0\n\t"
                   "cmp w12, w13\n\t"
                   "b.lo 11f\n\t"
                   "sub %[k], x12, %[begin]\n\t"
                   "cmp %[k], %[n]\n\t"
                   "csel %[k], %[n], %[k], hi\n\t"
                   "sub x12, x12, %[k]\n\t"
                   "add x14, x10, x12, lsl #3\n\t"
                   "add x14, x14, #8\n\t"
                   USLAB_RSEQ_COPY("x14", "%[out]")
                   "b 12f\n\t"
                   "11:\n\t"
                   "add x14, x12, #1\n\t"
                   "str %[p], [x10, x14, lsl #3]\n\t"
                   "add w12, w12, #1\n\t"
                   "12:\n\t"
                   "orr w13, w12, w13, lsl #16\n\t"
                   "str w13, [x11, #8]\n\t"
                   USLAB_RSEQ_CLOSE_RETRY
                   USLAB_RSEQ_EXIT("[k]")
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "r"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [begin] "r"(uint64_t{kSheafLayout.begin[cls]}),
                     [p] "r"(p), [out] "r"(out), [n] "r"(uint64_t{n})
                   : "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17", "memory", "cc");
  if (k > 0) sheaf_acquire(out, static_cast<size_t>(k));
  return k;
}

// Sets cpu's capacity end for cls to new_end (≥ begin); objects above it move to
// out[0..k) (at most end - new_end of them). A header never used (0) starts empty.
inline long percpu_resize(uint32_t cpu, unsigned cls, uint32_t new_end, void** out) {
  long k;
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "ldrh w12, [x11, #8]\n\t"
                   "cmp w12, %w[begin]\n\t"
                   "csel w12, %w[begin], w12, lo\n\t"
                   "mov %[k], #0\n\t"
                   "cmp w12, %w[end]\n\t"
                   "b.ls 6f\n\t"
                   "sub %w[k], w12, %w[end]\n\t"
                   "mov w12, %w[end]\n\t"
                   "add x14, x10, x12, lsl #3\n\t"
                   "add x14, x14, #8\n\t"
                   USLAB_RSEQ_COPY("x14", "%[out]")
                   "6:\n\t"
                   "orr w13, w12, %w[end], lsl #16\n\t"
                   "str w13, [x11, #8]\n\t"
                   USLAB_RSEQ_CLOSE_RETRY
                   USLAB_RSEQ_EXIT("[k]")
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "r"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [end] "r"(new_end), [out] "r"(out),
                     [begin] "r"(uint32_t{kSheafLayout.begin[cls]})
                   : "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17", "memory", "cc");
  if (out && k > 0) sheaf_acquire(out, static_cast<size_t>(k));
  return k;
}

// The top object of cpu's sheaf for cls (nullptr when empty) into *top; -1 when the
// thread is not on cpu. Reads only: nothing to commit.
inline long percpu_peek(uint32_t cpu, unsigned cls, void** top) {
  long r;
  void* t;
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "ldrh w12, [x11, #8]\n\t"
                   "ldr %[t], [x10, x12, lsl #3]\n\t"
                   "mov %[r], #0\n\t"
                   USLAB_RSEQ_CLOSE_RETRY
                   USLAB_RSEQ_EXIT("[r]")
                   : [r] "=&r"(r), [t] "=&r"(t)
                   : [rs] "r"(g_rseq_offset), [cpu] "r"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls})
                   : "x9", "x10", "x11", "x12", "memory", "cc");
  *top = t;
  return r;
}

// clang-format on

}  // namespace uslab
