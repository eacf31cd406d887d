// core/prof/write.h — the heap profiler's files: pprof's profile.proto and folded
// stacks.
//
// Owns: the encoding. profile.proto is the format Go's pprof reads (`pprof -top`, `-svg`, `-http`),
// uncompressed (pprof takes it as it is), with the sample types Go's heap profiles have
// (alloc_objects, alloc_space, inuse_objects, inuse_space; the default inuse_space), the loaded
// objects as mappings (path, build id), one location per address with its function where the symbol
// tables name it (symbolize.h), and labels per sample: "allocator" (the function the innermost
// frame called: malloc, operator new, uslab_cache_alloc..., read from its call instruction),
// "class" (the size class's size, or the object cache's name) and "bytes" (the class size). Folded
// stacks (`outer;...;inner;entry VALUE` per line, flame-graph and speedscope input) go to
// PATH.inuse.folded and PATH.alloc.folded.
//
// Locking: none; the caller passes a copy of the stacks. Allocates nothing (buffers
// are mappings).
#pragma once

#include <cstddef>
#include <cstdint>

namespace uslab::prof {

struct StackView {
  const uintptr_t* frames;  // return addresses, innermost first
  unsigned depth;
  unsigned cls;          // size class or cache class; 0 for large and huge
  unsigned class_bytes;  // its object size
  char cache[32];        // the object cache's name, for cache classes
  double alloc_objects, alloc_bytes, inuse_objects, inuse_bytes;
};

struct ProfileInfo {
  uint64_t sample_bytes;      // the mean sampling interval (the profile's period)
  uint64_t start_ns, now_ns;  // monotonic: the profile's duration
};

// Writes path (profile.proto), path.inuse.folded and path.alloc.folded; 0 or errno.
int write_profile(const char* path, const StackView* stacks, size_t n, const ProfileInfo& info);

}  // namespace uslab::prof
