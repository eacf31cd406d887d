// core/alloc/central.cc — batched slab allocation and free; see central.h for the
// locking rules.
#include "core/alloc/central.h"

#include <cstring>

#include "core/alloc/background.h"
#include "core/alloc/error_report.h"

namespace uslab {

USLAB_LARGE_ZERO constinit CentralList g_central[kMaxShards][kMaxClasses];
USLAB_SHARD_TABLE(g_central);
USLAB_LOCK_SET(
    kCentral, [] { return shard_count_now() * uint32_t{kMaxClasses - 1}; },
    [](uint32_t i) { return &g_central[i / (kMaxClasses - 1)][1 + i % (kMaxClasses - 1)].lock(); });
USLAB_LARGE_ZERO constinit ShardFreeBytes g_central_free_bytes[kMaxShards];
USLAB_LARGE_ZERO constinit ShardSpareClasses g_central_spare_classes[kMaxShards];
USLAB_LARGE_ZERO constinit std::atomic<uint64_t> g_central_class_shards[kMaxClasses] = {};

namespace {
constinit std::atomic<CacheSlabInit> cache_slab_init_{nullptr};
}  // namespace

void central_set_cache_slab_init(CacheSlabInit init) {
  cache_slab_init_.store(init, std::memory_order_release);
}

void CentralList::push_spare(Span* s) {
  if (spares_.empty()) {
    const unsigned c = size_class();
    g_central_spare_classes[shard()].bits[c / 64].fetch_or(uint64_t{1} << (c % 64),
                                                          std::memory_order_relaxed);
  }
  spares_.push_front(s);
}

Span* CentralList::pop_spare() {
  Span* s = spares_.pop_front();
  if (s && spares_.empty()) {
    const unsigned c = size_class();
    g_central_spare_classes[shard()].bits[c / 64].fetch_and(~(uint64_t{1} << (c % 64)),
                                                           std::memory_order_relaxed);
  }
  return s;
}

unsigned CentralList::shard() const {
  return static_cast<unsigned>((this - &g_central[0][0]) / kMaxClasses);
}

unsigned CentralList::size_class() const {
  return static_cast<unsigned>((this - &g_central[0][0]) % kMaxClasses);
}

void CentralList::add_free(ptrdiff_t d) {
  const size_t before = free_objects_, after = before + static_cast<size_t>(d);
  __atomic_store_n(&free_objects_, after, __ATOMIC_RELAXED);
  // The shard's count moves in steps of kFreeBytesStep a class (central.h).
  const size_t size = class_size(size_class());
  const int64_t steps = static_cast<int64_t>(after * size / kFreeBytesStep) -
                        static_cast<int64_t>(before * size / kFreeBytesStep);
  if (steps)
    g_central_free_bytes[shard()].bytes.fetch_add(steps * int64_t{kFreeBytesStep},
                                                  std::memory_order_relaxed);
}

// Slabs for cls enough for `need` objects (kMaxFreshSlabs at most): pages from the
// page heap, descriptor and page map filled in before any other thread can see them,
// without the class lock; then on the partial list under it, which is held on return.
// Several come from one page-heap lock (a refill larger than a slab carved each slab
// under its own lock, and took the class lock again for each).
size_t CentralList::carve_slabs(unsigned cls, size_t need) {
  note_shard_used(shard());
  page_heap_set_spare_reclaim(central_reclaim_spares);  // spares come from carved slabs
  const SizeClassInfo& info = class_info(cls);
  PageHeap& heap = g_page_heap[shard()];
  Span* fresh[kMaxFreshSlabs];
  size_t want = 1;
  while (want < kMaxFreshSlabs && want * info.objects < need) want++;
  bool zeroed;
  const ObjectSize objects =
      info.size < os::page_size() ? ObjectSize::kSubPage : ObjectSize::kPageOrMore;
  fresh[0] = heap.alloc(info.slab_pages, 1, SpanKind::kSlab, &zeroed, objects);
  size_t got = fresh[0] != nullptr;
  // The first may come from another heap's surplus: the rest only from this one.
  if (got && want > 1 && &page_heap_of(fresh[0]) == &heap)
    got += heap.alloc_more(info.slab_pages, SpanKind::kSlab, fresh + 1, want - 1, objects);
  size_t k = 0;
  for (size_t i = 0; i < got; i++)
    if (init_slab(cls, fresh[i])) fresh[k++] = fresh[i];
    else page_heap_of(fresh[i]).free(fresh[i]);  // its capacity is still 0: no bitmap to drop
  lock_.lock();
  slabs_ += k;
  for (size_t i = k; i-- > 0;) {  // the lowest address first
    partial_.push_front(fresh[i]);
    fresh[i]->on_partial = 1;
  }
  add_free(static_cast<ptrdiff_t>(k * info.objects));
  return k;
}

bool CentralList::init_slab(unsigned cls, Span* s) {
  const SizeClassInfo& info = class_info(cls);
  uint64_t* bitmap = s->inline_bitmap;
  if (Span::external_bitmap(info.objects)) {
    bitmap = page_heap_of(s).alloc_bitmap();
    if (!bitmap) return false;
    s->inline_bitmap[0] = reinterpret_cast<uintptr_t>(bitmap);
  } else {
    memset(bitmap, 0, sizeof s->inline_bitmap);
  }
  s->size_class = static_cast<uint8_t>(cls);
  s->obj_size = info.size;
  s->capacity = info.objects;
  s->div_inv = info.inv;
  s->div_limit = uint32_t{info.objects} << info.tz;
  s->div_mask = static_cast<uint16_t>((1u << info.tz) - 1);
  s->free_count = info.objects;
  s->scan_hint = 0;
  s->on_partial = 0;
  s->shard = static_cast<uint16_t>(shard());
  // Read first: the line stays shared once each shard that carves the class has its bit.
  const uint64_t bit = uint64_t{1} << s->shard;
  if (!(g_central_class_shards[cls].load(std::memory_order_relaxed) & bit))
    g_central_class_shards[cls].fetch_or(bit, std::memory_order_relaxed);
  for (size_t i = 0; i < info.objects / 64; i++) bitmap[i] = ~uint64_t{0};
  if (info.objects % 64) bitmap[info.objects / 64] = (uint64_t{1} << (info.objects % 64)) - 1;
  USLAB_PROBE(slab_grow, cls, s->start);
  // The pages may hold objects of an earlier slab, freed (track.h): open for the
  // constructor or the poison, then closed until each object is handed out.
  const size_t bytes = size_t{info.objects} * info.size;
  track_open(s->start, bytes);
  if (cls >= kFirstCacheClass)
    cache_slab_init_.load(std::memory_order_acquire)(cls, s->start, info.objects);
  else if (g_config.poison)
    memset(s->start, kPoisonByte, bytes);
  track_close(s->start, bytes);
  for (uint32_t i = 0; i < s->npages; i++) {
    s->segment->page_class[s->first_page + i].store(static_cast<uint8_t>(cls),
                                                    std::memory_order_relaxed);
    PageMap::set(s->start + (size_t{i} << kPageShift), s, cls);  // publishes the class too
  }
  return true;
}

// Pops up to n free objects of slab s in address order (touches memory in order).
size_t CentralList::take_from(Span* s, void** out, size_t n) {
  size_t got = 0;
  size_t words = (s->capacity + 63) / 64;
  uint64_t* bitmap = s->bitmap();
  const size_t size = s->obj_size;
  for (size_t w = s->scan_hint; w < words && got < n; w++) {
    uint64_t bits = bitmap[w];
    // A word whose objects are all free (a fresh slab's, or one its objects all came
    // back to) and that fits: its objects by address, without a bit scan.
    const unsigned in_word = w + 1 < words || s->capacity % 64 == 0 ? 64 : s->capacity % 64;
    if (bits == ~uint64_t{0} >> (64 - in_word) && n - got >= in_word) {
      char* p = s->start + w * 64 * size;
      for (unsigned k = 0; k < in_word; k++, p += size) out[got + k] = p;
      got += in_word;
      bitmap[w] = 0;
      s->scan_hint = static_cast<uint16_t>(w + 1);
      continue;
    }
    while (bits && got < n) {
      unsigned b = __builtin_ctzll(bits);
      bits &= bits - 1;
      out[got++] = s->start + (w * 64 + b) * size;
    }
    bitmap[w] = bits;
    s->scan_hint = static_cast<uint16_t>(bits ? w : w + 1);
  }
  s->free_count -= static_cast<uint16_t>(got);
  return got;
}

namespace {

// The poison option (config.h) applies to size classes: a cache's objects belong to
// its constructor, and its own poison flag (obj_cache.h) covers them.
bool poisoned_class(unsigned cls) { return g_config.poison && cls < kNumClasses; }

// An object of a poisoned class leaving its slab: every byte must still be the
// poison written when it was freed (or carved).
void check_poison(unsigned cls, const void* p) {
  size_t size = class_size(cls);
  track_open(p, size);  // still free until the caller hands it out
  size_t i = first_unpoisoned(p, size);
  track_close(p, size);
  if (i == size) return;
  os::print_stderr(
      "uslab: write after free of %p (size class %u, %u bytes): byte %zu "
      "changed since it was freed\n",
      p, cls, (unsigned)size, i);
  abort_if_configured();
}

// The n objects alloc_batch hands out, checked (after the lock) when poisoned.
size_t handed_out(unsigned cls, void* const* out, size_t n) {
  if (poisoned_class(cls))
    for (size_t i = 0; i < n; i++) check_poison(cls, out[i]);
  return n;
}

}  // namespace

void CentralList::check_slab_locked(const Span* s) const {
#if USLAB_DEBUG_CHECKS
  USLAB_DCHECK(lock_.held());
  // Its bitmap has one bit per free object; it is on the partial list when it has
  // free objects, unless it is a spare (all free).
  const uint64_t* bitmap = const_cast<Span*>(s)->bitmap();
  size_t bits = 0;
  for (size_t w = 0; w < (s->capacity + 63u) / 64; w++) bits += __builtin_popcountll(bitmap[w]);
  USLAB_DCHECK(bits == s->free_count && s->free_count <= s->capacity);
  USLAB_DCHECK(s->on_partial ? s->free_count > 0
                             : s->free_count == 0 || s->free_count == s->capacity);
#else
  (void)s;
#endif
}

size_t CentralList::take_partial(void** out, size_t n) {
  size_t got = 0;
  while (got < n) {
    Span* s = partial_.front();
    if (!s) break;
    got += take_from(s, out + got, n - got);
    if (s->free_count == 0) {
      partial_.remove(s);
      s->on_partial = 0;
    }
    check_slab_locked(s);
  }
  add_free(-static_cast<ptrdiff_t>(got));
  return got;
}

size_t CentralList::borrow(unsigned cls, void** out, size_t n) {
  const unsigned me = shard(), count = shard_count();
  const size_t surplus = n + kLendReserveSlabs * size_t{class_info(cls).objects};
  for (unsigned i = 1; i < count; i++) {
    unsigned sh = (me + i) % count;
    if (node_of_shard(sh) != node_of_shard(me)) continue;  // its memory is elsewhere
    CentralList& other = g_central[sh][cls];
    if (__atomic_load_n(&other.free_objects_, __ATOMIC_RELAXED) < surplus ||
        !other.lock_.try_lock())
      continue;
    size_t k = other.take_partial(out, n);
    other.lent_ += k;
    other.lock_.unlock();
    if (k) return k;
  }
  return 0;
}

size_t CentralList::alloc_batch(unsigned cls, void** out, size_t n) {
  lock_.lock();
  batches_out_++;
  size_t got = take_partial(out, n);
  bool asked_others = false;
  while (got < n) {
    if (Span* spare = pop_spare()) {
      partial_.push_front(spare);
      spare->on_partial = 1;
    } else {
      lock_.unlock();
      if (!asked_others) {
        asked_others = true;
        if (size_t k = borrow(cls, out + got, n - got)) return handed_out(cls, out, got + k);
      }
      if (!carve_slabs(cls, n - got)) break;
    }
    got += take_partial(out + got, n - got);
  }
  lock_.unlock();
  return handed_out(cls, out, got);
}

size_t CentralList::free_batch(unsigned cls, void* const* ptrs, size_t n, bool remote) {
  const unsigned me = shard();
  const bool poison = poisoned_class(cls);
  // The objects of one slab in a row (the usual batch) are counted in registers and
  // their bitmap word is written once per word: a load-or-store per object chained
  // the loop through store forwarding.
  Span* s = nullptr;
  SlabRange slab;
  uint64_t* bitmap = nullptr;  // s's
  size_t w = 0, lo = 0;        // s's bitmap word held in `word`; the lowest word touched
  uint64_t word = 0;
  uint32_t freed = 0;  // objects of s in this run
  size_t total = 0;
  // Commits the run of s: bitmap word, counts, lists; an empty slab joins the
  // spares. Lock held.
  auto finish_run = [&]() USLAB_REQUIRES(lock_) {
    if (freed == 0) {  // a run cut short by a double free: the slab may be a spare
      s = nullptr;
      return;
    }
    bitmap[w] = word;
    if (lo < s->scan_hint) s->scan_hint = static_cast<uint16_t>(lo);
    s->free_count = static_cast<uint16_t>(s->free_count + freed);
    total += freed;
    if (!s->on_partial) {
      partial_.push_front(s);
      s->on_partial = 1;
    }
    if (s->free_count == s->capacity) {  // empty: a spare (central.h)
      partial_.remove(s);
      s->on_partial = 0;
      push_spare(s);
    }
    check_slab_locked(s);
    s = nullptr;
  };
  // The free count is published before the lock is dropped (borrowers read it).
  auto publish_and_unlock = [&]() USLAB_RELEASE(lock_) {
    add_free(static_cast<ptrdiff_t>(total));
    total = 0;
    lock_.unlock();
    background_note_free(
        static_cast<size_t>(g_central_free_bytes[me].bytes.load(std::memory_order_relaxed)));
  };
  lock_.lock();
  batches_in_++;
  size_t i = 0;
  for (; i < n; i++) {
    void* p = ptrs[i];
    // Neighbours in a batch usually share a slab: skip the map lookup for them.
    if (!s || !slab.spans(p)) {
      if (s) finish_run();
      Span* t = PageMap::get(p);
      if (t->shard != me) break;  // another shard's slab: the caller routes it
      s = t;
      slab = SlabRange(s);
      bitmap = s->bitmap();
      w = lo = slab.index(p) / 64;
      word = bitmap[w];
      freed = 0;
    }
    size_t idx = slab.index(p);
    if (idx / 64 != w) {
      bitmap[w] = word;
      w = idx / 64;
      if (w < lo) lo = w;
      word = bitmap[w];
    }
    uint64_t bit = uint64_t{1} << (idx % 64);
    if (word & bit) {
      finish_run();
      publish_and_unlock();
      report_bad_free(p, "double free", cls);
      lock_.lock();
      continue;
    }
    if (poison) {  // before it is free
      track_open(p, s->obj_size);
      memset(p, kPoisonByte, s->obj_size);
      track_close(p, s->obj_size);
    }
    word |= bit;
    freed++;
  }
  if (s) finish_run();
  if (remote) remote_ += i;
  publish_and_unlock();
  return i;
}

void central_free(unsigned cls, void* const* ptrs, size_t n, unsigned from) {
  while (n) {
    // A live object's slab and its shard stay put while we hold the object.
    unsigned owner = PageMap::get(ptrs[0])->shard;
    size_t k = g_central[owner][cls].free_batch(cls, ptrs, n, from != kNoShard && owner != from);
    if (from != kNoShard && node_of_shard(owner) != node_of_shard(from))
      note_remote_node_frees(node_of_shard(owner), k);
    ptrs += k;
    n -= k;
  }
}

CentralStats central_stats(unsigned cls) {
  return sum_over_shards([cls](unsigned sh) { return g_central[sh][cls].stats(cls); });
}

void central_release_spares(unsigned cls) {
  for_each_shard_used([cls](unsigned sh) { g_central[sh][cls].release_spares(true); });
}

void central_release_all_spares() {
  for (unsigned cls = 1; cls < kMaxClasses; cls++) central_release_spares(cls);
}

size_t central_reclaim_spares(unsigned shard) {
  // The node's other shards too: a thread that moved to another CPU leaves the
  // spares of the shard it left (deferred frees, done on another CPU, nearly doubled
  // the footprint with this shard's alone).
  size_t n = 0;
  for_each_shard_used([&](unsigned sh) {
    if (node_of_shard(sh) != node_of_shard(shard)) return;
    for (unsigned w = 0; w < (kMaxClasses + 63) / 64; w++) {
      uint64_t bits = g_central_spare_classes[sh].bits[w].load(std::memory_order_relaxed);
      for (; bits; bits &= bits - 1)
        n += g_central[sh][w * 64 + __builtin_ctzll(bits)].release_spares(false);
    }
  });
  return n;
}

size_t CentralList::release_spares(bool wait) {
  size_t released = 0;
  for (;;) {
    if (wait) {
      lock_.lock();
    } else if (!lock_.try_lock()) {
      return released;
    }
    // At most a page heap call's worth a time, the lock dropped before the call.
    Span* out[64];
    size_t k = 0;
    while (k < 64 && (out[k] = pop_spare())) {
      USLAB_PROBE(slab_release, size_class(), out[k]->start);
      slabs_--;
      add_free(-static_cast<ptrdiff_t>(out[k]->capacity));
      k++;
    }
    lock_.unlock();
    if (k == 0) return released;
    page_heap_free_spans(out, k);
    released += k;
  }
}

CentralStats CentralList::stats(unsigned cls) {
  LockGuard g(lock_);
  return CentralStats{slabs_,        slabs_ * class_info(cls).objects,
                      free_objects_, batches_out_,
                      batches_in_,   remote_,
                      lent_,         spares_.size()};
}

}  // namespace uslab
