// preload/entry.h — the semantics of the C allocation calls, shared by the standard
// names (shim.cc) and uslab's own (prefixed.cc): glibc's where the C standard leaves
// room. malloc(0) returns a unique pointer, realloc(p, 0) frees and returns NULL,
// failures set errno = ENOMEM, an alignment that is not a power of two is EINVAL.
// Locking: none here; everything goes through core/heap/heap.h.
#pragma once

#include <cerrno>
#include <cstddef>

#include "core/core.h"

namespace uslab::entry {

inline bool is_pow2(size_t x) { return x && (x & (x - 1)) == 0; }

inline void* calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) return heap::fail_nomem();
  void* p = heap::alloc_zeroed(total);
  return p ? p : heap::fail_nomem();
}

inline void* realloc(void* p, size_t size) {
  // malloc's inline fast path: Lua's allocator makes every object with realloc(NULL, n).
  if (!p) return heap::alloc(size);
  void* q = heap::realloc(p, size);
  if (q || size == 0) return q;
  return heap::fail_nomem();
}

inline void* aligned(size_t align, size_t size) {
  void* p = heap::alloc_aligned(size, align);
  return p ? p : heap::fail_nomem();
}

inline void* aligned_alloc(size_t align, size_t size) {
  if (!is_pow2(align)) {
    errno = EINVAL;
    return nullptr;
  }
  return aligned(align, size);
}

inline size_t usable_size(const void* p) { return p ? heap::usable_size(p) : 0; }

}  // namespace uslab::entry
