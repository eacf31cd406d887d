// core/platform/helper_thread.cc — the caller test and the creation of the
// allocator's own thread; see helper_thread.h.
#include "core/platform/helper_thread.h"

#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/auxv.h>

#include <cstring>

#include "core/platform/libc_calls.h"
#include "core/platform/os.h"

namespace uslab::os {

namespace {

struct Range {
  uintptr_t lo, hi;
};
constexpr unsigned kMaxRanges = 8;

// Written once by helper_thread_init (the constructor, before any other thread of
// the program can be in the allocator's slow paths that read them), read-only after.
Range self_[kMaxRanges], libc_[kMaxRanges];
unsigned nself_ = 0, nlibc_ = 0;
bool ready_ = false;
bool in_executable_ = false;  // uslab's code is the program's executable's

bool in(const Range* r, unsigned n, uintptr_t a) {
  for (unsigned i = 0; i < n; i++)
    if (a >= r[i].lo && a < r[i].hi) return true;
  return false;
}

// The objects whose code calls malloc and free under glibc's stack-cache lock:
// libc (glibc 2.34 on), libpthread (before) and the dynamic linker, by file name, or
// for the linker also by its load base (AT_BASE).
bool is_libc_object(const dl_phdr_info* info) {
  uintptr_t interp = getauxval(AT_BASE);
  if (interp && info->dlpi_addr == interp) return true;
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  // Every process runs this at start-up (USLAB_STARTUP_STRING, os.h).
  static USLAB_STARTUP_STRING(kLibc, "libc.so");
  static USLAB_STARTUP_STRING(kLibpthread, "libpthread.so");
  static USLAB_STARTUP_STRING(kLdLinux, "ld-linux");
  static USLAB_STARTUP_STRING(kLd64, "ld64.so");
  static USLAB_STARTUP_STRING(kLdSo, "ld.so");
  auto starts = [base](const char* prefix, size_t n) { return strncmp(base, prefix, n) == 0; };
  return starts(kLibc, sizeof kLibc - 1) || starts(kLibpthread, sizeof kLibpthread - 1) ||
         starts(kLdLinux, sizeof kLdLinux - 1) || starts(kLd64, sizeof kLd64 - 1) ||
         starts(kLdSo, sizeof kLdSo - 1);
}

USLAB_STARTUP_TEXT int record_object(dl_phdr_info* info, size_t, void*) {
  uintptr_t me = reinterpret_cast<uintptr_t>(&record_object);
  Range text[kMaxRanges];
  unsigned n = 0;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum && n < kMaxRanges; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    text[n] = Range{info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
    mine |= me >= text[n].lo && me < text[n].hi;
    n++;
  }
  // The program's executable is the first object, with an empty name.
  if (mine && (!info->dlpi_name || !info->dlpi_name[0])) in_executable_ = true;
  Range* dst = mine ? self_ : is_libc_object(info) ? libc_ : nullptr;
  unsigned* count = mine ? &nself_ : &nlibc_;
  for (unsigned i = 0; dst && i < n && *count < kMaxRanges; i++) dst[(*count)++] = text[i];
  return 0;
}

// The first return address outside this library on the way up from here, or 0 when
// the frame chain looks broken. Only this library's frames are read: each was laid
// down by its code (frame pointers), the caller's never is.
[[maybe_unused]] __attribute__((noinline)) uintptr_t first_foreign_return() {
  auto* fp = static_cast<uintptr_t*>(__builtin_frame_address(0));
  for (int depth = 0; depth < 64; depth++) {
    uintptr_t ret = fp[1];
    if (!in(self_, nself_, ret)) return ret;
    auto* next = reinterpret_cast<uintptr_t*>(fp[0]);
    // Frames grow towards higher addresses as we go up, by less than a stack.
    if (next <= fp ||
        reinterpret_cast<uintptr_t>(next) - reinterpret_cast<uintptr_t>(fp) > (8u << 20) ||
        (reinterpret_cast<uintptr_t>(next) & 7))
      return 0;
    fp = next;
  }
  return 0;
}

}  // namespace

USLAB_STARTUP_TEXT void helper_thread_init() {
  if (ready_) return;
  dl_iterate_phdr(record_object, nullptr);
  ready_ = nself_ > 0;
}

bool in_libc_text(uintptr_t addr) { return in(libc_, nlibc_, addr); }

bool helper_thread_caller_untestable() {
#if USLAB_NO_OVERRIDE
  return false;
#else
  return ready_ && in_executable_ && !libc::static_binary();
#endif
}

namespace {
// Whether this call may come from under one of libc's locks (helper_thread.h).
bool libc_may_be_caller() {
#if USLAB_NO_OVERRIDE
  return false;  // libc keeps its own malloc: it never calls this heap
#else
  if (helper_thread_caller_untestable()) return true;
  // One object holds libc and the program: the lock itself says whether this call
  // could come from under it (a held lock, ours or another thread's, waits a call).
  if (libc::static_binary()) return !libc::stack_cache_lock_free();
  uintptr_t ret = first_foreign_return();
  return ret == 0 || in_libc_text(ret);
#endif
}
}  // namespace

ThreadVeto helper_thread_veto() {
  if (!ready_) return ThreadVeto::kNotReady;
  if (libc_may_be_caller()) return ThreadVeto::kLibcCaller;
  if (seccomp_filtered()) return ThreadVeto::kSeccomp;
  return ThreadVeto::kNone;
}

const char* thread_veto_name(ThreadVeto v) {
  switch (v) {
    case ThreadVeto::kNone:
      return "none";
    case ThreadVeto::kNotReady:
      return "before the library's constructor";
    case ThreadVeto::kLibcCaller:
      return "called from inside libc";
    case ThreadVeto::kSeccomp:
      return "a seccomp filter is in force";
  }
  return "?";
}

int helper_thread_start(void* (*fn)(void*), const char* name) {
  // The thread takes no signal meant for the program: it inherits this mask.
  sigset_t all, old;
  sigfillset(&all);
  libc::signal_mask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  libc::attr_set_stack_size(&attr, 64 << 10);
  pthread_t t;
  int err = libc::thread_create(&t, &attr, fn, nullptr);
  pthread_attr_destroy(&attr);
  libc::signal_mask(SIG_SETMASK, &old, nullptr);
  // Named from here, so that it has its name by the time anyone can see it.
  if (!err) libc::set_thread_name(t, name);
  return err;
}

}  // namespace uslab::os
