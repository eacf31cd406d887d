// core/prof/prof.h — the heap profiler: sampled allocations, their stacks, the live,
// allocation and peak profiles, and when they are written (USLAB_CONF prof=true).
//
// Owns: the records of sampled objects (a table keyed by address, until freed), the
// stack table (per distinct stack, entry point and class: the estimated objects and
// bytes allocated since start or the last reset, live now, and live at the peak),
// the hooks the allocator layer calls (sampler.h), and the triggers: at exit
// (prof_final), each prof_interval bytes of live-heap growth, on prof_signal, and on
// request (uslab_prof_dump, mallctl prof.dump). Which allocations are sampled is
// core/alloc/sampler.h's; stacks are stack.h's; the files are write.h's.
//
// Where a sampled object lives: a small object of a size class is given a large span
// of its own (as tcmalloc does), so that its free leaves the fast path (a large
// span's page-map entry has no class) and finds the span's `sampled` mark; large and
// huge objects are marked where they are; objects of caches stay in their slab (their
// frees all take slow paths) and are looked up while the caches have any sampled.
//
// Locking: one lock (g_lock below) guards both tables and the totals, a leaf: nothing
// is taken under it and nothing under it allocates (the tables are mappings of their
// own). Stacks are captured before it is taken. A thread already inside the profiler
// (t_in_prof: an unwinder that allocates, a signal handler) is not sampled again, and
// a dump copies the tables under the lock and symbolizes and writes after it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/alloc.h"

namespace uslab::prof {

// From the library's constructor: with prof=true, opens the unwinder and turns
// sampling on (prof_active), and installs prof_signal's handler.
void init();
// prof=true was given (mallctl opt.prof).
bool enabled();
// Sampling on or off (mallctl prof.active; only with prof=true). False when refused.
bool set_active(bool on);
bool active();
// The mean bytes between samples (prof_sample, or prof.reset's).
uint64_t sample_bytes();
// Forgets what was allocated and the peak; live objects stay tracked. A mean of 0
// keeps prof_sample (mallctl prof.reset takes lg_sample).
void reset(uint64_t sample_bytes);
// A large or huge span just allocated (or resized in place) that holds one of the
// profiler's sample points (heap.cc draws them from sampler.h's countdown).
void on_large_sampled(Span* s);
// A sampled large or huge object (s->sampled) is being freed, or was resized (its
// object then was at `start`): its record goes.
void on_sampled_free(Span* s, const void* start = nullptr);
// A cache object is being freed: its record goes if it was sampled.
void on_cache_free(const void* p);
// Count of live sampled cache objects (callers skip on_cache_free when 0).
extern size_t g_cache_samples;

// Writes the profile (profile.proto, with the live and allocated sample types) to
// `path`, and the folded stacks beside it (path.inuse.folded, path.alloc.folded).
// 0, or an errno value (EINVAL without prof=true, EAGAIN inside the profiler).
int dump(const char* path);
// The same, at a path named as prof_final's are (prof_prefix.PID.SEQ.KIND.pb), which
// it leaves in `path`.
int dump_named(const char* kind, char* path, size_t cap);
// prof_final's files (from the library's destructor).
void at_exit();
// A pending prof_signal or prof_interval dump is written (slow paths call this).
void poll();

struct Stats {
  size_t mapped;        // bytes of the profiler's own tables
  size_t live_samples;  // sampled objects not freed yet
  size_t stacks;        // distinct stacks recorded
  uint64_t samples;     // samples taken since start
  uint64_t dumps;       // profiles written
  double live_bytes;    // the live heap, estimated from the samples
  double peak_bytes;    // its highest estimate since start or the last reset
};
Stats stats();

}  // namespace uslab::prof
