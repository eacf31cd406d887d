// core/prof/stack.h — call stacks of sampled allocations (the heap profiler, prof.h).
//
// Owns: the capture of the calling thread's stack, and what of it belongs to the
// program. Stacks are unwound from the .eh_frame tables, so they are right in
// programs built without frame pointers (Debian's python3, cc1plus): with
// libunwind's unw_backtrace where libunwind.so.8 is installed (it caches each
// return address's frame layout per thread: a sample cost several times less than
// with libgcc's unwinder, which interprets the call frame information of every frame
// every time), else libgcc_s's _Unwind_Backtrace; both opened with dlopen by
// stack_init, so that libuslab.so needs libc alone. Without either, frame pointers
// are walked.
// The frames inside uslab (the profiler, the allocator, the shim) are dropped: the
// shim's entry points tail-call their slow paths, so which one the program called
// is read from the call instruction before the first frame kept (write.cc).
//
// Locking: g_capture_lock (rank kStackCapture) is held across every unwind. The
// unwinders have locks of their own (libunwind's caches, libgcc's list of frames
// registered at run time) that fork does not reset: a child forked while another
// thread is inside unw_backtrace would hang at its first unwind. fork takes
// g_capture_lock with the lock table, so no unwind is in flight when it forks. The
// unwinder also takes ld.so's loader lock (dl_iterate_phdr), which a thread holds
// while it maps objects but not while it allocates, and glibc resets in the child.
// Capture allocates nothing; a re-entry (a signal handler, an unwinder that
// allocates) is the caller's to refuse (prof.cc's t_in_prof).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/platform/platform.h"

namespace uslab::prof {

constexpr unsigned kMaxFrames = 64;

struct Stack {
  unsigned depth = 0;
  uintptr_t frames[kMaxFrames];  // return addresses in the program, innermost first
};

// Opens the unwinder and finds uslab's own code (from the library's constructor:
// dlopen allocates). Idempotent: the first call decides. Without `libunwind`, libgcc's
// unwinder only: libunwind makes a pipe at its start (to check addresses it reads),
// two descriptors a program that did not ask for a profiler sees among its own (and
// passes to its children: CPython's test_subprocess counts them).
void stack_init(bool libunwind = true);
// Whether pc lies in uslab's own code (empty when uslab is linked into the program
// itself, as in the unit tests: nothing is dropped then).
bool stack_in_uslab(uintptr_t pc);
// Return addresses from the innermost, uslab's frames dropped, into out.
void stack_keep(Stack* out, void* const* pcs, int n);
// Without libunwind: libgcc's unwinder, or the frame-pointer chain.
void stack_capture_fallback(Stack* out);
// libunwind's unw_backtrace, or null (stack_init).
extern int (*g_unw_backtrace)(void**, int);
// Held across an unwind (see Locking above).
extern Mutex g_capture_lock;

// The calling thread's stack, uslab's frames dropped. Inline: every frame of uslab
// between the sampled allocation and this call costs the unwinder a step (about 90
// instructions each with libunwind's cache), so the capture adds none of its own.
[[gnu::always_inline]] inline void stack_capture(Stack* out) {
  if (g_unw_backtrace) {
    void* pcs[kMaxFrames + 16];  // room for uslab's own frames
    int n;
    {
      LockGuard g(g_capture_lock);
      n = g_unw_backtrace(pcs, static_cast<int>(sizeof pcs / sizeof pcs[0]));
    }
    stack_keep(out, pcs, n);
  } else {
    stack_capture_fallback(out);
  }
}

}  // namespace uslab::prof
