// core/alloc/depot.cc — full/empty sheaf lists per class; see depot.h for locking.
#include "core/alloc/depot.h"

#include <atomic>
#include <cstring>

#include "core/alloc/meta_arena.h"

namespace uslab {

USLAB_LARGE_ZERO constinit Depot g_depot[kMaxShards][kMaxClasses];
USLAB_SHARD_TABLE(g_depot);

namespace {
// Per shard: 16 CPUs filling their depots at once queued on one pool's lock.
USLAB_LARGE_ZERO constinit MetaPool<Sheaf> sheaf_pool_[kMaxShards];
USLAB_LOCK_SET(
    kMetaPool, [] { return shard_count_now(); },
    [](uint32_t sh) { return &sheaf_pool_[sh].lock(); });
}  // namespace

// Every class of every shard made (class 0 is no class).
USLAB_LOCK_SET(
    kDepot, [] { return shard_count_now() * uint32_t{kMaxClasses - 1}; },
    [](uint32_t i) { return &g_depot[i / (kMaxClasses - 1)][1 + i % (kMaxClasses - 1)].lock(); });

USLAB_LARGE_ZERO constinit uint64_t g_depot_bound[kMaxClasses] = {};
USLAB_LARGE_ZERO constinit uint32_t g_alloc_epoch[kMaxShards] = {};

uint32_t depot_bound_for(unsigned cls, unsigned shards) {
  size_t bytes = (size_t{256} << 10) / shards;
  if (bytes < (size_t{64} << 10)) bytes = size_t{64} << 10;
  size_t n = bytes / (size_t{batch_size(cls)} * class_size(cls));
  const uint32_t bound = static_cast<uint32_t>(n < 1 ? 1 : n);
  __atomic_store_n(&g_depot_bound[cls], uint64_t{shards} << 32 | bound, __ATOMIC_RELAXED);
  return bound;
}

unsigned Depot::shard() const {
  return static_cast<unsigned>((this - &g_depot[0][0]) / kMaxClasses);
}

bool Depot::stale() const {
  const uint32_t now = __atomic_load_n(&g_alloc_epoch[shard()], __ATOMIC_RELAXED);
  return now - __atomic_load_n(&asked_epoch_, __ATOMIC_RELAXED) > kDepotStaleEpochs;
}

void Depot::asked() {
  // Stored only when it changed: the line stays shared between the shard's CPUs.
  const uint32_t now = __atomic_load_n(&g_alloc_epoch[shard()], __ATOMIC_RELAXED);
  if (__atomic_load_n(&asked_epoch_, __ATOMIC_RELAXED) != now)
    __atomic_store_n(&asked_epoch_, now, __ATOMIC_RELAXED);
}

size_t Depot::take(unsigned cls, void** out, size_t n, size_t slab_n) {
  USLAB_DCHECK(slab_n >= 1 && slab_n <= n);
  asked();
  if (!has_full()) return g_central[shard()][cls].alloc_batch(cls, out, slab_n);  // depot.h
  size_t got = 0;
  lock_.lock();
  while (Sheaf* s = full_) {
    if (s->count > n - got) {
      if (got == 0) {  // a partial take (bulk API): the rest stays in the sheaf
        hits_++;
        s->count -= static_cast<uint32_t>(n);
        objects_ -= n;
        memcpy(out, s->objs + s->count, n * sizeof(void*));
        got = n;
      }
      break;
    }
    hits_++;
    full_ = s->next;
    nfull_--;
    if (nfull_ < low_water_) low_water_ = nfull_;
    objects_ -= s->count;
    memcpy(out + got, s->objs, s->count * sizeof(void*));
    got += s->count;
    s->next = empty_;
    empty_ = s;
  }
  USLAB_DCHECK(counts_balance());
  lock_.unlock();
  return got ? got : g_central[shard()][cls].alloc_batch(cls, out, slab_n);
}

void Depot::give(unsigned cls, void* const* objs, size_t n, bool remote, size_t sheaf_n) {
  USLAB_DCHECK(sheaf_n >= 1 && sheaf_n <= kMaxBatch);
  if (n == 0) return;
  // A class the shard stopped allocating: everything to the slabs (depot.h).
  if (stale()) {
    if (has_full()) release(cls, ~uint32_t{0});
    return central_free(cls, objs, n);
  }
  // Past the bound without the lock (depot.h); remote drains take it, which counts them.
  if (!remote && at_bound(cls)) return central_free(cls, objs, n);
  size_t done = 0;
  lock_.lock();
  if (remote) remote_ += n;
  while (done < n && nfull_ < depot_max_full(cls)) {
    Sheaf* s = empty_;
    if (!s) {  // a record, made with the lock dropped
      lock_.unlock();
      Sheaf* fresh = sheaf_pool_[shard()].alloc();
      lock_.lock();
      if (!fresh) break;
      fresh->next = empty_;
      empty_ = fresh;
      continue;
    }
    empty_ = s->next;
    const size_t k = n - done < sheaf_n ? n - done : sheaf_n;
    s->count = static_cast<uint32_t>(k);
    memcpy(s->objs, objs + done, k * sizeof(void*));
    s->next = full_;
    full_ = s;
    nfull_++;
    objects_ += k;
    done += k;
  }
  USLAB_DCHECK(counts_balance());
  lock_.unlock();
  if (done < n) central_free(cls, objs + done, n - done);
}

void Depot::flush(unsigned cls) { release(cls, ~uint32_t{0}); }

bool Depot::counts_balance() const {
  size_t sheaves = 0, objects = 0;
  for (const Sheaf* s = full_; s; s = s->next) {
    if (s->count == 0 || s->count > kMaxBatch) return false;
    sheaves++;
    objects += s->count;
  }
  return sheaves == nfull_ && objects == objects_;
}

void Depot::decay(unsigned cls) {
  lock_.lock();
  // Sheaves that stayed through every one of the intervals (never above nfull_).
  uint32_t idle = low_water_;
  for (unsigned i = 0; i + 1 < cache_idle_ticks(); i++)
    idle = earlier_low_[i] < idle ? earlier_low_[i] : idle;
  // The marks move down a place; each loses the sheaves released now.
  for (size_t i = kCacheIdleTicks - 2; i > 0; i--)
    earlier_low_[i] = earlier_low_[i - 1] > idle ? earlier_low_[i - 1] - idle : 0;
  earlier_low_[0] = low_water_ - idle;
  low_water_ = nfull_ - idle;  // what stays once the idle sheaves are released
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
    central_free(cls, batch, k);
  }
}

