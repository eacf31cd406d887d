// core/alloc/obj_cache.cc — object caches; see obj_cache.h for the rules.
#include "core/alloc/obj_cache.h"

#include <cerrno>
#include <cstring>

#include "core/alloc/error_report.h"
#include "core/alloc/percpu.h"

namespace uslab {

namespace {

constinit Mutex registry_lock_;
USLAB_LOCK_ONE(kObjCacheRegistry, registry_lock_);
// One record per cache class; a class's record is reused with the class.
USLAB_LARGE_ZERO constinit ObjCache records_[kMaxClasses] USLAB_GUARDED_BY(registry_lock_) = {};
// Written under registry_lock_; read without it by obj_cache_of (an atomic load).
USLAB_LARGE_ZERO constinit ObjCache* registry_[kMaxClasses] USLAB_GUARDED_BY(registry_lock_) = {};

bool is_pow2(size_t x) { return x && (x & (x - 1)) == 0; }

// A slab of cache class cls was just carved (not yet published; central.h's hook):
// its n objects constructed or poisoned.
void init_slab(unsigned cls, char* start, size_t n) {
  const ObjCache* c = obj_cache_of(cls);
  if (!c) return;
  if (c->ctor) {
    for (size_t i = 0; i < n; i++) c->ctor(start + i * c->size);
  } else if (c->flags & kCachePoison) {
    memset(start, kPoisonByte, n * c->size);
  }
}

}  // namespace

ObjCache* obj_cache_create(const char* name, size_t size, size_t align, unsigned flags,
                           void (*ctor)(void*), int* err) {
  *err = EINVAL;
  if (size == 0 || size > kMaxSmall || (align && !is_pow2(align)) || (flags & ~kCacheFlags))
    return nullptr;
  // A constructed object must come back as the constructor left it.
  if (ctor && (flags & (kCacheZero | kCachePoison))) return nullptr;
  size_t a = align ? align : size >= 16 ? 16 : 8;
  if (a < 8) a = 8;
  if ((flags & kCacheHwAlign) && a < kCacheLine) a = kCacheLine;
  if (a > kPageSize) return nullptr;  // objects are laid out from page-aligned slabs
  size_t osize = (size + a - 1) & ~(a - 1);
  if (osize > kMaxSmall) return nullptr;

  LockGuard g(registry_lock_);
  central_set_cache_slab_init(init_slab);  // before any slab of a cache class exists
  unsigned cls = kFirstCacheClass;
  while (cls < kMaxClasses && (registry_[cls] || records_[cls].retired)) cls++;
  if (cls == kMaxClasses) {
    *err = ENOMEM;
    return nullptr;
  }
  ObjCache* c = &records_[cls];
  memset(c, 0, sizeof *c);
  size_t n = 0;
  for (; name && name[n] && n + 1 < sizeof c->name; n++) c->name[n] = name[n];
  c->name[n] = 0;
  c->size = static_cast<uint32_t>(osize);
  c->align = static_cast<uint32_t>(a);
  c->flags = flags;
  c->ctor = ctor;
  c->cls = cls;
  g_class_info[cls] = detail::make_info(static_cast<uint32_t>(osize), kCacheSheafCap);
  // A class reused once nothing of it was left: no slab of it has an owner now.
  g_central_class_shards[cls].store(0, std::memory_order_relaxed);
  __atomic_store_n(&registry_[cls], c, __ATOMIC_RELEASE);
  *err = 0;
  return c;
}

void obj_cache_destroy(ObjCache* c, size_t elsewhere) {
  LockGuard g(registry_lock_);
  unsigned cls = c->cls;
  if (registry_[cls] != c || c->retired) return;
  // CPU sheaves and depot back to the slabs; without membarrier's fences other CPUs'
  // sheaves keep what the program freed there.
  const size_t stranded = percpu_drain_class(cls);
  central_release_spares(cls);
  CentralStats cs = central_stats(cls);
  const size_t held = cs.objects - cs.free_objects;
  const size_t live = (held > stranded ? held - stranded : 0) + elsewhere;
  if (live)
    os::print_stderr(
        "uslab: cache '%s' destroyed with %zu live objects (%zu slabs); their "
        "memory stays valid\n",
        c->name, live, cs.slabs);
  if (live || stranded) {
    // Objects still out, or freed ones a sheaf keeps: the class is never reused (a
    // new cache of another size would be handed them).
    c->retired = true;
    return;
  }
  __atomic_store_n(&registry_[cls], nullptr, __ATOMIC_RELEASE);
}

ObjCache* obj_cache_of(unsigned cls) {
  return cls < kMaxClasses ? __atomic_load_n(&registry_[cls], __ATOMIC_ACQUIRE) : nullptr;
}

void obj_cache_on_alloc(const ObjCache* c, void* p) {
  if (c->flags & kCachePoison) {
    size_t i = first_unpoisoned(p, c->size);
    if (i < c->size) {
      os::print_stderr(
          "uslab: cache '%s': object %p was written after it was freed "
          "(poison overwritten at byte %zu)\n",
          c->name, p, i);
      abort_if_configured();
    }
  }
  if (c->flags & kCacheZero) memset(p, 0, c->size);
}

void obj_cache_for_each(void (*fn)(const ObjCache* c, void* arg), void* arg) {
  LockGuard g(registry_lock_);
  for (unsigned cls = kFirstCacheClass; cls < kMaxClasses; cls++)
    if (registry_[cls]) fn(registry_[cls], arg);
}

}  // namespace uslab
