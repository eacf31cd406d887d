// compat/jemalloc.cc — jemalloc's non-standard API, so programs and tools written for
// jemalloc run under uslab: mallocx, rallocx, xallocx, sallocx, dallocx, sdallocx,
// nallocx with the MALLOCX_LG_ALIGN / MALLOCX_ALIGN and MALLOCX_ZERO flags (tcache
// and arena flags are accepted and ignored: uslab has neither). mallctl is in
// compat/mallctl.cc.
//
// Semantics follow jemalloc's manual: the *allocx functions do not set errno;
// rallocx leaves the old object valid when it fails; xallocx never moves; with
// MALLOCX_ZERO, a growing rallocx zeroes from the old usable size on.
// Locking: none here; see core/heap/heap.h.
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/core.h"
#include "preload/export.h"

using namespace uslab;

namespace {

constexpr int kLgAlignMask = 0x3f;
constexpr int kZero = 0x40;

size_t align_of(int flags) {
  int lg = flags & kLgAlignMask;
  return lg ? size_t{1} << lg : 1;
}

// Allocation of size bytes with flags' alignment and zeroing (of the whole usable
// size, as a later growing rallocx relies on); errno is kept.
void* alloc_flags(size_t size, int flags) {
  int saved = errno;
  size_t align = align_of(flags);
  bool zeroed = (flags & kZero) && align <= 16;
  void* p = zeroed ? heap::alloc_zeroed(size) : heap::alloc_aligned(size, align);
  if (p && (flags & kZero)) {
    size_t from = zeroed ? size : 0;  // alloc_zeroed cleared the first size bytes
    memset(static_cast<char*>(p) + from, 0, heap::usable_size(p) - from);
  }
  errno = saved;
  return p;
}

}  // namespace

extern "C" {

USLAB_EXPORT void* mallocx(size_t size, int flags) { return alloc_flags(size, flags); }

USLAB_EXPORT void* rallocx(void* p, size_t size, int flags) {
  size_t align = align_of(flags);
  size_t old = heap::usable_size(p);
  int saved = errno;
  void* q = heap::realloc_aligned(p, size, align);
  errno = saved;
  if (q && (flags & kZero)) {
    size_t now = heap::usable_size(q);
    if (now > old) memset(static_cast<char*>(q) + old, 0, now - old);
  }
  return q;
}

USLAB_EXPORT size_t xallocx(void* p, size_t size, size_t extra, int flags) {
  size_t old = heap::usable_size(p);
  size_t want = size + extra < size ? SIZE_MAX : size + extra;
  size_t now = heap::resize_in_place(p, want);
  if (now < size) now = heap::resize_in_place(p, size);
  if ((flags & kZero) && now > old) memset(static_cast<char*>(p) + old, 0, now - old);
  return now;
}

USLAB_EXPORT size_t sallocx(const void* p, int) { return heap::usable_size(p); }

USLAB_EXPORT void dallocx(void* p, int) { heap::free(p); }

USLAB_EXPORT void sdallocx(void* p, size_t size, int) { heap::free_sized(p, size); }

USLAB_EXPORT size_t nallocx(size_t size, int flags) {
  return heap::usable_size_for(size, align_of(flags));
}

}  // extern "C"
