// core/prof/stack.cc — stack capture (stack.h). Locking: g_capture_lock across an
// unwind; see stack.h.
#include "core/prof/stack.h"

#include <dlfcn.h>
#include <link.h>
#include <unwind.h>

#include "core/platform/libc_calls.h"

namespace uslab::prof {

int (*g_unw_backtrace)(void**, int) = nullptr;  // libunwind's, with its per-thread frame cache
constinit Mutex g_capture_lock;
USLAB_LOCK_ONE(kStackCapture, g_capture_lock);

namespace {

using BacktraceFn = _Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void*);
using GetIpFn = _Unwind_Ptr (*)(_Unwind_Context*);
BacktraceFn g_backtrace = nullptr;
GetIpFn g_get_ip = nullptr;
uintptr_t g_self_lo = 0, g_self_hi = 0;  // uslab's executable segment, when a library
bool g_ready = false;

// The executable PT_LOAD of the object holding stack_init, unless that object is the
// program itself.
int find_self(dl_phdr_info* info, size_t, void* arg) {
  uintptr_t me = reinterpret_cast<uintptr_t>(arg);
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (me < lo || me >= hi) continue;
    if (info->dlpi_name && info->dlpi_name[0]) {  // "" is the program
      g_self_lo = lo;
      g_self_hi = hi;
    }
    return 1;
  }
  return 0;
}

struct Walk {
  Stack* out;
  unsigned skipped;
};

void keep(Stack* out, uintptr_t pc) {
  if (pc == 0) return;
  if (out->depth == 0 && stack_in_uslab(pc)) return;
  if (out->depth < kMaxFrames) out->frames[out->depth++] = pc;
}

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  Walk* w = static_cast<Walk*>(arg);
  keep(w->out, g_get_ip(ctx));
  return w->out->depth < kMaxFrames ? _URC_NO_REASON : _URC_END_OF_STACK;
}

// Without libgcc_s: the frame-pointer chain (uslab's frames have one; a program
// built without them ends the walk early, at the first frame that reuses rbp).
void walk_frame_pointers(Stack* out) {
  uintptr_t* fp = static_cast<uintptr_t*>(__builtin_frame_address(0));
  for (unsigned n = 0; fp && n < 256 && out->depth < kMaxFrames; n++) {
    uintptr_t next = fp[0], pc = fp[1];
    keep(out, pc);
    // The chain runs up the stack; anything else ends it.
    if (next <= reinterpret_cast<uintptr_t>(fp) ||
        next - reinterpret_cast<uintptr_t>(fp) > (64u << 20))
      break;
    fp = reinterpret_cast<uintptr_t*>(next);
  }
}

}  // namespace

void stack_init(bool libunwind) {
  if (g_ready) return;
  dl_iterate_phdr(find_self, reinterpret_cast<void*>(&stack_init));
  if (void* lib = libunwind ? libc::dl_open("libunwind.so.8", RTLD_NOW | RTLD_LOCAL) : nullptr)
    g_unw_backtrace = reinterpret_cast<int (*)(void**, int)>(libc::dl_sym(lib, "unw_backtrace"));
  if (void* lib = libc::dl_open("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL)) {
    g_backtrace = reinterpret_cast<BacktraceFn>(libc::dl_sym(lib, "_Unwind_Backtrace"));
    g_get_ip = reinterpret_cast<GetIpFn>(libc::dl_sym(lib, "_Unwind_GetIP"));
    if (!g_backtrace || !g_get_ip) g_backtrace = nullptr;
  }
  g_ready = true;
}

bool stack_in_uslab(uintptr_t pc) { return pc >= g_self_lo && pc < g_self_hi; }

void stack_keep(Stack* out, void* const* pcs, int n) {
  out->depth = 0;
  for (int i = 0; i < n; i++) keep(out, reinterpret_cast<uintptr_t>(pcs[i]));
}

void stack_capture_fallback(Stack* out) {
  out->depth = 0;
  if (g_backtrace) {
    Walk w{out, 0};
    LockGuard g(g_capture_lock);
    g_backtrace(on_frame, &w);
  } else {
    walk_frame_pointers(out);
  }
}

}  // namespace uslab::prof
