// core/alloc/percpu_rseq.h: each restartable section on its own, on the sheaf of one
// class of the CPU this thread is pinned to, with that CPU's lock held (as the slow
// paths that resize and drain hold it), so that only this test moves the sheaf. The
// sheaf's own objects are taken out first and put back after.
#include <catch2/catch.hpp>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/alloc/percpu_meta.h"
#include "core/core.h"
#include "test/unit/own_ticks.h"

using namespace uslab;
using namespace uslab::percpu_internal;

namespace {

// Runs a section until it ran on `cpu` (-1: the thread was elsewhere; pinned, it is
// not for long). Sections whose -1 means something else are not run through this.
template <class F>
long on_cpu(F section) {
  for (int i = 0; i < 1000000; i++) {
    long r = section();
    if (r != -1) return r;
  }
  FAIL("a section never ran on the pinned CPU");
  return -1;
}

// Pins the calling thread to the CPU it runs on; restores its mask when destroyed.
struct Pin {
  cpu_set_t old;
  uint32_t cpu;
  Pin() {
    REQUIRE(sched_getaffinity(0, sizeof old, &old) == 0);
    cpu = static_cast<uint32_t>(sched_getcpu());
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  }
  ~Pin() { sched_setaffinity(0, sizeof old, &old); }
};

// Whether the per-CPU mode is on (only the per-thread run asks for none); decides it.
bool per_cpu_mode() {
  heap::free(heap::alloc(64));
  if (g_percpu) return true;
  const char* conf = std::getenv("USLAB_CONF");
  REQUIRE((conf && std::strstr(conf, "percpu=false")));
  return false;
}

// The sheaf of the 64 B class on the CPU this thread is pinned to, taken for a test:
// its objects are taken out (resized to nothing, closed) and put back at the end, with
// its capacity; 8 test objects come straight from the slabs (never handed out). No
// decay tick from the background thread in between: a tick would empty the sheaf.
struct TestSheaf {
  const unsigned cls = size_to_class(64);
  Pin pin;
  OwnTicks ticks;
  const uint32_t c = pin.cpu, b = begin_of(cls);
  uint32_t cap = 0;
  std::vector<void*> objs = std::vector<void*>(8), saved, out;
  long nsaved = 0;

  TestSheaf() {
    REQUIRE(c < g_cpu_count);
    heap::free(heap::alloc(64));  // on the pinned CPU now
    cap = capacity_of(c, cls);
    REQUIRE(cap >= 4);  // a class in use: its first slots are backed
    REQUIRE(g_central[shard_of_cpu(c)][cls].alloc_batch(cls, objs.data(), objs.size()) ==
            objs.size());
    saved.resize(cap);
    out.resize(cap + 8);
    LockGuard g(meta_[c].lock);
    nsaved = on_cpu([&] { return percpu_resize(c, cls, b, saved.data()); });
    REQUIRE(nsaved >= 0);
  }
  ~TestSheaf() {
    {
      LockGuard g(meta_[c].lock);
      CHECK(on_cpu([&] { return percpu_resize(c, cls, b, out.data()); }) >= 0);
      CHECK(on_cpu([&] { return percpu_resize(c, cls, b + cap, out.data()); }) == 0);
      if (nsaved > 0)
        CHECK(on_cpu([&] { return percpu_push_batch(c, cls, saved.data(), nsaved); }) == nsaved);
      CHECK(cached_of(c, cls) == static_cast<uint32_t>(nsaved));
    }
    central_free(cls, objs.data(), objs.size());
  }
};

}  // namespace

