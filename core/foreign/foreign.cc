// core/foreign.cc — pointers from glibc's malloc (foreign.h). Locking: none; see
// foreign.h.
#include "core/foreign/foreign.h"

#include <atomic>
#include <cstdint>

#include "core/alloc/alloc.h"

namespace uslab::foreign {

namespace {

Hooks g_hooks{};
std::atomic<size_t> g_forwarded{0};

bool looks_like_glibc(const void* p) { return g_hooks.free && g_hooks.owns && g_hooks.owns(p); }

}  // namespace

USLAB_STARTUP_TEXT void set_hooks(const Hooks& hooks) { g_hooks = hooks; }

void free(void* p) {
  switch (g_config.foreign_free) {
    case Config::ForeignFree::kForward:
      if (!looks_like_glibc(p)) break;
      g_forwarded.fetch_add(1, std::memory_order_relaxed);
      return g_hooks.free(p);
    case Config::ForeignFree::kReport:
      os::print_stderr(
          "uslab: free of %p, not allocated by uslab: left alone (foreign_free=report)\n", p);
      return;
    case Config::ForeignFree::kAbort:
      break;
  }
  report_bad_free(p, "free of invalid pointer", 0);
}

size_t usable_size(const void* p) {
  if (g_config.foreign_free == Config::ForeignFree::kForward && g_hooks.usable_size &&
      looks_like_glibc(p))
    return g_hooks.usable_size(const_cast<void*>(p));
  return 0;
}

size_t forwarded() { return g_forwarded.load(std::memory_order_relaxed); }

}  // namespace uslab::foreign
