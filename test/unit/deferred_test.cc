// core/deferred/deferred.h: a reader holding back the objects deferred while it is inside,
// the barrier, and a reader/writer hand-off verified object by object (also under
// the sanitizers). The grace periods themselves: grace_test.cc.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>
#include <vector>

#include "core/core.h"
#include "test/unit/held_section.h"

using namespace uslab;

TEST_CASE("objects deferred while a reader is inside stay until it leaves") {
  heap::deferred_barrier();
  heap::DeferredStats held;
  {
    HeldSection reader;
    for (int i = 0; i < 5000; i++) {
      void* p = heap::alloc(16 + i % 300);
      REQUIRE(p != nullptr);
      heap::free_deferred(p);
    }
    heap::deferred_tick();  // seals and polls: nothing may be freed yet
    held = heap::deferred_stats();
    CHECK(held.objects_pending == 5000);
  }
  heap::deferred_barrier();
  heap::DeferredStats done = heap::deferred_stats();
  CHECK(done.objects_pending == 0);
  CHECK(done.objects_freed >= held.objects_freed + 5000);
  heap::free_deferred(nullptr);  // a no-op
}

TEST_CASE("readers never see a deferred object freed under them") {
  constexpr int kSlots = 64;
  struct Obj {
    std::atomic<uint64_t> tag;
    uint64_t id;
  };
  std::atomic<Obj*> table[kSlots];
  auto make = [](uint64_t id) {
    auto* o = static_cast<Obj*>(heap::alloc(sizeof(Obj) + id % 200));
    o->id = id;
    o->tag.store(id * 31 + 7, std::memory_order_relaxed);
    return o;
  };
  for (int i = 0; i < kSlots; i++) table[i] = make(i);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; t++)
    readers.emplace_back([&, t] {
      uint64_t x = t + 1;
      while (!stop.load(std::memory_order_relaxed)) {
        heap::read_lock();
        for (int k = 0; k < 8; k++) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          Obj* o = table[(x >> 33) % kSlots].load(std::memory_order_acquire);
          if (o->tag.load(std::memory_order_relaxed) != o->id * 31 + 7) bad++;
          reads++;
        }
        heap::read_unlock();
      }
    });
  uint64_t next = kSlots;
  for (int i = 0; i < 100000 || reads.load() < 10000; i++) {
    Obj* o = make(next++);
    Obj* old = table[i % kSlots].exchange(o, std::memory_order_acq_rel);
    // Freed memory is scribbled on only after the grace period, by whoever reuses it.
    heap::free_deferred(old);
  }
  stop = true;
  for (auto& r : readers) r.join();
  for (int i = 0; i < kSlots; i++) heap::free_deferred(table[i].load());
  heap::deferred_barrier();
  CHECK(bad.load() == 0);
  CHECK(reads.load() > 0);
  CHECK(heap::deferred_stats().objects_pending == 0);
}
