// preload/shim.cc — the C allocation API that LD_PRELOAD interposes.
//
// Owns: malloc, free, calloc, realloc, reallocarray, posix_memalign, aligned_alloc,
// memalign, valloc, pvalloc, malloc_usable_size, cfree, C23's free_sized and
// free_aligned_sized, and glibc's __libc_* entry points (aliases, so code bound to
// them — static links, RTLD_DEEPBIND users, glibc internals — lands in the same heap:
// rpmalloc#374, jemalloc#481; not in the musl build).
// Their semantics are preload/entry.h's (glibc's); free preserves errno,
// posix_memalign returns EINVAL for a bad alignment. uslab_malloc and the other names
// of include/uslab.h are prefixed.cc's.
//
// Locking: none here; everything goes through core/heap/heap.h.
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "core/core.h"
#include "preload/entry.h"
#include "preload/export.h"

using namespace uslab;
using entry::aligned;
using entry::is_pow2;

extern "C" {

USLAB_EXPORT void* malloc(size_t size) { return heap::alloc<true>(size); }

USLAB_EXPORT void free(void* p) { heap::free<true>(p); }

USLAB_EXPORT void cfree(void* p) { heap::free(p); }

USLAB_EXPORT void* calloc(size_t n, size_t size) { return entry::calloc(n, size); }

USLAB_EXPORT void* realloc(void* p, size_t size) { return entry::realloc(p, size); }

USLAB_EXPORT void* reallocarray(void* p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) return heap::fail_nomem();
  return uslab_own_realloc(p, total);
}

USLAB_EXPORT int posix_memalign(void** out, size_t align, size_t size) {
  if (!is_pow2(align) || align % sizeof(void*) != 0) return EINVAL;
  void* p = heap::alloc_aligned(size, align);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

USLAB_EXPORT void* aligned_alloc(size_t align, size_t size) {
  return entry::aligned_alloc(align, size);
}

USLAB_EXPORT void* memalign(size_t align, size_t size) {
  // glibc rounds a non-power-of-two alignment up to the next power of two.
  if (!is_pow2(align)) {
    if (align > (SIZE_MAX >> 1) + 1) return heap::fail_nomem();
    size_t a = 1;
    while (a < align) a <<= 1;
    align = a;
  }
  return aligned(align, size);
}

USLAB_EXPORT void* valloc(size_t size) { return aligned(heap::system_page(), size); }

USLAB_EXPORT void* pvalloc(size_t size) {
  const size_t page = heap::system_page();
  size_t rounded = (size + page - 1) & ~(page - 1);
  if (rounded < size) return heap::fail_nomem();
  return aligned(page, rounded ? rounded : page);
}

USLAB_EXPORT size_t malloc_usable_size(void* p) { return entry::usable_size(p); }

USLAB_EXPORT void free_sized(void* p, size_t size) { heap::free_sized(p, size); }

USLAB_EXPORT void free_aligned_sized(void* p, size_t, size_t size) {
  heap::free_sized(p, size);  // an alignment that changed the class takes free()
}

void* uslab_own_realloc(void*, size_t)
    __attribute__((alias("realloc"), copy(realloc), visibility("hidden")));
void uslab_own_free(void*) __attribute__((alias("free"), copy(free), visibility("hidden")));
size_t uslab_own_usable_size(void*)
    __attribute__((alias("malloc_usable_size"), copy(malloc_usable_size), visibility("hidden")));

#ifdef __GLIBC__
// glibc-internal names (musl's are its own, hidden).
USLAB_EXPORT void* __libc_malloc(size_t) __attribute__((alias("malloc"), copy(malloc)));
USLAB_EXPORT void __libc_free(void*) __attribute__((alias("free"), copy(free)));
USLAB_EXPORT void* __libc_calloc(size_t, size_t) __attribute__((alias("calloc"), copy(calloc)));
USLAB_EXPORT void* __libc_realloc(void*, size_t) __attribute__((alias("realloc"), copy(realloc)));
USLAB_EXPORT void* __libc_memalign(size_t, size_t)
    __attribute__((alias("memalign"), copy(memalign)));
USLAB_EXPORT void* __libc_valloc(size_t) __attribute__((alias("valloc"), copy(valloc)));
USLAB_EXPORT void* __libc_pvalloc(size_t) __attribute__((alias("pvalloc"), copy(pvalloc)));
USLAB_EXPORT int __posix_memalign(void**, size_t, size_t)
    __attribute__((alias("posix_memalign"), copy(posix_memalign)));
#endif

}  // extern "C"
