// core/alloc/meta_arena.cc — bump allocation of metadata; see meta_arena.h.
// Locking: lock_ guards cur_/end_/mapped_.
#include "core/alloc/meta_arena.h"

namespace uslab {

constinit MetaArena g_meta_arena;
USLAB_LOCK_ONE(kMetaArena, g_meta_arena.lock());

void* MetaArena::alloc(size_t bytes, size_t align) {
  if (align < 64) align = 64;
  bytes = (bytes + 63) & ~size_t{63};
  LockGuard g(lock_);
  cur_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(cur_) + align - 1) & ~(align - 1));
  if (cur_ > end_ || static_cast<size_t>(end_ - cur_) < bytes) {
    size_t chunk = bytes > kChunk ? (bytes + kChunk - 1) & ~(kChunk - 1) : kChunk;
    char* p = static_cast<char*>(os::map_metadata(chunk));
    if (!p) return nullptr;
    cur_ = p;
    end_ = p + chunk;
    mapped_ += chunk;
  }
  void* r = cur_;
  cur_ += bytes;
  return r;
}

}  // namespace uslab
