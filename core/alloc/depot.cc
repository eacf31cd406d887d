// core/alloc/depot.cc — full/empty sheaf lists per class; see depot.h for locking.
#include "core/alloc/depot.h"

#include <atomic>
#include <cstring>

#include "core/alloc/meta_arena.h"

namespace uslab {

constinit Depot g_depot[kMaxClasses];

namespace {
constinit MetaPool<Sheaf> sheaf_pool_;
}  // namespace

size_t Depot::take(unsigned cls, void** out, size_t n) {
  lock_.lock();
  if (Sheaf* s = full_) {
    hits_++;
    if (s->count > n) {  // a partial take (bulk API): the rest stays in the sheaf
      s->count -= static_cast<uint32_t>(n);
      objects_ -= n;
      memcpy(out, s->objs + s->count, n * sizeof(void*));
      lock_.unlock();
      return n;
    }
    full_ = s->next;
    nfull_--;
    if (nfull_ < low_water_) low_water_ = nfull_;
    size_t k = s->count;
    objects_ -= k;
    memcpy(out, s->objs, k * sizeof(void*));
    s->next = empty_;
    empty_ = s;
    lock_.unlock();
    return k;
  }
  lock_.unlock();
  return g_central[cls].alloc_batch(cls, out, n);
}

void Depot::give(unsigned cls, void* const* objs, size_t n) {
  if (n == 0) return;
  Sheaf* fresh = nullptr;
  lock_.lock();
  if (nfull_ < depot_max_full(cls) && !empty_) {
    lock_.unlock();
    fresh = sheaf_pool_.alloc();
    lock_.lock();
    if (fresh) {
      fresh->next = empty_;
      empty_ = fresh;
    }
  }
  if (nfull_ < depot_max_full(cls) && empty_) {
    Sheaf* s = empty_;
    empty_ = s->next;
    s->count = static_cast<uint32_t>(n);
    memcpy(s->objs, objs, n * sizeof(void*));
    s->next = full_;
    full_ = s;
    nfull_++;
    objects_ += n;
    lock_.unlock();
    return;
  }
  lock_.unlock();
  g_central[cls].free_batch(cls, objs, n);
}

void Depot::flush(unsigned cls) { release(cls, ~uint32_t{0}); }

void Depot::decay(unsigned cls) {
  lock_.lock();
  uint32_t idle = low_water_;  // never above nfull_
  low_water_ = nfull_ - idle;   // what stays once the idle sheaves are released
  lock_.unlock();
  if (idle) release(cls, idle);
}

void Depot::release(unsigned cls, uint32_t sheaves) {
  for (; sheaves; sheaves--) {
    lock_.lock();
    Sheaf* s = full_;
    if (!s) {
      lock_.unlock();
      return;
    }
    full_ = s->next;
    nfull_--;
    if (nfull_ < low_water_) low_water_ = nfull_;
    objects_ -= s->count;
    void* batch[kMaxBatch];
    size_t k = s->count;
    memcpy(batch, s->objs, k * sizeof(void*));
    s->next = empty_;
    empty_ = s;
    lock_.unlock();
    g_central[cls].free_batch(cls, batch, k);
  }
}

DepotStats Depot::stats() {
  LockGuard g(lock_);
  return DepotStats{objects_, hits_};
}

Mutex& depot_sheaf_pool_lock() { return sheaf_pool_.lock(); }

}  // namespace uslab
