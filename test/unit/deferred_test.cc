// Grace periods and deferred frees in the core: read-side section nesting, a reader
// holding back the objects deferred while it is inside, the barrier, and a
// reader/writer hand-off verified object by object (also under the sanitizers).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>
#include <vector>

#include "core/heap.h"

using namespace uslab;

TEST_CASE("read-side sections nest; the outermost unlock ends the section") {
  CHECK_FALSE(grace_in_section());
  heap::read_lock();
  uint64_t epoch = grace_oldest();
  CHECK(epoch != UINT64_MAX);
  heap::read_lock();
  heap::read_unlock();
  CHECK(grace_in_section());
  CHECK(grace_oldest() == epoch);  // an inner section keeps the outer epoch
  heap::read_unlock();
  CHECK_FALSE(grace_in_section());
}

namespace {

// A thread inside a read-side section from construction until release().
class HeldSection {
 public:
  HeldSection()
      : thread_([this] {
          heap::read_lock();
          state_ = 1;
          while (state_.load() != 2) std::this_thread::yield();
          heap::read_unlock();
          state_ = 3;
        }) {
    while (state_.load() != 1) std::this_thread::yield();
  }
  ~HeldSection() {
    release();
    thread_.join();
  }
  void release() {
    if (state_.load() == 1) state_ = 2;
  }
  bool left() const { return state_.load() == 3; }

 private:
  std::atomic<int> state_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("a grace period waits for a reader that was inside, not for later ones") {
  HeldSection reader;
  uint64_t stamp = grace_stamp();
  grace_start();
  CHECK(grace_oldest() <= stamp);  // the reader was inside before the stamp
  heap::read_lock();               // a section opened now is newer than the stamp
  CHECK(grace_oldest() <= stamp);
  heap::read_unlock();
  reader.release();
  grace_wait(stamp);
  CHECK(reader.left());
}

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
