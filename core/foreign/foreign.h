// core/foreign/foreign.h — pointers uslab did not hand out, reaching free, realloc or
// malloc_usable_size legitimately: blocks of glibc's malloc, which a library opened
// with RTLD_DEEPBIND calls (its references bind to libc first), or which some
// launchers make before a preload takes over.
//
// Owns: the decision for such a pointer (USLAB_CONF foreign_free): `forward` (the
// default) hands a pointer that looks like a block of glibc's malloc to glibc's own
// free / malloc_usable_size (looked up by the library's constructor, outside any
// lock) and counts it; anything else, and every foreign pointer with `report` or
// `abort`, is reported as before (with `report` the program goes on, the block
// leaked). Pointers inside uslab's own memory never come here: an interior, double
// or freed object there is still reported and aborts.
//
// Whether a pointer looks like glibc's is the owns hook's answer (the library's
// constructor passes glibc_chunk.h's, which reads glibc's chunk layout).
//
// Locking: none; the hooks are set once before threads exist, the counter is atomic.
#pragma once

#include <cstddef>

namespace uslab::foreign {

struct Hooks {
  void (*free)(void*);
  size_t (*usable_size)(void*);
  bool (*owns)(const void* p);  // p looks like a block of glibc's malloc
};
// From the library's constructor (preload/init.cc): glibc's functions and the test.
void set_hooks(const Hooks& hooks);

// free(p) for a pointer with no uslab span: forwarded, or reported.
void free(void* p);
// The usable size of such a pointer when it is forwarded (0: it is not: reported).
size_t usable_size(const void* p);
// Frees forwarded to glibc so far.
size_t forwarded();

}  // namespace uslab::foreign
