// core/alloc/huge_cache.cc — freed huge segments kept for reuse; see huge_cache.h.
#include "core/alloc/huge_cache.h"

#include "core/alloc/background.h"
#include "core/alloc/decay.h"
#include "core/alloc/page_heap.h"

namespace uslab {

namespace {

struct Entry {
  Segment* seg;
  uint64_t freed_at_ms;
};

constinit Mutex lock_;
USLAB_LOCK_ONE(kHugeCache, lock_);
Entry entries_[kHugeCacheEntries] USLAB_GUARDED_BY(lock_);
size_t count_ USLAB_GUARDED_BY(lock_) = 0;  // entries_[0 … count_), oldest first
size_t bytes_ USLAB_GUARDED_BY(lock_) = 0;

// Its object's room: past the header's page (segment_create_huge).
size_t capacity(const Segment* seg) { return seg->mapped_bytes - page_granule(); }

void remove_at(size_t i) USLAB_REQUIRES(lock_) {
  bytes_ -= entries_[i].seg->mapped_bytes;
  for (size_t j = i + 1; j < count_; j++) entries_[j - 1] = entries_[j];
  count_--;
}

}  // namespace

void huge_segment_destroy(Segment* seg) {
  Span* s = seg->huge_span;
  segment_destroy(seg);
  g_span_pool.free(s);
}

Segment* huge_cache_take(size_t obj_bytes, unsigned shard) {
  LockGuard g(lock_);
  size_t best = count_;
  for (size_t i = 0; i < count_; i++) {
    size_t cap = capacity(entries_[i].seg);
    if (cap >= obj_bytes && same_memory_node(entries_[i].seg->heap, shard) &&
        (best == count_ || cap < capacity(entries_[best].seg)))
      best = i;
  }
  if (best == count_) return nullptr;
  Segment* seg = entries_[best].seg;
  remove_at(best);
  Span* s = seg->huge_span;
  s->npages = static_cast<uint32_t>(obj_bytes >> kPageShift);
  s->kind = SpanKind::kLarge;
  return seg;
}

Segment* huge_cache_take_largest(unsigned shard) {
  LockGuard g(lock_);
  size_t best = count_;
  for (size_t i = 0; i < count_; i++)
    if (same_memory_node(entries_[i].seg->heap, shard) &&
        (best == count_ || entries_[i].seg->mapped_bytes > entries_[best].seg->mapped_bytes))
      best = i;
  if (best == count_) return nullptr;
  Segment* seg = entries_[best].seg;
  remove_at(best);
  Span* s = seg->huge_span;
  s->npages = static_cast<uint32_t>(capacity(seg) >> kPageShift);
  s->kind = SpanKind::kLarge;
  return seg;
}

void huge_cache_put(Segment* seg) {
  Span* s = seg->huge_span;
  if (seg->mapped_bytes > kHugeCacheEntryBytes || s->start != seg->base() + page_granule()) {
    huge_segment_destroy(seg);
    return;
  }
  // Freed: a second free of the object is reported as a double free meanwhile.
  s->kind = SpanKind::kFree;
  size_t kept;
  {
    LockGuard g(lock_);
    // What a program is likely to reuse: a share of the rest of its heap (the blocks
    // kept count in the mapped bytes, not in that rest), between the floor and the cap.
    const size_t mapped = segment_mapped_bytes(), held = bytes_ + seg->mapped_bytes;
    const size_t rest = mapped > held ? mapped - held : 0;  // racy: other threads map
    size_t limit = rest / kHugeCacheHeapShare;
    if (limit < kHugeCacheMinBytes) limit = kHugeCacheMinBytes;
    if (limit > kHugeCacheBytes) limit = kHugeCacheBytes;
    while (count_ > 0 && (count_ == kHugeCacheEntries || bytes_ + seg->mapped_bytes > limit)) {
      Segment* old = entries_[0].seg;
      remove_at(0);
      huge_segment_destroy(old);
    }
    entries_[count_++] = Entry{seg, os::now_ms()};
    kept = bytes_ += seg->mapped_bytes;
  }
  background_note_free(kept);  // resident until the decay
}

size_t huge_cache_purge(bool all) {
  LockGuard g(lock_);
  uint64_t now = os::now_ms();
  size_t released = 0;
  while (count_ > 0 && (all || now - entries_[0].freed_at_ms >= decay_purge_age_ms())) {
    Segment* old = entries_[0].seg;
    released += old->mapped_bytes;
    remove_at(0);
    huge_segment_destroy(old);
  }
  return released;
}

size_t huge_cache_bytes() {
  LockGuard g(lock_);
  return bytes_;
}

}  // namespace uslab