DepotStats Depot::stats() {
  LockGuard g(lock_);
  return DepotStats{objects_, hits_, remote_};
}

void depot_give(unsigned here, unsigned cls, void* const* objs, size_t n, size_t sheaf_n) {
  // One shard carved the class's slabs (central.h): every object is its. The object
  // was handed out after its slab's bit was set, and reached this thread after that.
  const uint64_t owners = g_central_class_shards[cls].load(std::memory_order_relaxed);
  if (!(owners & (owners - 1))) {
    const unsigned owner = owners ? static_cast<unsigned>(__builtin_ctzll(owners)) : 0;
    return g_depot[owner][cls].give(cls, objs, n, owner != here, sheaf_n);
  }
  for (; n > kMaxBatch; objs += kMaxBatch, n -= kMaxBatch)
    depot_give(here, cls, objs, kMaxBatch, sheaf_n);
  // Grouped by owner, not cut into runs: the drains of a server whose threads free
  // each other's objects alternate owners, and runs of one or two objects made
  // sheaves of one or two objects, so that every refill missed again at once.
  void* mine[kMaxBatch];
  void* rest[2][kMaxBatch];
  int which = 0;
  while (n) {
    // Live objects: their slabs and owners stay put meanwhile.
    Span* s = PageMap::get(objs[0]);
    const unsigned owner = s->shard;
    size_t i = 1;
    for (; i < n; i++) {
      const char* p = static_cast<const char*>(objs[i]);
      if (static_cast<size_t>(p - s->start) >= s->bytes() && (s = PageMap::get(p))->shard != owner)
        break;
    }
    if (i == n) {  // one owner (the usual case): no copy
      g_depot[owner][cls].give(cls, objs, n, owner != here, sheaf_n);
      return;
    }
    memcpy(mine, objs, i * sizeof(void*));
    size_t k = i, r = 0;
    for (; i < n; i++) {
      void* p = objs[i];
      if (static_cast<size_t>(static_cast<char*>(p) - s->start) >= s->bytes()) s = PageMap::get(p);
      if (s->shard == owner)
        mine[k++] = p;
      else
        rest[which][r++] = p;
    }
    g_depot[owner][cls].give(cls, mine, k, owner != here, sheaf_n);
    objs = rest[which];
    which ^= 1;
    n = r;
  }
}

DepotStats depot_stats(unsigned cls) {
  return sum_over_shards([cls](unsigned sh) { return g_depot[sh][cls].stats(); });
}

void depot_flush_classes(unsigned lo, unsigned hi) {
  for_each_shard_used([=](unsigned sh) {
    for (unsigned cls = lo; cls < hi; cls++) g_depot[sh][cls].flush(cls);
  });
}

void depot_decay_all() {
  for_each_shard_used([](unsigned sh) {
    for (unsigned cls = 1; cls < kMaxClasses; cls++) g_depot[sh][cls].decay(cls);
  });
}

}  // namespace uslab
