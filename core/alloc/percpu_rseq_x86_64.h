// core/alloc/percpu_rseq_x86_64.h — the per-CPU sheaves' restartable sections in
// x86-64 inline assembly: the fast paths' single pop and push, in two addressing
// forms, and the slow paths' batch pop, push, draining push, resize and peek.
//
// Owns nothing; included by percpu_rseq.h, whose top comment gives the rules
// every section keeps. x86-64 is strongly ordered (TSO): no section needs a fence.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/hit_counter.h"
#include "core/alloc/percpu_layout.h"
#include "core/ds/ds.h"

namespace uslab {

// The sections keep their hand layout:
// clang-format off

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
// Every section commits the whole 32-bit header {current, end} (end as it read it),
// and the fast paths load it whole: each pop and push reads the header the one
// before it wrote, and a 16-bit store forwarded to the next load made that chain
// the N x alloc loop's limit (AMD Zen 4 forwards 32-bit stores much faster).
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

#define USLAB_RSEQ_CLOSE_TO(target)            \
  "2:\n\t"                                     \
  ".pushsection __rseq_failure, \"ax?\"\n\t"   \
  ".byte 0x0f, 0xb9, 0x3d\n\t"                 \
  ".long 0x53053053\n\t"                       \
  "4:\n\t"                                     \
  "jmp " target "\n\t"                         \
  ".popsection\n\t"
#define USLAB_RSEQ_CLOSE USLAB_RSEQ_CLOSE_TO("%l[abort]")

// The region of the current CPU into rdx, or a jump to `miss` when the CPU id is
// not below g_cpu_count (no rseq for this thread, or a CPU beyond the regions).
#define USLAB_RSEQ_ANY_CPU              \
  "movl %%fs:4(%[rs]), %%edx\n\t"       \
  "cmpl %[ncpu], %%edx\n\t"             \
  "jae %l[miss]\n\t"                    \
  "shlq $18, %%rdx\n\t"                 \
  "addq %[region], %%rdx\n\t"

static_assert(kCpuRegionShift == 18 && kHeaderOffset == 8, "spelled out in the asm");
static_assert(kRseqSig == 0x53053053, "the signature below is spelled out in asm");

// The fast paths' two forms. Each pop reads the header and slot the push before it
// wrote, and each push the header the pop before it wrote, so the pair's time is a
// chain of stores forwarded to loads. AMD Zen 4 forwards them fastest when the load
// names the same base+index operand as the store, and loses time to a lea on that
// chain; Intel Emerald Rapids forwards a base+index operand slowly, and is faster
// when header and slot are reached through registers computed first. g_percpu names
// the form in use. Each form leaves the compiler a caller-saved register for cls and
// one for the request the slow paths take (with none, malloc saved one on the stack):
// the pop adds the region from memory, not from a register.

// Pop one object of class cls from the current CPU's sheaf. The hit counter is
// bumped before the commit: a section aborted after it counts one hit twice. The
// object below the top (the next pop's; the guard's 0 at the bottom) is prefetched:
// programs write what they allocate, and after a pause its line is cold. The base
// form prefetches after the counter, through rdx, which it no longer needs.
#define USLAB_POP_INDEX                             \
  "movl 8(%%rdx, %[cls], 4), %%ecx\n\t"           \
  "movzwl %%cx, %%r9d\n\t"                        \
  "movq (%%rdx, %%r9, 8), %[obj]\n\t"             \
  "testq %[obj], %[obj]\n\t"                      \
  "jz %l[miss]\n\t"                               \
  "movq -8(%%rdx, %%r9, 8), %%r8\n\t"             \
  "prefetcht0 (%%r8)\n\t"                         \
  "addw %[step], %c[hits](%%rdx, %[cls], 2)\n\t"  \
  "jc %l[tick]\n\t"                               \
  "decl %%ecx\n\t"                                \
  "movl %%ecx, 8(%%rdx, %[cls], 4)\n\t"
#define USLAB_POP_BASE                              \
  "leaq 8(%%rdx, %[cls], 4), %%r8\n\t"            \
  "movl (%%r8), %%ecx\n\t"                        \
  "movzwl %%cx, %%r9d\n\t"                        \
  "leaq (%%rdx, %%r9, 8), %%r9\n\t"               \
  "movq (%%r9), %[obj]\n\t"                       \
  "testq %[obj], %[obj]\n\t"                      \
  "jz %l[miss]\n\t"                               \
  "addw %[step], %c[hits](%%rdx, %[cls], 2)\n\t"  \
  "jc %l[tick]\n\t"                               \
  "movq -8(%%r9), %%rdx\n\t"                      \
  "prefetcht0 (%%rdx)\n\t"                        \
  "decl %%ecx\n\t"                                \
  "movl %%ecx, (%%r8)\n\t"
#define USLAB_POP_SECTION(body)                                                 \
  __asm__ goto(USLAB_RSEQ_OPEN USLAB_RSEQ_ANY_CPU body USLAB_RSEQ_CLOSE          \
               : [obj] "=&a"(obj) /* the return register: no move after */       \
               : [rs] "r"(g_rseq_offset), [ncpu] "m"(g_cpu_count),               \
                 [region] "m"(g_cpu_region), [cls] "r"(uint64_t{cls}),           \
                 [hits] "i"(kHitsOffset), [step] "i"(kHitStep)                   \
               : "rcx", "rdx", "r8", "r9", "memory", "cc"                        \
               : abort, miss, tick)

// The pop of the form `base` names (percpu_rseq.h's percpu_alloc_as).
#define USLAB_POP_FORM(base)                \
  if constexpr (base)                       \
    USLAB_POP_SECTION(USLAB_POP_BASE);      \
  else                                      \
    USLAB_POP_SECTION(USLAB_POP_INDEX)

// Push p onto the current CPU's sheaf of cls (header index: a class, kDeferSheaf or
// kRemoteSheaf).
// Goes to Miss when the sheaf is full, the thread has no usable CPU, or p is already
// the top object (a double free); to Retry when the kernel aborted the section. The
// base form compares current with end in 16 bits, with rdx turned into the top
// slot's address once the lea has used it.
#define USLAB_PUSH_INDEX                            \
  "movl 8(%%rdx, %[cls], 4), %%ecx\n\t"           \
  "movzwl %%cx, %%eax\n\t"                        \
  "movl %%ecx, %%r8d\n\t"                         \
  "shrl $16, %%r8d\n\t"                           \
  "cmpl %%r8d, %%eax\n\t"                         \
  "jae %l[miss]\n\t"                              \
  "cmpq %[p], (%%rdx, %%rax, 8)\n\t"              \
  "je %l[miss]\n\t"                               \
  "movq %[p], 8(%%rdx, %%rax, 8)\n\t"             \
  "incl %%ecx\n\t"                                \
  "movl %%ecx, 8(%%rdx, %[cls], 4)\n\t"
#define USLAB_PUSH_BASE                             \
  "leaq 8(%%rdx, %[cls], 4), %%r8\n\t"            \
  "movl (%%r8), %%ecx\n\t"                        \
  "movzwl %%cx, %%eax\n\t"                        \
  "leaq (%%rdx, %%rax, 8), %%rdx\n\t"             \
  "movl %%ecx, %%eax\n\t"                         \
  "shrl $16, %%eax\n\t"                           \
  "cmpw %%ax, %%cx\n\t"                           \
  "jae %l[miss]\n\t"                              \
  "cmpq %[p], (%%rdx)\n\t"                        \
  "je %l[miss]\n\t"                               \
  "movq %[p], 8(%%rdx)\n\t"                       \
  "incl %%ecx\n\t"                                \
  "movl %%ecx, (%%r8)\n\t"
#define USLAB_PUSH_SECTION(body)                                                \
  __asm__ goto(USLAB_RSEQ_OPEN USLAB_RSEQ_ANY_CPU body USLAB_RSEQ_CLOSE          \
               :                                                                 \
               : [rs] "r"(g_rseq_offset), [ncpu] "m"(g_cpu_count),               \
                 [region] "r"(g_cpu_region), [cls] "r"(uint64_t{cls}), [p] "r"(p) \
               : "rax", "rcx", "rdx", "r8", "memory", "cc"                       \
               : abort, miss)

// The push of the form `base` names (percpu_rseq.h's percpu_push_as).
#define USLAB_PUSH_FORM(base)               \
  if constexpr (base)                       \
    USLAB_PUSH_SECTION(USLAB_PUSH_BASE);    \
  else                                      \
    USLAB_PUSH_SECTION(USLAB_PUSH_INDEX)


// The batch sections below serve the slow paths. They return the number of objects
// moved, or -1 when the thread is not running on `cpu`, from a plain asm statement:
// an abort restarts the section inside the statement (label 7), so no result has
// to cross an asm-goto edge (GCC 12 can merge an asm goto output with the value a
// label path returns, which broke these functions in unoptimised inlining).
#define USLAB_RSEQ_OPEN_RETRY "7:\n\t" USLAB_RSEQ_OPEN
#define USLAB_RSEQ_CLOSE_RETRY USLAB_RSEQ_CLOSE_TO("7b")

// The region of the expected CPU into rdx; k = -1 and out (label 9) when the
// thread runs elsewhere.
#define USLAB_RSEQ_ON_CPU_OR_EXIT       \
  "movl %%fs:4(%[rs]), %%edx\n\t"       \
  "cmpl %[cpu], %%edx\n\t"              \
  "jne 9f\n\t"                          \
  "shlq $18, %%rdx\n\t"                 \
  "addq %[region], %%rdx\n\t"

// Copies %[k] (≥ 1) pointers from src to dst (registers, not overlapping): an odd
// one first through tmp, then two at a time through xmm0 (SSE2 is part of x86-64;
// a bulk call's 16 pointers took 16 turns of a one-pointer loop, a third of
// uslab_alloc_bulk's time); uses r8.
#define USLAB_RSEQ_COPY(src, dst, tmp)                 \
  "xorl %%r8d, %%r8d\n\t"                            \
  "testl $1, %k[k]\n\t"                              \
  "jz 5f\n\t"                                        \
  "movq (" src "), " tmp "\n\t"                      \
  "movq " tmp ", (" dst ")\n\t"                      \
  "incl %%r8d\n\t"                                   \
  "cmpq %[k], %%r8\n\t"                              \
  "jae 10f\n\t"                                      \
  "5:\n\t"                                           \
  "movdqu (" src ", %%r8, 8), %%xmm0\n\t"            \
  "movdqu %%xmm0, (" dst ", %%r8, 8)\n\t"            \
  "addq $2, %%r8\n\t"                                \
  "cmpq %[k], %%r8\n\t"                              \
  "jb 5b\n\t"                                        \
  "10:\n\t"

// Ends a batch section: label 8 is the normal exit, 9 the wrong-CPU one.
#define USLAB_RSEQ_EXIT(k) \
  "jmp 8f\n\t"             \
  "9:\n\t"                 \
  "movq $-1, %" k "\n\t"   \
  "8:\n\t"

// Commits the header {current (ecx), end (the 32-bit register `end`, read at the
// section's start)} and ends a batch pop or push; label 6 is its early exit, with
// nothing moved.
#define USLAB_RSEQ_COMMIT_BATCH(end)        \
  "shll $16, " end "\n\t"                 \
  "orl %%ecx, " end "\n\t"                \
  "movl " end ", 8(%%rdx, %[cls], 4)\n\t" \
  USLAB_RSEQ_CLOSE_RETRY                   \
  "jmp 8f\n\t"                            \
  "6:\n\t"                                \
  "xorl %k[k], %k[k]\n\t"                 \
  USLAB_RSEQ_EXIT("[k]")

// Pops up to n (≥ 1) objects from the top of cpu's sheaf into out[0..k).
inline long percpu_pop_batch(uint32_t cpu, unsigned cls, void** out, size_t n) {
  USLAB_DCHECK(n >= 1);
  long k;
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
                   "movzwl 10(%%rdx, %[cls], 4), %%eax\n\t"
                   "movq %%rcx, %[k]\n\t"
                   "subq %[begin], %[k]\n\t"
                   "jbe 6f\n\t"
                   "cmpq %[n], %[k]\n\t"
                   "cmovaq %[n], %[k]\n\t"
                   "subq %[k], %%rcx\n\t"
                   "leaq 8(%%rdx, %%rcx, 8), %%r10\n\t"
                   USLAB_RSEQ_COPY("%%r10", "%[out]", "%%r9")
                   USLAB_RSEQ_COMMIT_BATCH("%%eax")
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
  USLAB_DCHECK(n >= 1);
  long k;
  sheaf_release(src, n);
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
                   "movzwl 10(%%rdx, %[cls], 4), %%r11d\n\t"
                   "movl %%r11d, %%eax\n\t"
                   "subl %%ecx, %%eax\n\t"
                   "jbe 6f\n\t"
                   "movl %%eax, %k[k]\n\t"
                   "cmpq %[n], %[k]\n\t"
                   "cmovaq %[n], %[k]\n\t"
                   "movq %[n], %%r10\n\t"
                   "subq %[k], %%r10\n\t"
                   "leaq (%[src], %%r10, 8), %%r10\n\t"
                   "leaq 8(%%rdx, %%rcx, 8), %%r9\n\t"
                   USLAB_RSEQ_COPY("%%r10", "%%r9", "%%rax")
                   "addl %k[k], %%ecx\n\t"
                   USLAB_RSEQ_COMMIT_BATCH("%%r11d")
                   : [k] "=&r"(k)
                   : [rs] "r"(g_rseq_offset), [cpu] "rm"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls}), [src] "r"(src), [n] "rm"(uint64_t{n})
                   : "rax", "rcx", "rdx", "r8", "r9", "r10", "r11", "xmm0", "memory", "cc");
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
                   "shll $16, %%eax\n\t"
                   "orl %%ecx, %%eax\n\t"
                   "movl %%eax, 8(%%rdx, %[cls], 4)\n\t"
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
  __asm__ volatile(USLAB_RSEQ_OPEN_RETRY
                   USLAB_RSEQ_ON_CPU_OR_EXIT
                   "movzwl 8(%%rdx, %[cls], 4), %%ecx\n\t"
                   "movq (%%rdx, %%rcx, 8), %[t]\n\t"
                   "xorl %k[r], %k[r]\n\t"
                   USLAB_RSEQ_CLOSE_RETRY
                   USLAB_RSEQ_EXIT("[r]")
                   : [r] "=&r"(r), [t] "=&r"(t)
                   : [rs] "r"(g_rseq_offset), [cpu] "rm"(cpu), [region] "r"(g_cpu_region),
                     [cls] "r"(uint64_t{cls})
                   : "rax", "rcx", "rdx", "memory", "cc");
  *top = t;
  return r;
}

// clang-format on

}  // namespace uslab
