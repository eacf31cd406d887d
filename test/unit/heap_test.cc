// core/heap/heap.h, the Heap facade: pointer ownership, every size, alignment, realloc,
// zeroing, where free finds an object's class, cross-thread frees with content
// verification, and the advice on uslab's own metadata. (Slabs: central_test.cc;
// kept huge blocks: huge_cache_test.cc; the decay of the CPU sheaves:
// percpu_test.cc.)
#include <catch2/catch.hpp>
#include <sched.h>
#include <sys/mman.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/core.h"
#include "test/unit/own_ticks.h"
#include "test/unit/pinned_cpu.h"
#include "test/unit/vm_flags.h"

using namespace uslab;

TEST_CASE("pointers uslab did not hand out are not its own") {
  int on_stack = 0;
  static int in_data = 0;
  void* from_glibc = std::malloc(64);  // the test binary itself runs on glibc
  CHECK_FALSE(heap::owns(&on_stack));
  CHECK_FALSE(heap::owns(&in_data));
  CHECK_FALSE(heap::owns(from_glibc));
  CHECK_FALSE(heap::owns(nullptr));
  CHECK_FALSE(heap::owns(reinterpret_cast<void*>(~uintptr_t{0} - 4095)));
  std::free(from_glibc);
  void* mine = heap::alloc(64);
  CHECK(heap::owns(mine));
  CHECK(heap::usable_size(mine) >= 64);
  CHECK(heap::usable_size(&on_stack) == 0);
  heap::free(mine);
}

TEST_CASE("every small and large size is usable, distinct and writable") {
  std::vector<std::pair<char*, size_t>> live;
  for (size_t size = 1; size <= 300000; size = size < 64 ? size + 1 : size * 5 / 4) {
    char* p = static_cast<char*>(heap::alloc(size));
    REQUIRE(p != nullptr);
    REQUIRE(heap::usable_size(p) >= size);
    if (size >= 16) REQUIRE(reinterpret_cast<uintptr_t>(p) % 16 == 0);
    memset(p, static_cast<int>(size & 0xff), size);
    live.emplace_back(p, size);
  }
  for (auto& [p, size] : live) {
    for (size_t i = 0; i < size; i += 7) REQUIRE(static_cast<unsigned char>(p[i]) == (size & 0xff));
    heap::free(p);
  }
}

TEST_CASE("aligned allocation honours every alignment up to 1 MiB and beyond") {
  for (size_t align = 1; align <= (size_t{8} << 20); align *= 2) {
    for (size_t size : {size_t{1}, size_t{24}, align, align + 1, size_t{100000}}) {
      void* p = heap::alloc_aligned(size, align);
      REQUIRE(p != nullptr);
      REQUIRE(reinterpret_cast<uintptr_t>(p) % align == 0);
      REQUIRE(heap::usable_size(p) >= size);
      memset(p, 0x5a, size);
      heap::free(p);
    }
  }
}

TEST_CASE("realloc keeps contents across growth, shrinking and class changes") {
  std::mt19937 rng(42);
  char* p = static_cast<char*>(heap::alloc(1));
  size_t size = 1;
  p[0] = static_cast<char>(-1);  // what step -1 would have written
  for (int step = 0; step < 2000; step++) {
    size_t next = 1 + rng() % (step % 50 == 0 ? 6000000 : 70000);
    char* q = static_cast<char*>(heap::realloc(p, next));
    REQUIRE(q != nullptr);
    size_t keep = size < next ? size : next;
    for (size_t i = 0; i < keep; i += 97) REQUIRE(q[i] == static_cast<char>(i * 7 + step - 1));
    for (size_t i = 0; i < next; i += 97) q[i] = static_cast<char>(i * 7 + step);
    p = q;
    size = next;
  }
  REQUIRE(heap::realloc(p, 0) == nullptr);
}

TEST_CASE("realloc stays in place within a class and a growing large span") {
  void* p = heap::alloc(100);
  REQUIRE(heap::realloc(p, 110) == p);
  heap::free(p);
  void* big = heap::alloc(200000);
  void* shrunk = heap::realloc(big, 150000);
  REQUIRE(shrunk == big);
  heap::free(shrunk);
}

TEST_CASE("a huge block grows and shrinks by moving its pages, not by a copy") {
  if (g_config.guard) return;
  constexpr size_t kMiB = size_t{1} << 20;
  auto* p = static_cast<unsigned char*>(heap::alloc(8 * kMiB));
  for (size_t i = 0; i < 8 * kMiB; i += 4096) p[i] = static_cast<unsigned char>(i >> 12);
  size_t mapped = segment_mapped_bytes();
  // Grown: in place or moved, the segments hold the block once (a copy would map
  // both until the free, and keep the old one in the huge cache after it).
  auto* q = static_cast<unsigned char*>(heap::realloc(p, 64 * kMiB));
  REQUIRE(q != nullptr);
  REQUIRE(heap::usable_size(q) >= 64 * kMiB);
  REQUIRE(segment_mapped_bytes() - mapped <= 56 * kMiB + kPageSize);
  bool same = true;
  for (size_t i = 0; i < 8 * kMiB; i += 4096) same &= q[i] == static_cast<unsigned char>(i >> 12);
  REQUIRE(same);
  if (q != p) REQUIRE_FALSE(heap::owns(p));  // the old address is no longer uslab's
  // Shrunk below half, still huge: in place, the tail unmapped.
  REQUIRE(heap::realloc(q, 12 * kMiB) == q);
  REQUIRE(heap::usable_size(q) == 12 * kMiB);
  REQUIRE(segment_mapped_bytes() <= mapped + 4 * kMiB + kPageSize);
  // xallocx never moves: growing in place only, or the size stays.
  size_t now = heap::resize_in_place(q, 200 * kMiB);
  REQUIRE((now == 12 * kMiB || now >= 200 * kMiB));
  heap::free(q);
}

