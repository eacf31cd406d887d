// preload/prefixed.cc — the malloc family under uslab's own names (uslab_malloc,
// uslab_free...; include/uslab.h), for a program that links uslab beside the
// system's malloc: the Rust crate without its override feature calls these, and the
// standard names stay libc's. In libuslab.so they are the same heap as malloc.
//
// Owns: uslab_malloc, uslab_calloc, uslab_realloc, uslab_free, uslab_free_sized,
// uslab_aligned_alloc, uslab_aligned_alloc_zeroed, uslab_realloc_aligned,
// uslab_free_aligned_sized, uslab_malloc_usable_size. Semantics: preload/entry.h;
// the aligned calls take any power-of-two alignment (EINVAL otherwise).
// Locking: none here; everything goes through core/heap/heap.h.
#include <cstring>

#include "include/uslab.h"
#include "preload/entry.h"
#include "preload/export.h"

using namespace uslab;

extern "C" {

USLAB_EXPORT void* uslab_malloc(size_t size) { return heap::alloc<true>(size); }

USLAB_EXPORT void uslab_free(void* p) { heap::free<true>(p); }

USLAB_EXPORT void uslab_free_sized(void* p, size_t size) { heap::free_sized<true>(p, size); }

USLAB_EXPORT void* uslab_calloc(size_t n, size_t size) { return entry::calloc(n, size); }

USLAB_EXPORT void* uslab_realloc(void* p, size_t size) { return entry::realloc(p, size); }

USLAB_EXPORT void* uslab_aligned_alloc(size_t align, size_t size) {
  return entry::aligned_alloc(align, size);
}

USLAB_EXPORT void* uslab_aligned_alloc_zeroed(size_t align, size_t size) {
  if (!entry::is_pow2(align)) return entry::aligned_alloc(align, size);  // EINVAL
  // calloc's known-zero memory: of at least align bytes, it is aligned to it.
  if (align <= 16) return entry::calloc(1, size > align ? size : align);
  void* p = entry::aligned_alloc(align, size);
  if (p) memset(p, 0, size);
  return p;
}

USLAB_EXPORT void* uslab_realloc_aligned(void* p, size_t align, size_t size) {
  if (!entry::is_pow2(align)) {
    errno = EINVAL;
    return nullptr;
  }
  if (!p) return entry::aligned(align, size);
  void* q = heap::realloc_aligned(p, size, align);
  return q ? q : heap::fail_nomem();
}

USLAB_EXPORT void uslab_free_aligned_sized(void* p, size_t, size_t size) {
  heap::free_sized<true>(p, size);  // an alignment that changed the class takes free()
}

USLAB_EXPORT size_t uslab_malloc_usable_size(const void* p) { return entry::usable_size(p); }

}  // extern "C"
