// compat/jemalloc.cc — jemalloc's non-standard API, so programs and tools written for
// jemalloc run under uslab: mallocx, rallocx, xallocx, sallocx, dallocx, sdallocx,
// nallocx with the MALLOCX_LG_ALIGN / MALLOCX_ALIGN and MALLOCX_ZERO flags (tcache
// and arena flags are accepted and ignored: uslab has neither), and mallctl for a
// documented subset of names (see the README).
//
// Semantics follow jemalloc's manual: the *allocx functions do not set errno;
// rallocx leaves the old object valid when it fails; xallocx never moves; with
// MALLOCX_ZERO, a growing rallocx zeroes from the old usable size on.
// Locking: none here; see core/heap.h.
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/heap.h"
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

// mallctl helpers: copy a value out (EINVAL when the caller's length differs).
template <typename T>
int read_value(void* oldp, size_t* oldlenp, T value) {
  if (!oldp || !oldlenp) return 0;
  if (*oldlenp != sizeof(T)) {
    size_t n = *oldlenp < sizeof(T) ? *oldlenp : sizeof(T);
    memcpy(oldp, &value, n);
    *oldlenp = n;
    return EINVAL;
  }
  memcpy(oldp, &value, sizeof(T));
  return 0;
}

// mallctl's state: the epoch and the stats.* values as of its last write.
constinit Mutex g_ctl_lock;
uint64_t g_epoch = 1;
heap::Stats g_snapshot;

heap::Stats& snapshot() {
  static bool taken = false;
  if (!taken) {
    g_snapshot = heap::stats();
    taken = true;
  }
  return g_snapshot;
}

}  // namespace

extern "C" {

USLAB_EXPORT void* mallocx(size_t size, int flags) { return alloc_flags(size, flags); }

USLAB_EXPORT void* rallocx(void* p, size_t size, int flags) {
  size_t align = align_of(flags);
  size_t old = heap::usable_size(p);
  int saved = errno;
  void* q;
  if (align <= 16) {
    q = heap::realloc(p, size ? size : 1);
  } else if (reinterpret_cast<uintptr_t>(p) % align == 0 && heap::resize_in_place(p, size) >= size) {
    q = p;
  } else {
    q = heap::alloc_aligned(size, align);
    if (q) {
      memcpy(q, p, old < size ? old : size);
      heap::free(p);
    }
  }
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

USLAB_EXPORT void sdallocx(void* p, size_t, int) { heap::free(p); }

USLAB_EXPORT size_t nallocx(size_t size, int flags) {
  return heap::usable_size_for(size, align_of(flags));
}

// The subset of jemalloc's mallctl names that uslab answers (README, "jemalloc API").
USLAB_EXPORT int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp,
                         size_t newlen) {
  if (!name) return ENOENT;
  LockGuard g(g_ctl_lock);
  auto is = [name](const char* n) { return strcmp(name, n) == 0; };
  if (is("epoch")) {
    if (newp) {
      if (newlen != sizeof(uint64_t)) return EINVAL;
      g_epoch++;
      g_snapshot = heap::stats();
    }
    return read_value(oldp, oldlenp, g_epoch);
  }
  if (is("version")) {
    if (newp) return EPERM;
    return read_value(oldp, oldlenp, static_cast<const char*>("uslab-0.1.0"));
  }
  if (is("thread.tcache.flush") || is("arena.0.purge") || is("arena.4096.purge")) {
    if (oldp || newp) return EINVAL;
    if (name[0] == 't')
      heap::flush_thread_cache();
    else
      heap::trim();
    return 0;
  }
  const heap::Stats& st = snapshot();
  size_t value;
  if (is("stats.allocated"))
    value = st.allocated;
  else if (is("stats.active"))
    value = st.active;
  else if (is("stats.metadata"))
    value = st.metadata;
  else if (is("stats.resident"))
    value = st.resident;
  else if (is("stats.mapped"))
    value = st.mapped;
  else if (is("stats.retained"))
    value = 0;  // uslab unmaps what it does not keep
  else
    return ENOENT;
  if (newp) return EPERM;
  return read_value(oldp, oldlenp, value);
}

}  // extern "C"
