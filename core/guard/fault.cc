// core/guard/fault.cc — the fault handler of the guarded pool and its reports (guard.h).
// Locking: none taken in the handler but the stack capture's (tried, never waited
// for: the faulting thread may hold it); slots are read as guard.h says. Nothing here
// allocates: reports are formatted on the stack and written with write(2), names come
// from a Symbolizer, which maps what it reads.
#include <signal.h>
#include <ucontext.h>

#include <cstring>

#include "core/guard/guard.h"
#include "core/prof/symbolize.h"

namespace uslab::guard::internal {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS};
// The actions the handler replaced, by signal (what a fault outside the pool gets).
struct sigaction g_prev[2];
bool g_installed = false;

void on_fault(int sig, siginfo_t* info, void* uctx);

bool ours(const struct sigaction& sa) {
  return (sa.sa_flags & SA_SIGINFO) && sa.sa_sigaction == on_fault;
}

// The slot whose object an access at `a` concerns: the slot it lies in, or, in the
// guard after a slot's area, the live object nearer to it: that slot's (an overflow)
// or the next one's, when that starts at its slot's start (an underflow: an object
// that fills its area's last OS page does with 64 KiB pages). kNone outside the pool.
uint32_t slot_at(uintptr_t a) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(__atomic_load_n(&g_pool.base, __ATOMIC_ACQUIRE));
  if (base && a < base && base - a <= page_granule()) return 0;  // the guard before slot 0
  if (!in_pool(reinterpret_cast<const void*>(a))) return kNone;
  const uint32_t i =
      static_cast<uint32_t>((a - reinterpret_cast<uintptr_t>(g_pool.base)) / slot_bytes());
  if (a < reinterpret_cast<uintptr_t>(area_end(i)) || i + 1 >= g_pool.count) return i;
  auto live = [](const Slot& s) { return s.state.load(std::memory_order_acquire) == SlotState::kLive; };
  const Slot &s = g_pool.slots[i], &n = g_pool.slots[i + 1];
  if (!live(n)) return i;
  const uintptr_t next = reinterpret_cast<uintptr_t>(n.object) - a;
  return live(s) && a - (reinterpret_cast<uintptr_t>(s.object) + s.size) <= next ? i : i + 1;
}

// Passes a fault outside the pool on as if the handler were not there.
void chain(int sig, siginfo_t* info, void* uctx) {
  const struct sigaction& prev = g_prev[sig == SIGBUS];
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) return prev.sa_sigaction(sig, info, uctx);
  if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN)
    return prev.sa_handler(sig);
  // The default action: a fault repeats when the handler returns, now without it; a
  // signal sent by kill or raise is sent again.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  if (info->si_code <= 0) raise(sig);
}

// Whether the access that faulted was a write. x86-64: the page fault's error code;
// aarch64: the WnR bit (6) of a data abort's syndrome (EC 0x24 or 0x25), which the
// kernel leaves among the records of the signal frame (esr_context, ESR_MAGIC).
bool fault_was_write(const ucontext_t* uc) {
#if defined(__x86_64__)
  return uc->uc_mcontext.gregs[REG_ERR] & 2;
#elif defined(__aarch64__)
  constexpr uint32_t kEsrMagic = 0x45535201;
  const unsigned char* p = uc->uc_mcontext.__reserved;
  const unsigned char* const end = p + sizeof uc->uc_mcontext.__reserved;
  while (p + 8 <= end) {
    uint32_t magic, size;
    __builtin_memcpy(&magic, p, 4);
    __builtin_memcpy(&size, p + 4, 4);
    if (magic == 0 || size < 8 || size > static_cast<size_t>(end - p)) return false;
    if (magic == kEsrMagic && size >= 16) {
      uint64_t esr;
      __builtin_memcpy(&esr, p + 8, 8);
      const uint64_t ec = esr >> 26 & 0x3f;
      return (ec == 0x24 || ec == 0x25) && (esr >> 6 & 1);
    }
    p += size;
  }
  return false;
#else
  (void)uc;
  return false;
#endif
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  const uint32_t i = info->si_code > 0 ? slot_at(a) : kNone;
  if (i == kNone) return chain(sig, info, uctx);
  Slot& s = g_pool.slots[i];
  const SlotState state = s.state.load(std::memory_order_acquire);
  const bool write = fault_was_write(static_cast<const ucontext_t*>(uctx));
  // A fault in a slot never used, or already reported and opened, is not ours to
  // explain (a wild pointer into the pool): reported as such.
  const char* what;
  const uintptr_t obj = reinterpret_cast<uintptr_t>(s.object);
  if (state == SlotState::kFreed || state == SlotState::kFreeing)
    what = write ? "use after free (write)" : "use after free (read)";
  else if (state != SlotState::kLive)
    what = write ? "wild write into the guarded pool" : "wild read of the guarded pool";
  else if (a >= obj + s.size)
    what = write ? "overflow (write)" : "overflow (read)";
  else
    what = write ? "underflow (write)" : "underflow (read)";
  // The access's stack from the faulting instruction on (the unwinder passes the
  // signal frame; what is before it is the handler's), unless this thread holds the
  // unwinder's lock.
  prof::Stack access;
  access.depth = 0;
  if (prof::g_capture_lock.try_lock()) {
    prof::g_capture_lock.unlock();
    prof::stack_capture(&access);
  }
#if defined(__x86_64__)
  const auto* uc = reinterpret_cast<ucontext_t*>(uctx);
  const auto pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  for (unsigned k = 0; k < access.depth; k++)
    if (access.frames[k] == pc) {
      access.depth -= k;
      memmove(access.frames, access.frames + k, access.depth * sizeof access.frames[0]);
      break;
    }
#endif
  report(i, what, a, &access);
  if (!g_config.guard_recover) os::fatal("uslab: aborting at a guarded object's fault\n");
  // Recoverable: the slot stays open for good (reported once) and the access is
  // retried; a live object's later free is the program's, not another error.
  s.state.store(state == SlotState::kLive ? SlotState::kOpened : SlotState::kBurned,
                std::memory_order_release);
  set_access(slot_base(i), slot_bytes(), true);
}

