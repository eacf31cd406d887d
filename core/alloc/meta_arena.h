// core/alloc/meta_arena.h — memory for the allocator's own metadata.
//
// Owns: MetaArena, a bump allocator over 1 MiB mmap chunks that never returns
// memory, and MetaPool<T>, a free list of fixed-size records (Span descriptors,
// thread caches) on top of it. Metadata never comes from the heap it describes, so
// corrupting an object cannot forge a descriptor, and the core never calls malloc.
//
// Locking: one Mutex per MetaArena/MetaPool guards its bump pointer / free list.
// Records are zero-filled when first carved; recycled records keep old contents.
#pragma once

#include <cstddef>
#include <new>

#include "core/platform/platform.h"

namespace uslab {

class MetaArena {
 public:
  // `bytes` rounded up to 64, aligned to `align` (a power of two up to the page
  // size; at least 64); nullptr when the OS refuses memory.
  void* alloc(size_t bytes, size_t align = 64);
  size_t mapped() const { return mapped_; }
  Mutex& lock() { return lock_; }

 private:
  static constexpr size_t kChunk = size_t{1} << 20;
  Mutex lock_;
  char* cur_ USLAB_GUARDED_BY(lock_) = nullptr;
  char* end_ USLAB_GUARDED_BY(lock_) = nullptr;
  size_t mapped_ = 0;  // written under lock_, read without it (statistics)
};

extern MetaArena g_meta_arena;

template <typename T>
class MetaPool {
 public:
  T* alloc() {
    {
      LockGuard g(lock_);
      if (free_) {
        Link* l = free_;
        free_ = l->next;
        return reinterpret_cast<T*>(l);
      }
    }
    // Small records are carved in runs: one arena lock per run, not per record (16
    // CPUs carving span descriptors one at a time queued on the arena's lock).
    constexpr size_t kSize = sizeof(T) > sizeof(Link) ? sizeof(T) : sizeof(Link);
    constexpr size_t kRun = kSize <= 1024 ? 16 : 1;
    char* run = static_cast<char*>(g_meta_arena.alloc(kRun * kSize, alignof(T)));
    if (!run) return nullptr;
    if (kRun > 1) {
      LockGuard g(lock_);
      for (size_t i = 1; i < kRun; i++) {
        Link* l = reinterpret_cast<Link*>(run + i * kSize);
        l->next = free_;
        free_ = l;
      }
    }
    return reinterpret_cast<T*>(run);
  }

  void free(T* t) {
    LockGuard g(lock_);
    Link* l = reinterpret_cast<Link*>(t);
    l->next = free_;
    free_ = l;
  }

  Mutex& lock() { return lock_; }

 private:
  struct Link {
    Link* next;
  };
  Mutex lock_;
  Link* free_ USLAB_GUARDED_BY(lock_) = nullptr;
};

}  // namespace uslab
