// preload/api.cc — the functions declared in include/uslab.h.
// Locking: none here; see core/heap/heap.h.
#include "include/uslab.h"

#include <cerrno>
#include <cstring>

#include "core/core.h"
#include "preload/export.h"

extern "C" {

USLAB_EXPORT const char* uslab_version(void) { return USLAB_VERSION; }

USLAB_EXPORT void uslab_stats_print(void (*write_cb)(void*, const char*), void* opaque) {
  uslab::heap::stats_print(write_cb, opaque);
}

USLAB_EXPORT void uslab_stats_print_json(void (*write_cb)(void*, const char*), void* opaque) {
  uslab::heap::stats_print_json(write_cb, opaque);
}

USLAB_EXPORT size_t uslab_stats_json(char* buf, size_t size) {
  struct Out {
    char* buf;
    size_t size, len;
  } out{buf, size, 0};
  uslab::heap::stats_print_json(
      [](void* o, const char* text) {
        auto& d = *static_cast<Out*>(o);
        for (; *text; text++, d.len++)
          if (d.len + 1 < d.size) d.buf[d.len] = *text;
      },
      &out);
  if (size) buf[out.len < size ? out.len : size - 1] = 0;
  return out.len;
}

USLAB_EXPORT void uslab_topology_print(void (*write_cb)(void*, const char*), void* opaque) {
  uslab::heap::topology_print(write_cb, opaque);
}

USLAB_EXPORT size_t uslab_trim(void) { return uslab::heap::trim(); }

USLAB_EXPORT int uslab_prof_dump(const char* path) { return uslab::prof::dump(path); }

USLAB_EXPORT int uslab_stats_get(uslab_stats_t* out, size_t size) {
  if (!out || size == 0 || size > sizeof(uslab_stats_t)) {
    errno = EINVAL;
    return -1;
  }
  uslab::heap::Stats st = uslab::heap::stats();
  uslab_stats_t s = {};
  s.allocated = st.allocated;
  s.active = st.active;
  s.resident = st.resident;
  s.mapped = st.mapped;
  s.metadata = st.metadata;
  s.cached = st.cached();
  s.returned = st.purged_bytes;
  s.mode = static_cast<unsigned>(uslab::heap::mode());
  s.cpus = uslab::heap::cpus_in_use();
  uslab::heap::DeferredStats d = uslab::heap::deferred_stats();
  s.deferred_objects = d.objects_pending;
  s.deferred_bytes = d.bytes_waiting;
  s.deferred_blocks = d.blocks;
  s.grace_periods = d.grace_periods;
  s.deferred_batches = d.batches_freed;
  s.nodes = st.nodes;
  s.remote_node_frees = st.remote_node_frees;
  s.remote_node_pending = st.remote_node_pending;
  s.background = st.background;
  s.thp_segments = st.huge_segments;
  s.thp_splits = st.thp_splits;
  s.thp_collapses = st.thp_collapses;
  s.thp_kept = st.thp_kept_bytes;
  const uslab::guard::Stats g = uslab::guard::stats();
  s.guarded_allocations = g.allocations;
  s.guarded_live = g.live;
  s.guarded_freed = g.quarantined;
  s.guarded_reports = g.reports;
  memcpy(out, &s, size);
  return 0;
}

namespace {
uslab::ObjCache* of(uslab_cache_t* c) { return reinterpret_cast<uslab::ObjCache*>(c); }
}  // namespace

USLAB_EXPORT uslab_cache_t* uslab_cache_create(const char* name, size_t size, size_t align,
                                               unsigned flags, void (*ctor)(void*)) {
  return reinterpret_cast<uslab_cache_t*>(
      uslab::heap::cache_create(name, size, align, flags, ctor));
}

USLAB_EXPORT void* uslab_cache_alloc(uslab_cache_t* cache) {
  return cache ? uslab::heap::cache_alloc(of(cache)) : nullptr;
}

USLAB_EXPORT void uslab_cache_free(uslab_cache_t* cache, void* obj) {
  if (cache) uslab::heap::cache_free(of(cache), obj);
}

USLAB_EXPORT size_t uslab_cache_alloc_bulk(uslab_cache_t* cache, size_t n, void** out) {
  return cache ? uslab::heap::cache_alloc_bulk(of(cache), n, out) : 0;
}

USLAB_EXPORT void uslab_cache_free_bulk(uslab_cache_t* cache, size_t n, void** objs) {
  if (cache) uslab::heap::cache_free_bulk(of(cache), n, objs);
}

USLAB_EXPORT void uslab_cache_destroy(uslab_cache_t* cache) {
  uslab::heap::cache_destroy(of(cache));
}

USLAB_EXPORT size_t uslab_alloc_bulk(size_t size, size_t n, void** out) {
  return uslab::heap::alloc_bulk(size, n, out);
}

USLAB_EXPORT void uslab_free_bulk(size_t n, void** ptrs) { uslab::heap::free_bulk(n, ptrs); }

USLAB_EXPORT void uslab_read_lock(void) { uslab::heap::read_lock(); }
USLAB_EXPORT void uslab_read_unlock(void) { uslab::heap::read_unlock(); }
USLAB_EXPORT void uslab_free_deferred(void* ptr) { uslab::heap::free_deferred(ptr); }
USLAB_EXPORT void uslab_synchronize(void) { uslab::heap::synchronize(); }
USLAB_EXPORT void uslab_deferred_barrier(void) { uslab::heap::deferred_barrier(); }

}  // extern "C"