TEST_CASE("zeroed allocation is zero even when memory is reused") {
  for (size_t size : {size_t{8}, size_t{100}, size_t{4000}, size_t{40000}, size_t{3000000}}) {
    std::vector<char*> ps;
    for (int i = 0; i < 64; i++) {
      char* p = static_cast<char*>(heap::alloc(size));
      memset(p, 0xff, size);
      ps.push_back(p);
    }
    for (char* p : ps) heap::free(p);
    for (int i = 0; i < 64; i++) {
      char* p = static_cast<char*>(heap::alloc_zeroed(size));
      size_t nonzero = 0;  // one assertion per object, not per byte
      for (size_t j = 0; j < size; j++) nonzero += p[j] != 0;
      REQUIRE(nonzero == 0);
      ps[i] = p;
    }
    for (char* p : ps) heap::free(p);
  }
}

TEST_CASE("free takes the class from the segment header, a sized free from the size") {
  heap::free(heap::alloc(16));  // the mode is chosen on the first slow path
  PinnedToOneCpu pinned;        // a freed object is the next of its class on this CPU
  OwnTicks ticks;               // and no tick empties the sheaf in between
  g_config.abort_on_error = false;
  const uint64_t before = g_bad_free_reports.load();
  for (unsigned cls = 1; cls < kNumClasses; cls++) {
    INFO("class " << cls);
    // The CPU's whole budget free for the class: with the classes before it cached, a
    // budget of 1 MiB ran out at 10 KiB, and a freed object then went past the sheaf.
    heap::trim();
    char* p = static_cast<char*>(heap::alloc_class(cls));
    REQUIRE(p != nullptr);
    const Span* s = PageMap::get(p);
    for (uint32_t i = 0; i < s->npages; i++)
      REQUIRE(page_class_of(s->start + (size_t{i} << kPageShift)) == cls);
    // By its size; by a size of another class (free() takes it).
    heap::free_sized(p, class_size(cls));
    REQUIRE(heap::alloc_class(cls) == p);
    heap::free_sized(p, cls + 1 < kNumClasses ? class_size(cls + 1) : kMaxSmall + 1);
    REQUIRE(heap::alloc_class(cls) == p);
    // A header that disagrees with the page map: reported, and p is not cached.
    std::atomic<uint8_t>& recorded = s->segment->page_class[(p - s->segment->base()) >> kPageShift];
    recorded.store(cls == 1 ? 2 : 1);
    heap::free(p);
    REQUIRE(g_bad_free_reports.load() == before + cls);
    void* other = heap::alloc_class(cls);
    REQUIRE(other != p);
    recorded.store(static_cast<uint8_t>(cls));
    heap::free(other);
    heap::free(p);
    REQUIRE(heap::alloc_class(cls) == p);
    heap::free(p);
  }
  g_config.abort_on_error = true;
}

TEST_CASE("objects freed by other threads stay intact and are reused") {
  constexpr int kThreads = 4, kPerThread = 20000;
  std::vector<std::vector<uint64_t*>> handoff(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([t, &handoff] {
      std::mt19937 rng(t);
      for (int i = 0; i < kPerThread; i++) {
        size_t words = 1 + rng() % 200;
        uint64_t* p = static_cast<uint64_t*>(heap::alloc(words * 8));
        p[0] = words;
        for (size_t w = 1; w < words; w++) p[w] = reinterpret_cast<uintptr_t>(p) ^ w;
        handoff[t].push_back(p);
      }
    });
  for (auto& th : ts) th.join();
  ts.clear();
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([t, &handoff] {
      for (uint64_t* p : handoff[(t + 1) % kThreads]) {
        for (size_t w = 1; w < p[0]; w++)
          if (p[w] != (reinterpret_cast<uintptr_t>(p) ^ w)) std::abort();
        heap::free(p);
      }
    });
  for (auto& th : ts) th.join();
  heap::trim();
}

TEST_CASE("uslab's own arrays and metadata are advised off transparent huge pages", "[kernel]") {
  // Under the system setting "always", the first touch of .lbss (3.7 MiB of arrays)
  // gave every process a 2 MiB huge page: idle_return in a Debian guest stayed 2-3
  // MiB above its start for good. VmFlags "nh" is MADV_NOHUGEPAGE.
  heap::free(heap::alloc(64));  // the heap is in use
  CHECK(has_flag(vm_flags(&g_page_heap[0]), "nh"));
  CHECK(has_flag(vm_flags(&g_central[0][1]), "nh"));
  void* meta = g_meta_arena.alloc(64, 64);
  REQUIRE(meta != nullptr);
  CHECK(has_flag(vm_flags(meta), "nh"));
  if (g_percpu) CHECK(has_flag(vm_flags(g_cpu_region), "nh"));
}