TEST_CASE("the batch sections push, pop, peek, drain and resize one CPU's sheaf", "[kernel]") {
  if (!per_cpu_mode()) return;
  TestSheaf t;
  const unsigned cls = t.cls;
  const uint32_t c = t.c, b = t.b;
  std::vector<void*>& objs = t.objs;
  std::vector<void*>& out = t.out;
  {
    LockGuard g(meta_[c].lock);
    // Resized to nothing: every cached object came out, the sheaf is closed.
    CHECK(cached_of(c, cls) == 0);
    CHECK(capacity_of(c, cls) == 0);
    CHECK(on_cpu([&] { return percpu_push_batch(c, cls, objs.data(), 3); }) == 0);
    CHECK(percpu_push_draining(c, cls, objs[0], out.data(), 4) == kSheafClosed);

    // Open with room for 4.
    CHECK(on_cpu([&] { return percpu_resize(c, cls, b + 4, out.data()); }) == 0);
    CHECK(capacity_of(c, cls) == 4);
    // A batch push takes the last objects of its array that fit.
    CHECK(on_cpu([&] { return percpu_push_batch(c, cls, objs.data(), 3); }) == 3);
    CHECK(on_cpu([&] { return percpu_push_batch(c, cls, objs.data() + 3, 3); }) == 1);
    CHECK(cached_of(c, cls) == 4);
    void* top = nullptr;
    CHECK(on_cpu([&] { return percpu_peek(c, cls, &top); }) == 0);
    CHECK(top == objs[5]);
    // Full: a draining push moves the top 2 out and leaves p to the caller.
    CHECK(percpu_push_draining(c, cls, objs[6], out.data(), 2) == 2);
    CHECK(out[0] == objs[2]);  // slots in order, the top last
    CHECK(out[1] == objs[5]);
    CHECK(cached_of(c, cls) == 2);
    // Now it fits; pushing the top again is a double free.
    CHECK(percpu_push_draining(c, cls, objs[6], out.data(), 2) == 0);
    CHECK(percpu_push_draining(c, cls, objs[6], out.data(), 2) == kSheafDoubleFree);
    CHECK(cached_of(c, cls) == 3);
    // A batch pop takes from the top, in slot order.
    CHECK(on_cpu([&] { return percpu_pop_batch(c, cls, out.data(), 2); }) == 2);
    CHECK(out[0] == objs[1]);
    CHECK(out[1] == objs[6]);
    CHECK(on_cpu([&] { return percpu_pop_batch(c, cls, out.data(), 8); }) == 1);
    CHECK(out[0] == objs[0]);
    CHECK(on_cpu([&] { return percpu_pop_batch(c, cls, out.data(), 8); }) == 0);
    // Shrinking below the cached count moves the excess out, from the top.
    CHECK(on_cpu([&] { return percpu_push_batch(c, cls, objs.data(), 4); }) == 4);
    CHECK(on_cpu([&] { return percpu_resize(c, cls, b + 1, out.data()); }) == 3);
    CHECK(out[0] == objs[1]);
    CHECK(out[2] == objs[3]);
    CHECK(cached_of(c, cls) == 1);
    CHECK(on_cpu([&] { return percpu_pop_batch(c, cls, out.data(), 8); }) == 1);
    CHECK(out[0] == objs[0]);
  }
}

namespace {

// The push's Miss and Retry for the test below: a miss is noted, a restart redone.
void* g_missed = nullptr;
void note_miss(void* p, unsigned) { g_missed = p; }
template <bool Base>
void push_retry(void* p, unsigned cls);
template <bool Base>
void push(void* p, unsigned cls) {
  percpu_push_as<note_miss, push_retry<Base>, Base>(p, cls);
}
template <bool Base>
void push_retry(void* p, unsigned cls) {
  push<Base>(p, cls);
}

// Pops and pushes through one form on a sheaf of capacity 4 holding a, b (b on top);
// leaves it so.
template <bool Base>
void pop_and_push(uint32_t c, unsigned cls, const std::vector<void*>& objs) {
  // No carry of the hit counter during the test (its tick may empty the sheaf).
  reinterpret_cast<uint16_t*>(region_of(c) + kHitsOffset)[cls] = 0;
  CHECK(percpu_alloc_as<Base>(cls) == objs[1]);
  CHECK(cached_of(c, cls) == 1);
  g_missed = nullptr;
  push<Base>(objs[2], cls);
  push<Base>(objs[2], cls);  // the top again: a double free goes to the miss path
  CHECK(g_missed == objs[2]);
  CHECK(cached_of(c, cls) == 2);
  push<Base>(objs[3], cls);
  push<Base>(objs[1], cls);
  CHECK(cached_of(c, cls) == 4);
  g_missed = nullptr;
  push<Base>(objs[4], cls);  // full
  CHECK(g_missed == objs[4]);
  CHECK(percpu_alloc_as<Base>(cls) == objs[1]);
  CHECK(percpu_alloc_as<Base>(cls) == objs[3]);
  CHECK(percpu_alloc_as<Base>(cls) == objs[2]);
  CHECK(cached_of(c, cls) == 1);
  push<Base>(objs[1], cls);
  CHECK(cached_of(c, cls) == 2);
  CHECK(hits_of(c, cls) == 4 * kHitStep);
}

}  // namespace

TEST_CASE("the fast paths' pop and push, in both addressing forms", "[kernel]") {
  if (!per_cpu_mode()) return;
  TestSheaf t;
  {
    LockGuard g(meta_[t.c].lock);
    CHECK(on_cpu([&] { return percpu_resize(t.c, t.cls, t.b + 4, t.out.data()); }) == 0);
    CHECK(on_cpu([&] { return percpu_push_batch(t.c, t.cls, t.objs.data(), 2); }) == 2);
  }
  // Without the lock: the fast paths' miss and tick paths may take it. Pinned, with
  // the ticks held, nothing else moves this sheaf.
  pop_and_push<false>(t.c, t.cls, t.objs);
  pop_and_push<true>(t.c, t.cls, t.objs);
}
