// core/alloc/background.h — the background thread: freed memory goes back to the OS
// within decay_ms whatever the program does next, with no call from it.
//
// Owns: the thread's life (background_thread=auto|true|false, config.h) and its
// sleep. With `auto` (the default) it is started lazily, at the first chance after
// memory waits to be returned beyond kBackgroundStartBytes (a page heap's free
// dirty pages, a freed huge block kept, a shard's free objects in its central
// lists (central.h), or the backlog a decay tick sees), or, while the live statistics
// are on, once the heap passes kBackgroundLiveBytes or the process is still
// allocating kBackgroundLiveAgeMs after its start: short programs get none, and a
// single-threaded program stays single-threaded until then. `true` starts it
// in the library's constructor; `false` never. A forked child has none until it too
// has memory to return, maps that heap or reaches that age.
//
// The thread ("uslab-bg", every signal blocked) runs the decay tick (decay.h) on
// time while the backlog holds anything, sleeping between ticks, so while memory is
// pending it wakes at most once per tick; on each wake-up it also collapses the huge
// pages queued a tick ago or more (page_heap.h), which no allocation does. With nothing
// left and no allocator call from the program for a tick (decay_last_call_ms) it
// closes the CPU sheaves (so the next allocation or free anywhere misses) and sleeps
// on a futex with no timeout: an idle process with nothing to give back gets no
// wake-ups, and a busy one with nothing to give back is not made to miss. It
// also writes the live statistics a reader outside the process asks for (LiveHooks). A slow
// path that finds it asleep wakes it (background_poke, one load otherwise): every
// sheaf miss, page-heap free, huge free, large call and deferred-free miss.
//
// The thread must not keep a process alive that its program has left: glibc ends a
// process when its last thread exits (main's pthread_exit after its workers, a child
// forked by a thread when that thread returns), and this thread counts. At each
// wake-up it ends itself when it is the process's last live thread (/proc/self/stat), and
// glibc's exit(0) then runs on it. A program whose last thread exits while this thread
// sleeps with no timeout, with no allocator call since, keeps the process until the
// next wake-up (a reader of the live statistics makes one).
//
// Where the thread cannot be started (helper_thread.h: a call from inside libc, a
// seccomp filter) the start is retried at a later chance; where pthread_create fails
// (RLIMIT_NPROC, a full thread table) the process carries on with call-driven decay
// and the statistics say why.
//
// Locking: the state and the sleep word are atomics. The sleeper publishes that it
// sleeps, then reads the backlog under the layers' locks; a waker changes what it
// frees under those locks, then reads the sleep word: one of the two sees the other.
// background_want and background_wake may be called anywhere; background_poke
// (which may start the thread: pthread_create allocates) only where decay_notice may.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/platform/helper_thread.h"

