// core/foreign/glibc_chunk.h — whether a pointer is a block of glibc's own malloc, read
// from glibc's chunk layout (malloc/malloc.c), for the blocks that reach uslab's free
// (foreign.h decides what to do with them).
//
// "Looks like glibc's": 16-byte aligned, and its chunk header (read with a system
// call that fails instead of faulting) is either an mmapped chunk's (page-aligned
// mapping, sizes in whole pages) or an arena chunk's lying in the main arena's brk
// heap (between the program break at start-up and the current one) or in a
// non-main arena's 64 MiB heap. A stray pointer rarely passes; one that did would go
// to glibc, which checks it again.
//
// Locking: none; the start-up break is set once, before threads exist.
#pragma once

namespace uslab::foreign {

// The program break at start-up, before glibc's malloc could move it (the library's
// constructor).
void glibc_chunks_init(const void* initial_break);
bool is_glibc_block(const void* p);

}  // namespace uslab::foreign
