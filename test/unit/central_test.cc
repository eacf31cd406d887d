// core/alloc/central.h: slab batches hand out distinct objects, a slab's bitmap
// catches double frees (inline and external bitmaps), and empty slabs stay the
// class's spares until the decay tick or until a page heap of their node needs pages.
#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/core.h"
#include "test/unit/synthetic.h"
#include "test/unit/vm_flags.h"

using namespace uslab;

TEST_CASE("slab batches hand out distinct objects and detect double frees") {
  unsigned cls = size_to_class(48);
  std::vector<void*> objs(3 * kClassInfo[cls].objects);
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  std::vector<void*> sorted = objs;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  for (void* p : objs) {
    Span* s = heap::slab_of(p, PageMap::entry(p));
    REQUIRE(s != nullptr);
    REQUIRE(s->size_class == cls);
  }
  // An interior pointer is not an object.
  char* interior = static_cast<char*>(objs[0]) + 8;
  REQUIRE(heap::slab_of(interior, PageMap::entry(interior)) == nullptr);
  REQUIRE(g_central[0][cls].free_batch(cls, objs.data(), objs.size()) == objs.size());

  g_config.abort_on_error = false;
  uint64_t before = g_bad_free_reports.load();
  void* p;
  REQUIRE(g_central[0][cls].alloc_batch(cls, &p, 1) == 1);
  g_central[0][cls].free_batch(cls, &p, 1);
  const size_t slabs = g_central[0][cls].stats(cls).slabs;
  // Second free reaches the slab (now the class's spare, wholly free): reported, and
  // the slab stays the spare (a batch that freed it to the page heap too hung here).
  g_central[0][cls].free_batch(cls, &p, 1);
  REQUIRE(g_bad_free_reports.load() == before + 1);
  REQUIRE(g_central[0][cls].stats(cls).slabs == slabs);
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  sorted = objs;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  REQUIRE(g_central[0][cls].free_batch(cls, objs.data(), objs.size()) == objs.size());
  // The same object twice in one batch (free_batch counts a run of one slab's objects
  // in registers): the second is reported, the first freed once.
  void* twice[3];
  REQUIRE(g_central[0][cls].alloc_batch(cls, twice, 2) == 2);
  twice[2] = twice[0];
  g_central[0][cls].free_batch(cls, twice, 3);
  REQUIRE(g_bad_free_reports.load() == before + 2);
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  sorted = objs;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  REQUIRE(g_central[0][cls].free_batch(cls, objs.data(), objs.size()) == objs.size());
  int local;
  heap::free(&local);  // not uslab's: reported, not crashed
  REQUIRE(g_bad_free_reports.load() == before + 3);
  void* big = heap::alloc(100000);
  heap::free(big);
  heap::free(big);  // large double free
  REQUIRE(g_bad_free_reports.load() == before + 4);
  g_config.abort_on_error = true;
}

TEST_CASE("slabs of more objects than an inline bitmap holds keep theirs outside") {
  // 8-byte slabs hold 1024 objects; their bitmap is a record of the page heap's.
  unsigned cls = size_to_class(8);
  REQUIRE(Span::external_bitmap(kClassInfo[cls].objects));
  REQUIRE_FALSE(Span::external_bitmap(kClassInfo[size_to_class(32)].objects));
  std::vector<void*> objs(2 * kClassInfo[cls].objects + 5);
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  std::vector<void*> sorted = objs;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  Span* s = heap::slab_of(objs[1000], PageMap::entry(objs[1000]));
  REQUIRE(s != nullptr);
  REQUIRE(s->bitmap() != s->inline_bitmap);
  for (void* p : objs) track_alloc(p, 8);  // handed out as the facade would (track.h)
  for (void* p : objs) *static_cast<uint64_t*>(p) = reinterpret_cast<uintptr_t>(p);
  for (void* p : objs) REQUIRE(*static_cast<uint64_t*>(p) == reinterpret_cast<uintptr_t>(p));
  // A double free of an object whose bit lies beyond the inline words is caught.
  REQUIRE(g_central[0][cls].free_batch(cls, objs.data(), objs.size()) == objs.size());
  g_config.abort_on_error = false;
  uint64_t before = g_bad_free_reports.load();
  g_central[0][cls].free_batch(cls, &objs[1000], 1);
  REQUIRE(g_bad_free_reports.load() == before + 1);
  g_config.abort_on_error = true;
  // Carved again after their slabs went back: still distinct.
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  sorted = objs;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  REQUIRE(g_central[0][cls].free_batch(cls, objs.data(), objs.size()) == objs.size());
}

