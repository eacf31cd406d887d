// core/alloc/obj_cache.h — object caches (uslab_cache_create), kmem_cache style.
//
// Owns: the ObjCache records and the registry that maps a cache class (see
// size_class.h: classes kFirstCacheClass … kMaxClasses-1) to its cache. A cache is a
// class of its own: its objects live in slabs of that class only, go through the same
// per-CPU sheaves, depot and central list as malloc's classes, and carry the class in
// the page map, so free() recognises them. What differs is done here: the constructor
// runs on every object when its slab is carved (never again: objects come back in
// constructed state), the poison of the debug flag is written when a slab is carved
// and on every free and checked on every allocation, and the zero flag clears
// objects on allocation.
//
// Destroying a cache drains its class from every CPU and the depot, gives its empty
// slabs back, and reuses the class for a later cache when nothing is left. Objects
// still allocated are reported by name and count; their slabs stay, so their memory
// stays valid, and their class is retired (never reused).
//
// Locking: registry_lock guards the registry, the class table entries of cache
// classes and cache creation/destruction. A cache's fields are written before its
// class becomes reachable (under registry_lock) and read-only until it is destroyed;
// the alloc/free paths read them without a lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/central.h"

namespace uslab {

enum : unsigned {
  kCacheZero = 1u,     // USLAB_CACHE_ZERO
  kCacheHwAlign = 2u,  // USLAB_CACHE_HWALIGN
  kCachePoison = 4u,   // USLAB_CACHE_POISON
  kCacheFlags = kCacheZero | kCacheHwAlign | kCachePoison,
};

constexpr size_t kCacheLine = 64;

struct ObjCache {
  char name[48];
  uint32_t size;  // object size: the request rounded up to the alignment
  uint32_t align;
  unsigned flags;
  void (*ctor)(void*);
  unsigned cls;
  bool retired;  // destroyed with live objects
};

// nullptr with *err = EINVAL (bad size, alignment, flags or combination) or ENOMEM
// (no class left: at most kMaxClasses - kFirstCacheClass caches live at once).
ObjCache* obj_cache_create(const char* name, size_t size, size_t align, unsigned flags,
                           void (*ctor)(void*), int* err);
// `elsewhere`: live objects of c held outside its slabs (guarded ones), counted
// with the slabs' as live.
void obj_cache_destroy(ObjCache* c, size_t elsewhere = 0);

// The cache of a cache class (nullptr for size classes and free cache classes).
ObjCache* obj_cache_of(unsigned cls);

// Allocation of p from c: check the poison, clear (zero flag). Free: write the poison.
void obj_cache_on_alloc(const ObjCache* c, void* p);
inline void obj_cache_on_free(const ObjCache* c, void* p) {
  if (c->flags & kCachePoison) __builtin_memset(p, kPoisonByte, c->size);
}

// Calls fn for every live (not destroyed) cache, under the registry lock.
void obj_cache_for_each(void (*fn)(const ObjCache* c, void* arg), void* arg);

}  // namespace uslab
