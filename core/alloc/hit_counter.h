// core/alloc/hit_counter.h — the hit counters the two front ends share with the
// heap profiler's sampling schedule.
//
// Owns: the counters' step and carry. Both front ends count the allocations they
// serve in 16-bit counters, per bin in the thread caches (thread_cache.h) and per CPU
// and class in the per-CPU sheaves (percpu.h): every pop adds kHitStep, and the carry
// out of the counter (every 4096 hits) sends that pop down a slow path that banks the
// hits for the statistics and gives the decay tick a chance to run in a program whose
// caches never miss (as jemalloc's allocation-event ticks and tcmalloc's sampling
// countdown do). With the heap profiler on, the counters are set to carry on each
// sampled pop (sampler.h).
//
// Locking: none (constants).
#pragma once

#include <cstdint>

namespace uslab {

constexpr unsigned kHitStep = 16;
constexpr uint64_t kHitsPerCarry = 65536 / kHitStep;

}  // namespace uslab
