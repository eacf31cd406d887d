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
#include "core/heap.h"
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

}  // namespace

TEST_CASE("the batch sections push, pop, peek, drain and resize one CPU's sheaf") {
  const unsigned cls = size_to_class(64);
  heap::free(heap::alloc(64));  // the mode is decided; this CPU's sheaf of cls is open
  if (!g_percpu) {  // only the per-thread run asks for no per-CPU mode
    const char* conf = std::getenv("USLAB_CONF");
    REQUIRE((conf && std::strstr(conf, "percpu=false")));
    return;
  }
  Pin pin;
  // No decay tick from the background thread in between: a tick right after the
  // alloc below would empty the sheaf, which served it without a miss.
  OwnTicks ticks;
  const uint32_t c = pin.cpu;
  REQUIRE(c < g_cpu_count);
  heap::free(heap::alloc(64));  // on the pinned CPU now
  const uint32_t b = begin_of(cls);
  const uint32_t cap = capacity_of(c, cls);
  REQUIRE(cap >= 4);  // a class in use: its first slots are backed

  // Test objects, straight from the slabs (never handed out).
  std::vector<void*> objs(8);
  REQUIRE(g_central[shard_of_cpu(c)][cls].alloc_batch(cls, objs.data(), objs.size()) == objs.size());
  std::vector<void*> saved(cap), out(cap + 8);
  long nsaved;
  {
    LockGuard g(meta_[c].lock);
    // Resize to nothing: every cached object comes out, the sheaf is closed.
    nsaved = on_cpu([&] { return percpu_resize(c, cls, b, saved.data()); });
    REQUIRE(nsaved >= 0);
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

    // The sheaf as it was: its capacity and its objects.
    CHECK(on_cpu([&] { return percpu_resize(c, cls, b + cap, out.data()); }) == 0);
    if (nsaved > 0)
      CHECK(on_cpu([&] { return percpu_push_batch(c, cls, saved.data(), nsaved); }) == nsaved);
    CHECK(cached_of(c, cls) == static_cast<uint32_t>(nsaved));
  }
  central_free(cls, objs.data(), objs.size());
}