TEST_CASE("a batch takes a slab's wholly free words by address and the rest by bit") {
  // Batches of sizes that end inside a word and on a slab's last, partial word (512 B:
  // 16 objects a slab), and every other object given back and taken again: every
  // object a distinct start, each slab's in address order.
  for (size_t size : {16, 48, 512, 4096}) {
    const unsigned cls = size_to_class(size);
    INFO("class size " << size);
    std::vector<void*> objs(2 * kClassInfo[cls].objects + 37);
    for (int round = 0; round < 3; round++) {
      for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, objs.size()}) {
        if (n > objs.size()) continue;
        REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), n) == n);
        std::vector<void*> sorted(objs.begin(), objs.begin() + n);
        std::sort(sorted.begin(), sorted.end());
        REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
        for (size_t i = 0; i < n; i++) {
          Span* s = heap::slab_of(objs[i], PageMap::entry(objs[i]));
          REQUIRE(s != nullptr);
          REQUIRE(s->size_class == cls);
          if (i && heap::slab_of(objs[i - 1], PageMap::entry(objs[i - 1])) == s)
            REQUIRE(objs[i - 1] < objs[i]);
        }
        if (round == 1) {  // every other object back: taken again by bit, none twice
          std::vector<void*> odd;
          for (size_t i = 1; i < n; i += 2) odd.push_back(objs[i]);
          REQUIRE(g_central[0][cls].free_batch(cls, odd.data(), odd.size()) == odd.size());
          REQUIRE(g_central[0][cls].alloc_batch(cls, odd.data(), odd.size()) == odd.size());
          for (size_t i = 1, k = 0; i < n; i += 2) objs[i] = odd[k++];
          sorted.assign(objs.begin(), objs.begin() + n);
          std::sort(sorted.begin(), sorted.end());
          REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
          for (void* p : odd) REQUIRE(heap::slab_of(p, PageMap::entry(p)) != nullptr);
        }
        REQUIRE(g_central[0][cls].free_batch(cls, objs.data(), n) == n);
      }
    }
  }
}

TEST_CASE("empty slabs stay the class's spares, serve it first, and go back on a tick") {
  const unsigned cls = size_to_class(1500);
  CentralList& list = g_central[0][cls];
  list.release_spares(true);
  const size_t per = kClassInfo[cls].objects;
  std::vector<void*> objs(3 * per);
  REQUIRE(list.alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  const CentralStats full = list.stats(cls);
  // Every slab it took is empty again: all three kept, none given to the page heap.
  REQUIRE(list.free_batch(cls, objs.data(), objs.size()) == objs.size());
  CHECK(list.stats(cls).spares >= 3);
  CHECK(list.stats(cls).slabs == full.slabs);
  // Taken again: from the spares, not from new slabs.
  REQUIRE(list.alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  CHECK(list.stats(cls).slabs == full.slabs);
  REQUIRE(list.free_batch(cls, objs.data(), objs.size()) == objs.size());
  const size_t spares = list.stats(cls).spares;
  central_release_all_spares();  // what every decay tick does
  CHECK(list.stats(cls).spares == 0);
  CHECK(list.stats(cls).slabs == full.slabs - spares);
  central_release_all_spares();  // none left: nothing happens
  CHECK(list.stats(cls).slabs == full.slabs - spares);
}

TEST_CASE("a page heap about to map a segment takes its shard's spares back first") {
  const unsigned cls = size_to_class(3000);
  CentralList& list = g_central[0][cls];
  PageHeap& heap = g_page_heap[0];
  central_release_all_spares();
  std::vector<void*> objs(20 * kClassInfo[cls].objects);
  REQUIRE(list.alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  REQUIRE(list.free_batch(cls, objs.data(), objs.size()) == objs.size());
  REQUIRE(list.stats(cls).spares > 0);
  // No free page left in the heap: what it serves next comes from the spares or a
  // new segment.
  std::vector<Span*> taken;
  auto take_free_pages = [&] {
    Span* got[64];
    while (size_t k = heap.alloc_more(1, SpanKind::kLarge, got, 64))
      taken.insert(taken.end(), got, got + k);
  };
  take_free_pages();
  const size_t segments = heap.stats().segments;
  bool z;
  Span* s = heap.alloc(kClassInfo[cls].slab_pages, 1, SpanKind::kLarge, &z);
  REQUIRE(s != nullptr);
  CHECK(list.stats(cls).spares == 0);
  CHECK(heap.stats().segments == segments);
  taken.push_back(s);
  // Another shard's spares too (a thread that left that shard's CPU).
  ensure_two_shards();
  CentralList& other = g_central[1][cls];
  REQUIRE(other.alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  REQUIRE(other.free_batch(cls, objs.data(), objs.size()) == objs.size());
  REQUIRE(other.stats(cls).spares > 0);
  take_free_pages();
  Span* t = heap.alloc(kClassInfo[cls].slab_pages, 1, SpanKind::kLarge, &z);
  REQUIRE(t != nullptr);
  CHECK(other.stats(cls).spares == 0);
  taken.push_back(t);
  for (Span* x : taken) page_heap_of(x).free(x);
}

TEST_CASE("a shard's count of free bytes moves in steps of kFreeBytesStep a class") {
  // What each class holds free, rounded down to a step, summed over the shard's
  // classes: below the truth by less than a step a class, never above it.
  auto expected = [] {
    int64_t sum = 0;
    for (unsigned cls = 1; cls < kMaxClasses; cls++) {
      size_t size = class_size(cls);
      if (size == 0) continue;
      sum += static_cast<int64_t>(g_central[0][cls].stats(cls).free_objects * size /
                                  kFreeBytesStep * kFreeBytesStep);
    }
    return sum;
  };
  const unsigned cls = size_to_class(3000);
  std::vector<void*> objs(200);
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  // Freed a few at a time: most batches cross no step.
  for (size_t i = 0; i < objs.size(); i += 3) {
    size_t n = std::min<size_t>(3, objs.size() - i);
    REQUIRE(g_central[0][cls].free_batch(cls, objs.data() + i, n) == n);
    CHECK(g_central_free_bytes[0].bytes.load() == expected());
  }
  REQUIRE(g_central[0][cls].alloc_batch(cls, objs.data(), 50) == 50);
  CHECK(g_central_free_bytes[0].bytes.load() == expected());
  REQUIRE(g_central[0][cls].free_batch(cls, objs.data(), 50) == 50);
  CHECK(g_central_free_bytes[0].bytes.load() == expected());
}
