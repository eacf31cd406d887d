// core/alloc/decay.h — the decay clock: when freed memory goes back to the OS.
//
// Owns: the decay schedule (below: decay_ms from USLAB_CONF, config.h) and the tick
// (every decay_tick_ms) and what it does, in order:
// the depots' idle sheaves back to the slabs, the CPU sheaves trimmed
// (percpu_decay_sheaves), spare slabs back, the facade's hook (deferred frees: grace
// periods advance even in a program that stopped deferring), then the page heaps and
// the huge cache return what was free for decay_purge_age_ms. Also the backlog:
// what a tick could still give back, which the background thread (background.h)
// sleeps on.
//
// Who runs the tick: whichever caller notices it is due. decay_notice is the one
// entry the slow paths use: every 8th sheaf miss of a CPU and every carry of a
// class's hit counter (4096 allocations), thread-cache refills, every large and huge
// allocation, free and resize, the bulk and deferred slow paths; and the background
// thread. A program that only makes large calls after a peak, or only hits its
// caches, still reaches it; one that makes no call at all has the thread.
//
// Locking: the tick's clock is one atomic; a compare-and-swap picks the one thread
// that runs a due tick, which takes each layer's locks in turn, one at a time.
// decay_notice may start the background thread (pthread_create, which allocates), so
// it is called with no lock of the heap held: only at the ends of slow paths (a
// deferred free's slot lock may be held: the tick and the thread's start skip busy
// slots and need none).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/platform/platform.h"

namespace uslab {

// The decay schedule that keeps decay_ms a bound, not a minimum: the tick (on slow
// paths and the background thread, decay.h) runs every decay_ms/16; caches give back
// on it what went unused over kCacheIdleTicks ticks in a row, which takes at most
// kCacheIdleTicks + 1 ticks after the program's free (a sheaf or depot sheaf must stay
// unused over whole intervals), and free pages are purged on the first tick after they
// are decay_purge_age_ms old. Freed memory is thus returned within 4 + 10 + 1 ticks,
// with one left for ticks that run late (on the first slow path after they are due);
// pages freed straight to a page heap go after 10–11. (A tick every decay_ms/4 and
// the purge at decay_ms brought a peak back 1.25–1.7 x decay_ms after its frees; this,
// 0.78–0.98 x.) Caches wait several ticks so that a server that goes quiet between
// requests for about a tick finds them warm (bench requests).
constexpr unsigned kCacheIdleTicks = 3;
// The ticks a cache waits: with decay_ms=0 (jemalloc's "return at once"), one.
inline unsigned cache_idle_ticks() { return g_config.decay_ms ? kCacheIdleTicks : 1; }
inline uint64_t decay_tick_ms() { return g_config.decay_ms / 16 ? g_config.decay_ms / 16 : 1; }
inline uint64_t decay_purge_age_ms() {
  uint64_t caches = (kCacheIdleTicks + 3) * decay_tick_ms();
  return g_config.decay_ms > caches ? g_config.decay_ms - caches : 0;
}

// The tick when it is due (one coarse clock read otherwise). Unlike an explicit tick
// (decay_tick_now), it collapses no huge pages: that stalls the caller (page_heap.h),
// which may be an allocation; the background thread collapses on its own.
void decay_maybe_tick();
// The same from the background thread: not a call of the program's (its age and its
// last call stay as they were).
void decay_background_tick();
// A tick now (jemalloc's arena.<i>.decay), the next one a whole interval later.
void decay_tick_now();
// Everything back now, whatever its age (malloc_trim, the memory limit): the facade's
// hook (deferred frees), the calling thread's cache, every CPU's sheaves and the
// depots, spare slabs, then every free page and kept huge block; bytes returned.
size_t decay_release_all();
// When the next tick is due (os::now_ms); 0 before the clock started.
uint64_t decay_next_tick_ms();
// How many ticks have run (a thread cache gives its bins back once per tick).
uint64_t decay_ticks_run();
// When the program last reached the decay clock (os::now_ms; a slow path, every few
// sheaf misses): the background thread calls a process idle once that is a tick old.
uint64_t decay_last_call_ms();
// The next tick a whole interval from now (the background thread, woken from a sleep
// with nothing to give back).
void decay_postpone_tick();
// The facade's share (deferred frees, set once they are in use): its part of the
// tick, how many objects still wait for one, and the bytes of those sealed in blocks
// (dearer: for the background thread's start only).
struct DecayHooks {
  void (*tick)();
  size_t (*pending)();
  size_t (*pending_bytes)();
};
extern const DecayHooks* g_decay_hooks;

// A slow path's call: the tick when due, and the background thread woken if it
// sleeps while there is work, or started when that is wanted (background.h).
void decay_notice();

// What a tick can still give back. `bytes`: resident memory the tick returns in
// time (free dirty pages, objects in CPU sheaves and depots, spare slabs, freed huge
// blocks kept for reuse). `work`: anything left for a tick at all (those, wholly free
// segments to unmap, empty descriptor pages, remote-node buffers, deferred frees).
// Racy by nature (the program runs on); exact once the program stops.
struct DecayBacklog {
  size_t bytes;
  bool work;
};
DecayBacklog decay_backlog();

}  // namespace uslab
