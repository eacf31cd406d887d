// core/alloc/sampler.h — which allocations the heap profiler samples (core/prof/).
//
// Owns: the sampling schedule. Allocations are sampled by bytes, as tcmalloc and
// jemalloc do: the sample points form a Poisson process of mean interval
// g_sample_bytes over the bytes allocated, so an object of s bytes is sampled with
// probability p = 1 - exp(-s / mean) whatever came before it, and weights 1/p (objects)
// and s/p (bytes) make every sample an unbiased estimate.
//
// The small classes need no counting of their own: their fast paths already add
// kHitStep to a 16-bit hit counter per CPU and class (per bin in per-thread mode) and
// take a slow path when it carries (thread_cache.h). Each (CPU, class) stream is
// sampled on its own: its next sample is n allocations away, n geometric with that p
// (a Poisson process on each stream is one on all bytes). The counter is set so that
// it carries after min(n, 4096) pops, and `left` keeps the rest; the carry that finds
// left == 0 is the sampled allocation. With sampling off nothing changes on the fast
// paths (the same instructions; the carry slow path tests g_sampling). Large and huge
// allocations, slow paths all, count bytes down per thread.
//
// Locking: a stream's `left` is guarded by its owner's lock (the CPU's meta lock, or
// the thread that owns the bin); the random state is per thread. g_sampling and
// g_sample_bytes are plain globals set by the profiler (racy reads see one value or
// the other, both valid).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/hit_counter.h"
#include "core/ds/ds.h"

namespace uslab {

extern bool g_sampling;          // the profiler is active (prof.active)
extern uint64_t g_sample_bytes;  // mean bytes between samples (prof_sample)
// Bumped each time sampling turns on: a CPU or thread cache whose streams were armed
// in an older epoch (or never) arms them at its next carry, not a sample.
extern uint32_t g_sample_epoch;

// The heap profiler's side (set once by core/prof/ before g_sampling turns on):
// `small` allocates class cls's object that was just sampled and records it (nullptr
// when it cannot: the caller allocates the object as usual, unrecorded).
struct SampleHooks {
  void* (*small)(unsigned cls);
};
extern const SampleHooks* g_sample_hooks;

// Probability that an object of `size` bytes is sampled.
double sample_probability(size_t size);
// Allocations of `size` bytes up to and including the next sampled one (≥ 1).
uint64_t sample_draw_count(size_t size);
// Bytes up to the next sample point (exponential, mean g_sample_bytes).
uint64_t sample_draw_bytes();

// Arms a stream of class cls: its next sample drawn, *left set, and the hit-counter
// value returned that carries after min(n, 4096) more pops.
uint16_t sample_arm(uint64_t* left, unsigned cls);
// At a carry of an armed stream: whether the carrying allocation is sampled (then
// the stream is armed again), and the counter value for the next leg in *counter.
// `retry`: the carrying allocation pops again through the fast path, which adds its
// step (taken off *counter here), unless it is the sampled one (the hook serves it).
bool sample_on_carry(uint64_t* left, unsigned cls, bool retry, uint16_t* counter);
// What a hit counter set from `old` to `now` takes from the hits it counts: the
// front ends add it to their banked hits so that the statistics stay whole.
inline uint64_t sample_bank_delta(uint16_t old, uint16_t now) {
  return static_cast<uint64_t>((int64_t{old} - int64_t{now}) / int64_t{kHitStep});
}

// Large and huge allocations: whether an allocation of `bytes` is sampled (the
// calling thread's byte countdown).
bool sample_large(size_t bytes);

}  // namespace uslab