namespace uslab {

// Backlog at which `auto` starts the thread.
constexpr size_t kBackgroundStartBytes = size_t{4} << 20;
// Heap (segments and huge blocks mapped) at which `auto` starts it too, while the live
// statistics are on (LiveHooks): more than the one segment every process's start-up
// maps (/bin/true, python3 -c pass), so a service a user would watch has it, and the
// thread, asleep while idle, is what keeps its figures readable then.
constexpr size_t kBackgroundLiveBytes = size_t{8} << 20;

// Age at which `auto` starts it too, at the first slow path after it, while the live
// statistics are on: a process still allocating this long after its first slow path
// is one a user may point `uslab top` at, and the heap need not be large for that
// (python3 keeps its small objects in arenas of its own). /bin/true and
// `python3 -c pass` end before it; a forked child counts from its own first one.
constexpr uint64_t kBackgroundLiveAgeMs = 30;

enum class BackgroundState : uint32_t {
  kIdle,      // not started: nothing (enough) to give back yet, or background_thread=false
  kWanted,    // to be started at the next chance (a slow path with no lock held)
  kStarting,  // pthread_create in progress
  kRunning,
  kFailed,  // pthread_create failed: call-driven decay only
};
extern std::atomic<BackgroundState> g_background_state;
inline BackgroundState background_state() {
  return g_background_state.load(std::memory_order_acquire);
}

// The library's constructor: records what helper_thread_veto needs; with
// background_thread=true, starts the thread.
void background_init();
// Memory waits to be returned beyond kBackgroundStartBytes: with `auto`, the thread
// is started at the next chance.
void background_want();
// Wakes the thread if it sleeps with no timeout (something to give back appeared).
void background_wake();
// The heap passed kBackgroundLiveBytes: background_want, if the live statistics are on.
void background_want_live();

// When the process reaches kBackgroundLiveAgeMs (os::now_ms); kAgeUnread until the
// clock's first reading (the constructor reads none: the clock's first read is a page
// fault); 0 once it did, or when that starts nothing (live statistics off,
// background_thread not `auto`).
constexpr uint64_t kAgeUnread = 1;
extern std::atomic<uint64_t> g_background_age_due_ms;
void background_age_reached(uint64_t now_ms);
// The decay clock's readers (decay_maybe_tick) pass the time they read: past the age,
// the thread is wanted.
inline void background_note_age(uint64_t now_ms) {
  uint64_t due = g_background_age_due_ms.load(std::memory_order_relaxed);
  if (__builtin_expect(due != 0 && now_ms >= due, 0)) background_age_reached(now_ms);
}

// What the slow paths check on each call: bits of g_background_poke.
constexpr uint32_t kPokeWake = 1;   // the thread sleeps with no timeout
constexpr uint32_t kPokeStart = 2;  // the thread is wanted
extern std::atomic<uint32_t> g_background_poke;
void background_poke_slow();
// Wakes the sleeping thread, or starts a wanted one when this call may.
inline void background_poke() {
  if (__builtin_expect(g_background_poke.load(std::memory_order_relaxed) != 0, 0))
    background_poke_slow();
}
// After a free left `resident` bytes waiting in one place (a page heap's dirty pages,
// the huge cache, a shard's central lists): wakes a sleeping thread, and wants one
// past the start mark. Loads only, unless one of those is due; may be called with
// locks held (starts nothing).
inline void background_note_free(size_t resident) {
  if (__builtin_expect(g_background_poke.load(std::memory_order_relaxed) & kPokeWake, 0))
    background_wake();
  if (resident >= kBackgroundStartBytes &&
      g_background_state.load(std::memory_order_relaxed) == BackgroundState::kIdle)
    background_want();
}

struct BackgroundStats {
  BackgroundState state;
  os::ThreadVeto veto;  // why the last try did not start it (kNone if none did not)
  int error;            // pthread_create's error when kFailed
  uint64_t started_ms;  // os::now_ms at the start (0: not started)
  uint64_t wakeups;     // times the thread woke (a tick due, or woken)
  uint64_t sleeps;      // times it slept with no timeout
  uint64_t ticks;       // ticks it ran
  bool sleeping;        // asleep with no timeout now
};
BackgroundStats background_stats();
// One line describing the thread in state st (background_stats), for the statistics.
void background_describe(const BackgroundStats& st, char* out, size_t cap);

// jemalloc's background_thread mallctl: on (background_thread=true from now: the
// thread started now, from the caller, which must hold no allocator lock) or off
// (=false from now: a running thread ends; returns once it has).
void background_enable(bool on);

// fork: the child has no thread (it starts one once it has memory to return).
void background_fork_child();

// The facade's live statistics (core/stats/live.cc), which this thread writes: `start`
// makes their region (called by whoever starts the thread, before it starts: the
// region's descriptor, open for an instant, shifts no other thread's open());
// `requested` tells whether a reader outside the process asked for them (or for a
// profile) since the last time; `publish` writes them. The thread publishes when
// asked, on each wake-up, and before each sleep with no timeout (the figures then
// stay exact until something wakes it). A tick that sees a request while there is
// no thread (a forked child) wants one, as memory waiting to be returned would.
struct LiveHooks {
  void (*start)();
  bool (*requested)();
  void (*publish)();
  // Whether a reader may ask for what only the thread can write, so that an idle
  // thread looks for requests each tick instead of sleeping with no timeout: a heap
  // profile (prof=true, which costs far more than a wake-up a tick).
  bool (*polled)();
};
extern const LiveHooks* g_live_hooks;

}  // namespace uslab
