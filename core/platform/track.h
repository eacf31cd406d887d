// core/platform/track.h — telling AddressSanitizer which of uslab's
// memory the program may touch.
//
// Owns: the calls made where memory changes hands, so that it reports a use
// after free, or an overflow into a free neighbour, of a uslab object as it would
// of one from its own allocator:
//   track_alloc(p, n)   n bytes at p handed to the program (malloc's return; p may
//                       be null, a failed allocation)
//   track_free(p, n)    n bytes at p taken back (free's entry, after validation)
//   track_open(p, n)    the allocator itself is about to write or read free memory
//                       (a constructor, a poison fill or check on a carved slab)
//   track_close(p, n)   ... and is done with it
//   track_unmap(p, n)   n bytes at p leave the address space (munmap, a moved
//                       mremap): whatever maps that range next starts clean
// In AddressSanitizer builds these poison and unpoison the shadow memory (memory is
// poisoned by 8-byte granules: objects and their sizes are multiples of 8; poisoning
// twice is harmless, so an object freed inside the allocator without having been
// handed out, as a sampled bulk allocation does, needs no care). In every other build
// they are empty and cost nothing: the fast paths call them unconditionally.
//
// Locking: none; each call touches only the sanitizer's own state for that range.
#pragma once

#include <cstddef>

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
#endif

namespace uslab {

#if USLAB_TRACK_ASAN
inline void track_alloc(const void* p, size_t n) {
  if (p) __asan_unpoison_memory_region(p, n);
}
inline void track_free(const void* p, size_t n) { __asan_poison_memory_region(p, n); }
inline void track_open(const void* p, size_t n) { __asan_unpoison_memory_region(p, n); }
inline void track_close(const void* p, size_t n) { __asan_poison_memory_region(p, n); }
inline void track_unmap(const void* p, size_t n) { __asan_unpoison_memory_region(p, n); }
#else
inline void track_alloc(const void*, size_t) {}
inline void track_free(const void*, size_t) {}
inline void track_open(const void*, size_t) {}
inline void track_close(const void*, size_t) {}
inline void track_unmap(const void*, size_t) {}
#endif

}  // namespace uslab
