// preload/export.h — marks the symbols libuslab.so exports (everything else is
// built with -fvisibility=hidden so internal calls bind locally), and names the
// hidden aliases of its own entry points that the library calls itself.
#pragma once

#define USLAB_EXPORT __attribute__((visibility("default")))

#include <cstddef>

// uslab's own entry points under hidden names, for the library's own calls
// (reallocarray's realloc, the constructor's test of which free dlsym found): an
// exported name is reached through a GOT slot, which ld.so fills with a symbol
// lookup in every process at start-up. Defined in shim.cc as aliases.
extern "C" {
__attribute__((visibility("hidden"))) void* uslab_own_realloc(void* p, size_t size);
__attribute__((visibility("hidden"))) void uslab_own_free(void* p);
__attribute__((visibility("hidden"))) size_t uslab_own_usable_size(void* p);
}
