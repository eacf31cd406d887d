// core/alloc/page_heap.cc — span allocation, coalescing and decay; see page_heap.h.
// Every function below that ends in _locked, and every private helper, runs with
// lock_ held.
#include "core/alloc/page_heap.h"

#include "core/alloc/background.h"
#include "core/alloc/memory_limit.h"

#include <cerrno>
#include <cstring>
#include <type_traits>

namespace uslab {

USLAB_LARGE_ZERO constinit PageHeap g_page_heap[kMaxShards];
USLAB_SHARD_TABLE(g_page_heap);
USLAB_LOCK_SET(
    kPageHeap, [] { return shard_count_now(); },
    [](uint32_t sh) { return &g_page_heap[sh].lock(); });
constinit MetaPool<Span> g_span_pool;
USLAB_LOCK_ONE(kMetaPool, g_span_pool.lock());

namespace {
constinit std::atomic<SpareReclaim> spare_reclaim_{nullptr};
}  // namespace

void page_heap_set_spare_reclaim(SpareReclaim fn) {
  if (spare_reclaim_.load(std::memory_order_relaxed) != fn)
    spare_reclaim_.store(fn, std::memory_order_release);
}

// A private heap (the unit tests') is no shard's: it neither lends nor borrows.
unsigned PageHeap::index() const {
  return this >= g_page_heap && this < g_page_heap + kMaxShards
             ? static_cast<unsigned>(this - g_page_heap)
             : kPrivate;
}

Span* PageHeap::new_span_desc() {
  Span* s = descs_.alloc();
  if (s) memset(s, 0, offsetof(Span, inline_bitmap));
  return s;
}

void PageHeap::set_bounds(Span* s) {
  PageMap::set(s->start, s);
  PageMap::set(s->start + (s->bytes() - kPageSize), s);
}

void PageHeap::clear_bounds(Span* s) {
  PageMap::clear(s->start);
  PageMap::clear(s->start + (s->bytes() - kPageSize));
}

void PageHeap::SpanLists::push(Span* s) {
  size_t i = s->npages;
  by_length[i].push_front(s);
  nonempty[i / 64] |= uint64_t{1} << (i % 64);
}

void PageHeap::SpanLists::remove(Span* s) {
  size_t i = s->npages;
  by_length[i].remove(s);
  if (by_length[i].empty()) nonempty[i / 64] &= ~(uint64_t{1} << (i % 64));
}

Span* PageHeap::SpanLists::shortest(size_t npages) const {
  for (size_t w = npages / 64; w < kPagesPerSegment / 64; w++) {
    uint64_t bits = nonempty[w];
    if (w == npages / 64) bits &= ~uint64_t{0} << (npages % 64);
    if (bits) return by_length[w * 64 + __builtin_ctzll(bits)].front();
  }
  return nullptr;
}

void PageHeap::insert_free(Span* s) {
  // page_heap.h: a free span's first and last pages map to it, and it starts at its
  // first page.
  USLAB_DCHECK(s->kind == SpanKind::kFree && s->start == s->segment->page_addr(s->first_page));
  USLAB_DCHECK(PageMap::get(s->start) == s &&
               PageMap::get(s->start + (s->bytes() - kPageSize)) == s);
  (s->dirty ? dirty_lists_ : clean_lists_).push(s);
  // Stored atomically: read without this lock by other heaps' alloc.
  __atomic_store_n(&free_pages_, free_pages_ + s->npages, __ATOMIC_RELAXED);
  if (s->dirty) __atomic_store_n(&dirty_pages_, dirty_pages_ + s->npages, __ATOMIC_RELAXED);
}

void PageHeap::remove_free(Span* s) {
  (s->dirty ? dirty_lists_ : clean_lists_).remove(s);
  __atomic_store_n(&free_pages_, free_pages_ - s->npages, __ATOMIC_RELAXED);
  if (s->dirty) __atomic_store_n(&dirty_pages_, dirty_pages_ - s->npages, __ATOMIC_RELAXED);
}

// Whether a neighbour found through the page map is a free span. It may be a slab
// whose central list writes on_partial meanwhile (under that list's lock): GCC merged
// the compares of kind and dirty into one load of the word holding on_partial, a race
// ThreadSanitizer caught. kind itself changes only under this heap's lock.
bool PageHeap::is_free(const Span* n) {
  using Raw = std::underlying_type_t<SpanKind>;  // clang's __atomic takes integers only
  return n && __atomic_load_n(reinterpret_cast<const Raw*>(&n->kind), __ATOMIC_RELAXED) ==
                  static_cast<Raw>(SpanKind::kFree);
}

Span* PageHeap::find_free(size_t npages) {
  Span* s = dirty_lists_.shortest(npages);
  return s ? s : clean_lists_.shortest(npages);
}

Span* PageHeap::grow_heap(size_t want, ObjectSize objects) {
  Span* s = new_span_desc();
  if (!s) return nullptr;
  // Transparent huge pages (page_heap.h): a big heap whose last segment filled by a
  // span of the same size of objects was measured dense advises its new one,
  // but for every kThpProbeEvery-th (it measures again) and one made for a span that
  // leaves a long tail; the others are kept off them under the "always" setting.
  const size_t k = static_cast<size_t>(objects);
  bool huge = false;
  if (segments_ >= kThpMinSegments && want < kThpEagerMaxPages && thp_eager_[k])
    huge = ++thp_made_eager_[k] % kThpProbeEvery != 0;
  // Under "always", a segment not advised huge is advised off them, and so is every
  // segment where a huge page is larger than one (a 16 or 64 KiB OS page: 32 or 512
  // MiB, which neighbouring segments merged into one mapping could make resident).
  const bool always = os::thp_mode() == os::ThpMode::kAlways;
  Segment* seg = segment_create_normal(
      (thp_enabled() && (huge || always)) || (always && !huge_page_fits_segment()), huge && thp_enabled());
  if (!seg) {
    descs_.free(s);
    return nullptr;
  }
  seg->heap = index();
  if (index() != kPrivate) {
    note_shard_used(index());
    bind_to_shard_node(seg, kSegmentSize, index());
  }
  segments_++;
  if (seg->huge) huge_segments_++;
  s->segment = seg;
  s->first_page = 1;
  s->npages = kMaxPages;
  s->start = seg->page_addr(1);
  s->kind = SpanKind::kFree;
  if (seg->huge) {  // see Span::kFreshHuge: it decays from now
    s->dirty = Span::kFreshHuge;
    s->freed_at_ms = os::now_ms();
  }
  set_bounds(s);
  insert_free(s);
  return s;
}

// Splits the first `npages` off free span s (not on a list) into a new descriptor,
// which is returned; s keeps the rest. Both inherit s's dirty state.
Span* PageHeap::split_front(Span* s, size_t npages) {
  Span* front = new_span_desc();
  if (!front) return nullptr;
  front->segment = s->segment;
  front->first_page = s->first_page;
  front->npages = static_cast<uint32_t>(npages);
  front->start = s->start;
  front->kind = SpanKind::kFree;
  front->dirty = s->dirty;
  front->freed_at_ms = s->freed_at_ms;
  s->first_page += static_cast<uint32_t>(npages);
  s->npages -= static_cast<uint32_t>(npages);
  s->start += npages << kPageShift;
  set_bounds(front);
  set_bounds(s);
  return front;
}

Span* PageHeap::alloc(size_t npages, size_t align_pages, SpanKind kind, bool* zeroed,
                      ObjectSize objects) {
  // The memory limit first (it may release every cache and free page: no lock held).
  if (!limit_admit((npages + align_pages - 1) << kPageShift)) return nullptr;
  {
    LockGuard g(lock_);
    Span* s = alloc_locked(npages, align_pages, kind, zeroed, false, objects);
    maybe_purge(os::now_ms());
    if (s) return s;
  }
  // The central lists' spares next (central.h): empty slabs that would otherwise sit
  // beside another heap's pages or a new segment until the tick.
  unsigned n = index() == kPrivate ? 0 : shard_count();
  SpareReclaim reclaim = spare_reclaim_.load(std::memory_order_acquire);
  if (n && reclaim && reclaim(index())) {
    LockGuard g(lock_);
    if (Span* s = alloc_locked(npages, align_pages, kind, zeroed, false, objects)) return s;
  }
  // Busy heaps are skipped: waiting would cost more than mapping a segment.
  for (unsigned i = 1; i < n; i++) {
    PageHeap& other = g_page_heap[(index() + i) % n];
    if (node_of_shard((index() + i) % n) != node_of_shard(index()))
      continue;  // its memory is elsewhere
    if (__atomic_load_n(&other.free_pages_, __ATOMIC_RELAXED) < npages + kStealReserve ||
        !other.lock_.try_lock())
      continue;
    Span* s = other.alloc_locked(npages, align_pages, kind, zeroed, false, objects);
    // Its dirty holes are too short for the request, as this heap's own that the
    // growth below purges: without this, a program that migrated to another CPU
    // kept the holes of the heap it left resident (a higher fragmentation peak).
    if (!s) other.purge_short(npages + align_pages - 1, false);
    other.lock_.unlock();
    if (s) return s;
  }
  {
    LockGuard g(lock_);
    if (Span* s = alloc_locked(npages, align_pages, kind, zeroed, true, objects)) return s;
  }
  // No segment could be mapped (RLIMIT_AS, mmap refused): free pages of any other
  // heap, another node's too, waiting for its lock, rather than ENOMEM. Under
  // RLIMIT_AS on a 2-node guest, the small objects after a large exhaustion failed at
  // the first malloc when the thread had moved to the other node's CPUs. The other
  // nodes' empty slabs go back to their heaps first: objects of a class exhausted and
  // freed on one node were spares there, and the class failed on the other node.
  for (unsigned i = 1; reclaim && i < n; i++)
    if (node_of_shard((index() + i) % n) != node_of_shard(index())) reclaim((index() + i) % n);
  for (unsigned i = 1; i < n; i++) {
    PageHeap& other = g_page_heap[(index() + i) % n];
    if (__atomic_load_n(&other.free_pages_, __ATOMIC_RELAXED) < npages + align_pages - 1) continue;
    LockGuard g(other.lock_);
    if (Span* s = other.alloc_locked(npages, align_pages, kind, zeroed, false, objects)) return s;
  }
  return nullptr;
}

size_t PageHeap::alloc_more(size_t npages, SpanKind kind, Span** out, size_t n,
                            ObjectSize objects) {
  if (!limit_admit((npages * n) << kPageShift)) return 0;
  LockGuard g(lock_);
  size_t got = 0;
  bool zeroed;
  while (got < n && (out[got] = alloc_locked(npages, 1, kind, &zeroed, false, objects))) got++;
  return got;
}

Span* PageHeap::alloc_locked(size_t npages, size_t align_pages, SpanKind kind, bool* zeroed,
                             bool grow, ObjectSize objects) {
  USLAB_DCHECK(lock_.held());
  if (npages == 0 || align_pages == 0 || npages + align_pages - 1 > kMaxPages) return nullptr;
  size_t want = npages + align_pages - 1;
  Span* s = find_free(want);
  if (!s && grow) s = merge_mixed(want);
  if (!s && grow) {
    purge_short(want, true);
    s = grow_heap(want, objects);
  }
  if (!s) return nullptr;
  remove_free(s);
  // Leading pages up to the alignment go back to the free lists.
  size_t lead = (align_pages - (s->first_page & (align_pages - 1))) & (align_pages - 1);
  if (lead) {
    Span* front = split_front(s, lead);
    if (!front) {
      insert_free(s);
      return nullptr;
    }
    insert_free(front);
  }
  if (s->npages > npages) {
    Span* front = split_front(s, npages);
    if (!front) {
      insert_free(s);
      return nullptr;
    }
    insert_free(s);
    s = front;
  }
  *zeroed = s->dirty != Span::kDirty;
  s->kind = kind;
  s->dirty = Span::kClean;
  s->prev = s->next = nullptr;
  use_pages(s->segment, s->start, s->npages, objects);
  if (kind == SpanKind::kLarge) large_pages_ += s->npages;
  return s;
}

void PageHeap::free(Span* const* spans, size_t n) {
  size_t dirty;
  {
    LockGuard g(lock_);
    uint64_t now = os::now_ms();
    for (size_t i = 0; i < n; i++) free_locked(spans[i], now);
    maybe_purge(now);
    dirty = dirty_pages_;
  }
  after_free(dirty);
}

void PageHeap::after_free(size_t dirty_pages) { background_note_free(dirty_pages << kPageShift); }

void page_heap_free_spans(Span* const* spans, size_t n) {
  for (size_t i = 0, j; i < n; i = j) {
    PageHeap& heap = page_heap_of(spans[i]);
    for (j = i + 1; j < n && &page_heap_of(spans[j]) == &heap; j++) {
    }
    heap.free(spans + i, j - i);
  }
}

uint64_t* PageHeap::alloc_bitmap() {
  LockGuard g(lock_);
  Span* record = descs_.alloc();
  if (record) memset(record, 0, sizeof *record);
  return reinterpret_cast<uint64_t*>(record);
}

void PageHeap::free_locked(Span* s, uint64_t now) {
  USLAB_DCHECK(lock_.held());
  Segment* seg = s->segment;
  if (s->kind == SpanKind::kSlab) {
    for (uint32_t i = 1; i + 1 < s->npages; i++)
      PageMap::clear(s->start + (size_t{i} << kPageShift));
    if (Span::external_bitmap(s->capacity)) descs_.free(reinterpret_cast<Span*>(s->bitmap()));
    s->capacity = 0;
  }
  if (s->kind == SpanKind::kLarge) large_pages_ -= s->npages;
  seg->used_pages -= s->npages;
  s->kind = SpanKind::kFree;
  s->size_class = 0;
  s->obj_size = 0;
  s->dirty = Span::kDirty;
  s->freed_at_ms = now;
  // Until the next purge sorts them again, every dirty page counts as work (backlog):
  // pages freed now may lie where nothing keeps them.
  thp_kept_pages_ = shared_kept_pages_ = 0;

  coalesce(s);
  insert_free(s);
}

// Spans of different states (Span::dirty) are not merged: a merged span would have
// one state, and the pages of the other would be misplaced (dirty ones left out of
// the decay, or clean ones taken first as if resident). The merged span
// keeps the age of its oldest part: taking the newest would let a slab freed now and
// then at the edge of a large dirty span keep it from ever decaying.
void PageHeap::coalesce(Span* s, bool any_state) {
  Segment* seg = s->segment;
  auto mergeable = [s, any_state](const Span* n) {
    return is_free(n) && (any_state || n->dirty == s->dirty);
  };
  auto absorb = [&](Span* n) USLAB_REQUIRES(lock_) {
    if (n->freed_at_ms < s->freed_at_ms) s->freed_at_ms = n->freed_at_ms;
    remove_free(n);
    clear_bounds(n);
    clear_bounds(s);
    s->npages += n->npages;
    descs_.free(n);
  };
  bool merged;
  do {  // once, but for any_state: its neighbours' neighbours may be free too
    merged = false;
    if (s->first_page > 1) {
      Span* prev = PageMap::get(seg->page_addr(s->first_page - 1));
      if (mergeable(prev)) {
        s->first_page = prev->first_page;
        s->start = prev->start;
        absorb(prev);
        merged = true;
      }
    }
    uint32_t after = s->first_page + s->npages;
    if (after < kPagesPerSegment) {
      Span* next = PageMap::get(seg->page_addr(after));
      if (mergeable(next)) {
        absorb(next);
        merged = true;
      }
    }
  } while (any_state && merged);
  if (any_state) s->dirty = Span::kDirty;
  set_bounds(s);
}

bool PageHeap::try_grow(Span* s, size_t new_npages) {
  LockGuard g(lock_);
  Segment* seg = s->segment;
  if (seg->kind != SegmentKind::kNormal || new_npages <= s->npages) return false;
  const uint32_t end = s->first_page + s->npages;
  const size_t extra = new_npages - s->npages;
  // The free spans that follow s (dirty and clean ones alternate: coalesce).
  Span* last = nullptr;
  size_t have = 0;
  for (uint32_t p = end; have < extra; p += last->npages) {
    last = p < kPagesPerSegment ? PageMap::get(seg->page_addr(p)) : nullptr;
    if (!is_free(last)) return false;
    have += last->npages;
  }
  if (have > extra) {  // the last one's tail stays free
    remove_free(last);
    Span* front = split_front(last, last->npages - (have - extra));
    insert_free(last);
    if (!front) return false;
    insert_free(front);
  }
  for (uint32_t p = end; p < end + extra;) {
    Span* n = PageMap::get(seg->page_addr(p));
    p += n->npages;
    remove_free(n);
    clear_bounds(n);
    descs_.free(n);
  }
  if (s->npages > 1) PageMap::clear(s->start + (s->bytes() - kPageSize));
  s->npages += static_cast<uint32_t>(extra);
  use_pages(seg, s->start + (s->bytes() - extra * kPageSize), extra, ObjectSize::kPageOrMore);
  large_pages_ += extra;
  set_bounds(s);
  return true;
}

void PageHeap::shrink(Span* s, size_t new_npages) {
  size_t dirty;
  {
    LockGuard g(lock_);
    if (new_npages == 0 || new_npages >= s->npages) return;
    Span* tail = new_span_desc();
    if (!tail) return;  // keep the pages; shrinking is only an optimisation
    Segment* seg = s->segment;
    if (s->npages > 1) PageMap::clear(s->start + (s->bytes() - kPageSize));
    tail->segment = seg;
    tail->kind = SpanKind::kLarge;
    tail->first_page = s->first_page + static_cast<uint32_t>(new_npages);
    tail->npages = s->npages - static_cast<uint32_t>(new_npages);
    tail->start = s->start + (new_npages << kPageShift);
    s->npages = static_cast<uint32_t>(new_npages);
    set_bounds(s);
    set_bounds(tail);
    uint64_t now = os::now_ms();
    free_locked(tail, now);
    maybe_purge(now);
    dirty = dirty_pages_;
  }
  after_free(dirty);
}

void PageHeap::maybe_purge(uint64_t now) {
  if (now < next_purge_ms_) return;
  next_purge_ms_ = now + decay_tick_ms();
  if (dirty_pages_ || free_pages_ >= kMaxPages) purge_locked(now, false);
}

Span* PageHeap::purge_span(Span* s, size_t* bytes, size_t* kept) {
  // Whole OS pages only (page_heap.h): s's own, and those it shares with free
  // neighbours, whose pages may go too (a clean one's read as zero either way).
  Segment* seg = s->segment;
  const uintptr_t start = reinterpret_cast<uintptr_t>(s->start), end = start + s->bytes();
  uintptr_t lo = os::page_up(start), hi = os::page_down(end);
  if (lo != start && s->first_page > 1) {
    const Span* prev = PageMap::get(seg->page_addr(s->first_page - 1));
    if (is_free(prev) && reinterpret_cast<uintptr_t>(prev->start) <= os::page_down(start))
      lo = os::page_down(start);
  }
  const uint32_t after = s->first_page + s->npages;
  if (hi != end && after < kPagesPerSegment) {
    const Span* next = PageMap::get(seg->page_addr(after));
    if (is_free(next) && reinterpret_cast<uintptr_t>(next->start) + next->bytes() >= os::page_up(end))
      hi = os::page_up(end);
  }
  *bytes = 0;
  if (kept) *kept = s->npages;
  if (lo >= hi) return nullptr;  // within OS pages that spans in use share: stays dirty
  USLAB_PROBE(page_purge, reinterpret_cast<char*>(lo), hi - lo);
  if (seg->huge) {  // see page_heap.h: the kernel splits its huge pages
    thp_splits_++;
    advise_huge(seg, false);
  }
  // Refused (locked pages), the pages are zeroed instead: a clean span's read as zero
  // (calloc counts on it), resident or not.
  if (os::purge_zeroing(reinterpret_cast<void*>(lo), hi - lo)) *bytes = hi - lo;
  if (kept) *kept = ((lo > start ? lo - start : 0) + (hi < end ? end - hi : 0)) >> kPageShift;
  remove_free(s);
  // The pages at either end that share an OS page with a span in use stay dirty,
  // apart (a failed split leaves all of s dirty: its purged pages read as zero).
  if (lo > start) {
    Span* head = split_front(s, (lo - start) >> kPageShift);
    if (!head) return insert_free(s), nullptr;
    insert_free(head);
  }
  if (hi < end) {
    Span* middle = split_front(s, (hi - lo) >> kPageShift);
    if (!middle) return insert_free(s), nullptr;
    insert_free(s);
    s = middle;
  }
  s->dirty = Span::kClean;
  coalesce(s);  // with clean neighbours only: the dirty list being walked stays intact
  insert_free(s);
  return s;
}

Span* PageHeap::merge_mixed(size_t npages) {
  auto clean_pages = [](const Span* n) {
    return is_free(n) && n->dirty == Span::kClean ? size_t{n->npages} : 0;
  };
  for (size_t i = 1; i <= kMaxPages; i++) {
    Span* next;
    for (Span* s = dirty_lists_.by_length[i].front(); s; s = next) {
      next = s->next;
      Segment* seg = s->segment;
      uint32_t after = s->first_page + s->npages;
      size_t run = s->npages;
      if (s->first_page > 1) run += clean_pages(PageMap::get(seg->page_addr(s->first_page - 1)));
      if (after < kPagesPerSegment) run += clean_pages(PageMap::get(seg->page_addr(after)));
      if (run < npages) continue;
      size_t bytes;
      Span* clean = purge_span(s, &bytes);  // merged with its clean neighbours
      purged_bytes_ += bytes;
      if (clean && clean->npages >= npages) return clean;
      // Its ends stayed dirty (on an OS page a span in use shares, as pages after a
      // segment's header do with 16 KiB pages): the run is taken whole, as dirty.
      Span* run_span = clean ? clean : s;
      remove_free(run_span);
      coalesce(run_span, true);
      insert_free(run_span);
      if (run_span->npages >= npages) return run_span;
      next = nullptr;  // the lists changed: the caller grows the heap instead
    }
  }
  return nullptr;
}

void PageHeap::purge_short(size_t npages, bool growing) {
  size_t in_use = segments_ * kMaxPages - free_pages_;
  size_t share = growing ? in_use / kDirtyShare : 0;
  size_t allowance = share > kMaxPages ? share : kMaxPages;
  size_t purged = 0;
  for (size_t i = 1; i < npages && dirty_pages_ > allowance; i++) {
    Span* next;
    for (Span* s = dirty_lists_.by_length[i].front(); s && dirty_pages_ > allowance; s = next) {
      next = s->next;
      if (keeps_huge(s->segment)) continue;  // kept as the decay clock keeps them
      size_t bytes;
      purge_span(s, &bytes);
      purged += bytes;
    }
  }
  purged_bytes_ += purged;
}

size_t PageHeap::purge(bool all) {
  LockGuard g(lock_);
  return purge_locked(os::now_ms(), all);
}

size_t PageHeap::purge_locked(uint64_t now, bool all) {
  USLAB_DCHECK(lock_.held());
  uint64_t decay = decay_purge_age_ms();
  size_t purged = 0;
  auto old = [&](const Span* s) { return all || now - s->freed_at_ms >= decay; };
  // A wholly free segment gives its address space back too (not while MADV_COLLAPSE
  // runs on it: the next purge does).
  auto unmap = [&](Span* s) USLAB_REQUIRES(lock_) {
    remove_free(s);
    segments_--;
    Segment* seg = s->segment;
    unqueue_collapse(seg);
    if (seg->huge) huge_segments_--;
    descs_.free(s);
    segment_destroy(seg);
  };
  size_t kept = 0, shared = 0;
  for (size_t i = 1; i <= kMaxPages; i++) {
    Span* next;
    for (Span* s = dirty_lists_.by_length[i].front(); s; s = next) {
      next = s->next;
      if (!old(s)) continue;
      if (!all && keeps_huge(s->segment)) {
        kept += s->npages;
      } else if (i < kMaxPages) {
        size_t bytes, left_dirty;
        Span* clean = purge_span(s, &bytes, &left_dirty);
        purged += bytes;
        Span* left = clean ? clean : s;
        if (s->segment->used_pages == 0 && left->npages < kMaxPages) {
          // A wholly free segment left in spans of both states (dirty pages on the OS
          // page its header shares): one span, unmapped at the end of this walk.
          remove_free(left);
          coalesce(left, true);
          insert_free(left);
          next = dirty_lists_.by_length[i].front();  // its neighbours left the lists
        } else {
          shared += left_dirty;  // in shorter lists now (seen again by the next purge)
        }
      } else if (!s->segment->collapsing) {
        purged += s->bytes();
        unmap(s);
      }
    }
  }
  // Then the clean ones, with those the purges above made whole.
  Span* next;
  for (Span* s = clean_lists_.by_length[kMaxPages].front(); s; s = next) {
    next = s->next;
    if (old(s) && !s->segment->collapsing) unmap(s);
  }
  purged_bytes_ += purged;
  thp_kept_pages_ = kept;
  shared_kept_pages_ = shared;
  // Descriptor pages left empty by the spans above (and before) go back a tick after:
  // they hold no program data, and the pool fills its pages in use first; after a
  // whole decay they were the last of a peak to go back.
  descs_.purge(now, decay_tick_ms(), all);
  return purged;
}

bool PageHeap::backlog(size_t* dirty_bytes) {
  LockGuard g(lock_);
  // Pages the last purge kept inside huge pages are no work until a purge could
  // take them: the background thread may sleep on them.
  // Nor are those that share an OS page with a span in use.
  const size_t kept = thp_kept_pages_ + shared_kept_pages_;
  const size_t waiting = dirty_pages_ > kept ? dirty_pages_ - kept : 0;
  *dirty_bytes = waiting << kPageShift;
  return waiting || !clean_lists_.by_length[kMaxPages].empty() || descs_.has_empty();
}

size_t PageHeap::clean_free_bytes() const {
  size_t free = __atomic_load_n(&free_pages_, __ATOMIC_RELAXED);
  size_t dirty = __atomic_load_n(&dirty_pages_, __ATOMIC_RELAXED);
  return free > dirty ? (free - dirty) << kPageShift : 0;
}

PageHeapStats PageHeap::stats() {
  LockGuard g(lock_);
  return PageHeapStats{segments_,
                       free_pages_ << kPageShift,
                       dirty_pages_ << kPageShift,
                       large_pages_ << kPageShift,
                       purged_bytes_,
                       huge_segments_,
                       thp_splits_,
                       thp_collapses_,
                       thp_kept_pages_ << kPageShift};
}

bool PageHeap::keeps_huge(const Segment* seg) const {
  return seg->huge && kMaxPages - seg->used_pages <= kMaxPages / kThpKeepFreeShare;
}

bool PageHeap::thp_enabled() {
  return g_config.thp && os::thp_mode() != os::ThpMode::kNever && huge_page_fits_segment();
}

void PageHeap::use_pages(Segment* seg, const char* fresh, size_t npages, ObjectSize objects) {
  seg->used_pages += static_cast<uint32_t>(npages);
  if (kMaxPages - seg->used_pages >= kThpFullSlack || seg->huge || !thp_enabled()) return;
  // Full: dense if the program touched what it had of it before (page_heap.h). A
  // segment one span filled tells nothing.
  const size_t before = size_t{seg->used_pages - npages} << kPageShift;  // bytes
  if (before == 0) return;
  // A segment found sparse is measured again a decay tick later, not at every fill:
  // a program that empties and fills a segment without touching its objects (`bench
  // micro`'s N x alloc of 1 KiB: several mincore walks a round) paid a good part of
  // its time in the kernel's page-table walk.
  const uint64_t now = os::now_ms();
  if (seg->sparse_at_ms && now - seg->sparse_at_ms < decay_tick_ms()) return;
  const size_t all = os::resident_bytes(seg->page_addr(1), kMaxPages * kPageSize);
  const size_t fresh_resident = os::resident_bytes(fresh, npages * kPageSize);
  const size_t resident = all > fresh_resident ? all - fresh_resident : 0;
  const bool dense = resident * 8 >= before * kThpDenseEighths;
  thp_eager_[static_cast<size_t>(objects)] = dense;
  seg->sparse_at_ms = dense ? 0 : now;
  if (!dense) return;
  advise_huge(seg, true);
  // The measured pages: the whole 2 MiB blocks before `fresh`, which the program may
  // never touch (a huge page there would make it all resident).
  const size_t measured = static_cast<size_t>(fresh - seg->base()) & ~(os::huge_page_bytes() - 1);
  if (seg->huge && measured && !seg->collapse_queued && collapse_queued_ < kCollapseQueue &&
      !collapse_unsupported_.load(std::memory_order_relaxed)) {
    collapse_queue_[collapse_queued_++] = CollapseRange{seg, measured, os::now_ms()};
    seg->collapse_queued = true;
    collapse_waiting_.store(true, std::memory_order_relaxed);
  }
}

void PageHeap::advise_huge(Segment* seg, bool huge) {
  if (!thp_enabled()) return;
  if (!huge) unqueue_collapse(seg);
  if (!os::advise_huge(seg, kSegmentSize, huge) || huge == seg->huge) return;
  seg->huge = huge;
  huge ? huge_segments_++ : huge_segments_--;
}

void PageHeap::unqueue_collapse(Segment* seg) {
  if (!seg->collapse_queued) return;
  seg->collapse_queued = false;
  size_t k = 0;
  for (size_t i = 0; i < collapse_queued_; i++)
    if (collapse_queue_[i].seg != seg) collapse_queue_[k++] = collapse_queue_[i];
  collapse_queued_ = k;
  if (k == 0) collapse_waiting_.store(false, std::memory_order_relaxed);
}

bool PageHeap::collapse_one(uint64_t queued_by_ms) {
  if (!collapse_waiting_.load(std::memory_order_relaxed)) return false;
  CollapseRange r;
  {
    LockGuard g(lock_);
    if (collapse_queued_ == 0 || collapse_queue_[0].queued_ms > queued_by_ms) return false;
    r = collapse_queue_[0];
    unqueue_collapse(r.seg);
    r.seg->collapsing = true;
  }
  Segment* seg = r.seg;
  int err = os::collapse(seg, r.bytes);
  LockGuard g(lock_);
  seg->collapsing = false;
  // EINVAL on a segment still advised: a kernel without MADV_COLLAPSE (before 6.1).
  if (err == EINVAL && seg->huge) collapse_unsupported_.store(true, std::memory_order_relaxed);
  if (err) return false;
  thp_collapses_++;
  return true;
}

void page_heap_collapse_all(uint64_t queued_by_ms) {
  for_each_shard_used([=](unsigned sh) { g_page_heap[sh].collapse_one(queued_by_ms); });
}

size_t page_heap_purge_all(bool all) {
  size_t purged = 0;
  for_each_shard_used([&](unsigned sh) { purged += g_page_heap[sh].purge(all); });
  return purged;
}

PageHeapStats page_heap_stats() {
  return sum_over_shards([](unsigned sh) { return g_page_heap[sh].stats(); });
}

}  // namespace uslab
