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
// allocations, slow paths all, count bytes down per thread; so do the batches of a
// bulk allocation, one step a batch (sample_large_run).
//
// Two clients share the schedule: the heap profiler and the guarded allocations
// (core/guard/), each with a mean of its own. The schedule's mean is their
// combination: two Poisson processes together are one whose rate is the sum of
// theirs, and a sample point handed to each client with the probability of its share
// of the rate leaves each client a Poisson process of its own rate (thinning). So
// neither client's allocations cost the fast paths more than one did, and the
// profiler's weights use its own mean.
//
// Locking: a stream's `left` is guarded by its owner's lock (the CPU's meta lock, or
// the thread that owns the bin); the random state is per thread. The clients' table,
// g_sampling and g_sample_bytes change under the sampler's lock (rank kSampler) and
// are read without it (racy reads see one value or the other, both valid; a stream
// armed with the old mean keeps it until its next sample).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/hit_counter.h"
#include "core/ds/ds.h"

namespace uslab {

extern bool g_sampling;          // some client samples (the profiler is active, or guards)
extern uint64_t g_sample_bytes;  // the schedule's mean bytes between samples
// Bumped each time sampling turns on: a CPU or thread cache whose streams were armed
// in an older epoch (or never) arms them at its next carry, not a sample.
extern uint32_t g_sample_epoch;

// A client's side: `small` allocates class cls's object that was just sampled, for
// request r, and records it (nullptr when it cannot: the caller allocates the object
// as usual, unrecorded).
struct SampleHooks {
  void* (*small)(unsigned cls, Request r);
};
// The schedule's hook: hands each sample point to one client (see the top comment).
extern const SampleHooks* g_sample_hooks;

enum class SampleClient : unsigned { kProfiler, kGuard, kCount };
// Starts (mean_bytes > 0) or stops (0) a client's sampling. True when the streams must
// be armed: sampling was off and is on now, or its combined mean changed (the caller
// arms them: set_sample_client in percpu.h does both). Streams it does not reach
// re-arm at their next carry (the epoch), up to 4096 pops later: the profiler turned
// on first left the guard's guard_sample=1 without a sample for that long.
bool sample_set_client(SampleClient which, const SampleHooks* hooks, uint64_t mean_bytes);
// A client's mean bytes between its samples (0: it does not sample).
uint64_t sample_client_bytes(SampleClient which);
// The client a sample point goes to: a draw weighted by the clients' rates.
SampleClient sample_pick();
// The probability that sample_pick picks `which`.
double sample_share(SampleClient which);

// Probability that an object of `size` bytes is sampled at a mean of `mean` bytes
// between samples (by default the schedule's).
double sample_probability(size_t size, uint64_t mean = g_sample_bytes);
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
// A bulk allocation's n objects of `bytes` each on the same countdown, as n calls of
// sample_large would take them: the index of the first one sampled (n when none; the
// caller asks again for the objects after it), one step for the whole run.
size_t sample_large_run(size_t bytes, size_t n);

}  // namespace uslab
