// core/platform/track.h — telling AddressSanitizer and Valgrind's Memcheck which of
// uslab's memory the program holds.
//
// Owns: the calls made where memory changes hands, so that these tools report a use
// after free, an overflow into a free neighbour, or (Memcheck) a leak or a read of
// uninitialised memory of a uslab object as they would of one from their own heap:
//   track_alloc(p, n, defined)  n bytes at p handed to the program (malloc's return;
//                               p may be null, a failed allocation); `defined` when
//                               their contents are (zeroed, or built by a cache's
//                               constructor)
//   track_free(p, n)            the object at p (n bytes) taken back (free's entry,
//                               after validation); it must have been handed out
//   track_resize(p, old, n)     an object handed out resized in place to n bytes
//   track_move(old, p, n)       an object moved to p by mremap (its pages, defined)
//   track_open(p, n)            the allocator itself is about to write or read free
//                               memory (a constructor, a poison fill or check)
//   track_close(p, n)           ... and is done with it; also a slab when carved
//   track_unmap(p, n)           n bytes at p leave the address space (munmap, a moved
//                               or shrunk mremap): whatever maps that range next
//                               starts clean
//   track_stale(p, n)           n bytes of the allocator's own that still hold
//                               pointers to objects it handed out (a cache slot
//                               popped): Memcheck's leak check must not count them
//   zero_unseen(p, n)           zeros written over n bytes at p, free or the
//                               allocator's own, where a purge the kernel refused
//                               should have left them (os::purge_zeroing): the tools
//                               see no access, and keep their view of the range
// AddressSanitizer builds poison and unpoison its shadow memory (8-byte granules:
// objects and their sizes are multiples of 8). Valgrind builds (meson
// -Dvalgrind=true) make Memcheck's client requests: objects are malloc-like blocks,
// free memory is no-access. Every other build gets empty functions: the fast paths
// call them unconditionally and pay nothing.
//
// Locking: none; each call touches only the tool's own state for that range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__) || defined(__has_feature)
#if defined(__SANITIZE_ADDRESS__)
#define USLAB_TRACK_ASAN 1
#elif __has_feature(address_sanitizer)
#define USLAB_TRACK_ASAN 1
#endif
#endif

#if USLAB_TRACK_ASAN
extern "C" void __asan_poison_memory_region(void const volatile* addr, size_t size);
extern "C" void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
#elif USLAB_VALGRIND
#include <valgrind/memcheck.h>
#endif

namespace uslab {

#if USLAB_TRACK_ASAN
inline void track_alloc(const void* p, size_t n, bool = false) {
  if (p) __asan_unpoison_memory_region(p, n);
}
inline void track_free(const void* p, size_t n) { __asan_poison_memory_region(p, n); }
inline void track_resize(const void* p, size_t, size_t n) { __asan_unpoison_memory_region(p, n); }
inline void track_move(const void*, const void* p, size_t n) {
  __asan_unpoison_memory_region(p, n);
}
inline void track_open(const void* p, size_t n) { __asan_unpoison_memory_region(p, n); }
inline void track_close(const void* p, size_t n) { __asan_poison_memory_region(p, n); }
inline void track_unmap(const void* p, size_t n) { __asan_unpoison_memory_region(p, n); }
inline void track_stale(const void*, size_t) {}
#elif USLAB_VALGRIND
inline void track_alloc(const void* p, size_t n, bool defined = false) {
  if (p) VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, defined);
}
inline void track_free(const void* p, size_t) { VALGRIND_FREELIKE_BLOCK(p, 0); }
inline void track_resize(const void* p, size_t old, size_t n) {
  VALGRIND_RESIZEINPLACE_BLOCK(p, old, n, 0);
}
inline void track_move(const void* old, const void* p, size_t n) {
  VALGRIND_FREELIKE_BLOCK(old, 0);
  VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, 1);
}
// The allocator reads what it wrote itself (poison) or writes (constructors).
inline void track_open(const void* p, size_t n) { VALGRIND_MAKE_MEM_DEFINED(p, n); }
inline void track_close(const void* p, size_t n) { VALGRIND_MAKE_MEM_NOACCESS(p, n); }
inline void track_unmap(const void*, size_t) {}  // Memcheck follows munmap and mremap
inline void track_stale(const void* p, size_t n) { VALGRIND_MAKE_MEM_UNDEFINED(p, n); }
#endif

#if USLAB_TRACK_ASAN
// Stores ASan does not check (a memset would be, in its interceptor); p and n are
// whole pages.
__attribute__((no_sanitize("address"))) inline void zero_unseen(void* p, size_t n) {
  volatile uint64_t* w = static_cast<volatile uint64_t*>(p);
  for (size_t i = 0; i < n / sizeof(uint64_t); i++) w[i] = 0;
}
#elif USLAB_VALGRIND
inline void zero_unseen(void* p, size_t n) {
  VALGRIND_DISABLE_ERROR_REPORTING;
  memset(p, 0, n);
  VALGRIND_ENABLE_ERROR_REPORTING;
}
#else
inline void zero_unseen(void* p, size_t n) { memset(p, 0, n); }
#endif

#if !USLAB_TRACK_ASAN && !USLAB_VALGRIND
inline void track_alloc(const void*, size_t, bool = false) {}
inline void track_free(const void*, size_t) {}
inline void track_resize(const void*, size_t, size_t) {}
inline void track_move(const void*, const void*, size_t) {}
inline void track_open(const void*, size_t) {}
inline void track_close(const void*, size_t) {}
inline void track_unmap(const void*, size_t) {}
inline void track_stale(const void*, size_t) {}
#endif

}  // namespace uslab
