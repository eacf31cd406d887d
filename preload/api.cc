// preload/api.cc — the functions declared in include/uslab.h.
// Locking: none here; see core/heap.h.
#include "include/uslab.h"

#include "core/heap.h"
#include "preload/export.h"

extern "C" {

USLAB_EXPORT const char* uslab_version(void) { return USLAB_VERSION; }

USLAB_EXPORT void uslab_stats_print(void (*write_cb)(void*, const char*), void* opaque) {
  uslab::heap::stats_print(write_cb, opaque);
}

USLAB_EXPORT size_t uslab_trim(void) { return uslab::heap::trim(); }

}  // extern "C"
