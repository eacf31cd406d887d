// core/foreign.h — pointers uslab did not hand out, reaching free, realloc or
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
// "Looks like glibc's": 16-byte aligned, and its chunk header (read with a system
// call that fails instead of faulting) is either an mmapped chunk's (page-aligned
// mapping, sizes in whole pages) or an arena chunk's lying in the main arena's brk
// heap (between the program break at start-up and the current one) or in a
// non-main arena's 64 MiB heap. A stray pointer rarely passes; one that did would
// go to glibc, which checks it again.
//
// Locking: none; the hooks are set once before threads exist, the counter is atomic.
#pragma once

#include <cstddef>

namespace uslab::foreign {

struct Hooks {
  void (*free)(void*);
  size_t (*usable_size)(void*);
};
// From the library's constructor (preload/init.cc): glibc's functions, and the
// program break before anything allocated with brk.
void set_hooks(const Hooks& hooks, const void* initial_break);

// free(p) for a pointer with no uslab span: forwarded, or reported.
void free(void* p);
// The usable size of such a pointer when it is forwarded (0: it is not: reported).
size_t usable_size(const void* p);
// Frees forwarded to glibc so far.
size_t forwarded();

}  // namespace uslab::foreign