void print_stack(prof::Symbolizer& sym, const char* title, uint32_t tid,
                 const prof::Stack& st) {
  if (tid)
    os::print_stderr("  %s by thread %u:\n", title, tid);
  else
    os::print_stderr("  %s:\n", title);
  if (st.depth == 0) os::print_stderr("    (no stack)\n");
  for (unsigned k = 0; k < st.depth; k++) {
    // A return address: the call is the instruction before it (the faulting pc
    // itself lies in the same function).
    const uintptr_t pc = st.frames[k] - 1;
    const char* fn = sym.function_of(pc);
    const long m = sym.mapping_of(pc);
    os::print_stderr("    #%u 0x%lx %s (%s)\n", k, static_cast<unsigned long>(st.frames[k]),
                     fn ? fn : "??", m >= 0 ? sym.mapping(static_cast<size_t>(m)).path : "?");
  }
}

}  // namespace

void install_handler() {
  struct sigaction cur;
  if (__atomic_load_n(&g_installed, __ATOMIC_ACQUIRE) && sigaction(SIGSEGV, nullptr, &cur) == 0 &&
      ours(cur) && sigaction(SIGBUS, nullptr, &cur) == 0 && ours(cur))
    return;
  for (int k = 0; k < 2; k++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    struct sigaction prev;
    if (sigaction(kSignals[k], &sa, &prev) == 0 && !ours(prev)) g_prev[k] = prev;
  }
  __atomic_store_n(&g_installed, true, __ATOMIC_RELEASE);
}

void report(uint32_t i, const char* what, uintptr_t addr, const prof::Stack* access) {
  __atomic_add_fetch(&g_pool.reports, 1, __ATOMIC_RELAXED);
  g_bad_free_reports.fetch_add(1, std::memory_order_relaxed);
  const Slot& s = g_pool.slots[i];
  const uintptr_t obj = reinterpret_cast<uintptr_t>(s.object);
  const long off = static_cast<long>(addr - obj);
  const long n = off < 0 ? -off : off < s.size ? off : off - static_cast<long>(s.size);
  char kind[24] = "large";
  if (s.cls) os::format(kind, sizeof kind, "size class %u", s.cls);
  os::print_stderr("uslab: guarded object: %s at %p: %ld byte%s %s the %u-byte object at %p"
                   " (%s)\n",
                   what, reinterpret_cast<void*>(addr), n, n == 1 ? "" : "s",
                   off < 0 ? "before" : off < s.size ? "inside" : "past the end of", s.size,
                   s.object, kind);
  prof::Symbolizer sym;
  if (access) print_stack(sym, "at", 0, *access);
  print_stack(sym, "allocated", s.alloc_tid, s.alloc_stack);
  if (s.free_stack.depth || s.free_tid) print_stack(sym, "freed", s.free_tid, s.free_stack);
}

}  // namespace uslab::guard::internal
