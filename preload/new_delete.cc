// preload/new_delete.cc — every replaceable C++ operator new / operator delete.
//
// Owns: the 20 mangled entry points (plain, array, nothrow, sized, aligned, and their
// combinations, mimalloc#26/#863). Failure follows the standard: call the installed
// new-handler and retry; with none, the throwing forms throw std::bad_alloc and the
// nothrow forms return nullptr.
//
// libuslab.so must not depend on libstdc++ (C programs preload it too), so the two
// libstdc++ functions needed on the failure path are weak references resolved only
// when the program has libstdc++ loaded — which every program that calls operator
// new has. The exception thrown by std::__throw_bad_alloc unwinds through these
// frames by their unwind tables (-fasynchronous-unwind-tables); they hold nothing to
// clean up, so they need no personality routine and no -fexceptions.
//
// Sized deletes ignore the size: a wrong size from the caller cannot corrupt the heap.
// Locking: none here; see core/heap/heap.h.
#include <cerrno>
#include <cstddef>
#include <new>

#include "core/core.h"
#include "preload/export.h"

using namespace uslab;

using NewHandler = void (*)();
extern "C" {
NewHandler uslab_get_new_handler() __asm__("_ZSt15get_new_handlerv") __attribute__((weak));
[[noreturn]] void uslab_throw_bad_alloc() __asm__("_ZSt17__throw_bad_allocv") __attribute__((weak));
}

namespace {

// Hot: the plain operator new, one of the entry points that inline both forms of the
// per-CPU sections (heap.h).
template <bool Hot = false>
void* alloc_any(size_t size, size_t align) {
  return align <= 16 ? heap::alloc<Hot>(size) : heap::alloc_aligned(size, align);
}

// Returns memory, or nullptr when no new-handler is installed.
__attribute__((noinline)) void* retry_with_handler(size_t size, size_t align) {
  for (;;) {
    NewHandler h = uslab_get_new_handler ? uslab_get_new_handler() : nullptr;
    if (!h) {
      errno = ENOMEM;
      return nullptr;
    }
    h();
    if (void* p = alloc_any(size, align)) return p;
  }
}

__attribute__((noinline)) void* new_failed(size_t size, size_t align) {
  if (void* p = retry_with_handler(size, align)) return p;
  if (uslab_throw_bad_alloc) uslab_throw_bad_alloc();
  heap::die("operator new failed and std::bad_alloc is unavailable (no libstdc++)");
}

template <bool Hot = false>
inline void* new_throwing(size_t size, size_t align) {
  void* p = alloc_any<Hot>(size, align);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return new_failed(size, align);
}

inline void* new_nothrow(size_t size, size_t align) {
  void* p = alloc_any(size, align);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return retry_with_handler(size, align);
}

}  // namespace

#define AL(a) static_cast<size_t>(a)

USLAB_EXPORT void* operator new(size_t n) { return new_throwing<true>(n, 0); }
USLAB_EXPORT void* operator new[](size_t n) { return new_throwing<true>(n, 0); }
USLAB_EXPORT void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return new_nothrow(n, 0);
}
USLAB_EXPORT void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return new_nothrow(n, 0);
}
USLAB_EXPORT void* operator new(size_t n, std::align_val_t a) { return new_throwing(n, AL(a)); }
USLAB_EXPORT void* operator new[](size_t n, std::align_val_t a) { return new_throwing(n, AL(a)); }
USLAB_EXPORT void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_nothrow(n, AL(a));
}
USLAB_EXPORT void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return new_nothrow(n, AL(a));
}

USLAB_EXPORT void operator delete(void* p) noexcept { heap::free<true>(p); }
USLAB_EXPORT void operator delete[](void* p) noexcept { heap::free<true>(p); }
USLAB_EXPORT void operator delete(void* p, size_t n) noexcept { heap::free_sized<true>(p, n); }
USLAB_EXPORT void operator delete[](void* p, size_t n) noexcept {
  heap::free_sized<true>(p, n);
}
USLAB_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { heap::free(p); }
USLAB_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { heap::free(p); }
USLAB_EXPORT void operator delete(void* p, std::align_val_t) noexcept { heap::free(p); }
USLAB_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { heap::free(p); }
USLAB_EXPORT void operator delete(void* p, size_t, std::align_val_t) noexcept { heap::free(p); }
USLAB_EXPORT void operator delete[](void* p, size_t, std::align_val_t) noexcept { heap::free(p); }
USLAB_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  heap::free(p);
}
USLAB_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  heap::free(p);
}
