// core/alloc/percpu_sampling.cc — the heap profiler's sampling streams on the CPU
// sheaves (sampler.h): each class's hit counter set to carry on its next sampled
// pop, the misses counted as pops, every CPU armed when sampling turns on.
// Locking: a CPU's streams (sample_left, sample_epoch, sample_pops) are guarded by
// its CpuMeta::lock; the hit counters are the fast path's, written here with a plain
// store under that lock (see set_hits), or, for a miss that does not carry, without
// it (sample_miss).
#include "core/alloc/percpu_meta.h"
#include "core/alloc/sampler.h"

namespace uslab {
namespace percpu_internal {

namespace {

// Sets the hit counter of class cls on CPU c (the heap profiler's legs, sampler.h),
// banking the difference so that the hit statistics stay whole. c's lock held, or c
// unused yet. A thread on c may add to the counter meanwhile (its fast path is one
// add, not atomic with this store from another CPU): a pop lost to the profile's
// schedule, nothing else.
void set_hits(uint32_t c, CpuMeta& m, unsigned cls, uint16_t value) {
  auto* h = reinterpret_cast<uint16_t*>(region_of(c) + kHitsOffset);
  uint16_t old = __atomic_load_n(&h[cls], __ATOMIC_RELAXED);
  __atomic_store_n(&h[cls], value, __ATOMIC_RELAXED);
  m.class_hits[cls].fetch_add(sample_bank_delta(old, value), std::memory_order_relaxed);
}

}  // namespace

// Arms every class's sampling stream of CPU c (sampler.h).
void arm_sampling(uint32_t c, CpuMeta& m) {
  m.sample_epoch = g_sample_epoch;
  for (unsigned cls = 1; cls < kMaxClasses; cls++)
    set_hits(c, m, cls, sample_arm(&m.sample_left[cls], cls));
}

// A carry of class cls's counter on CPU c (lock held): whether the allocation is the
// sampled one, with the counter set for the next leg (`retry`: sample_on_carry's).
bool sample_carry(uint32_t c, CpuMeta& m, unsigned cls, bool retry) {
  if (m.sample_epoch != g_sample_epoch) {
    arm_sampling(c, m);
    return false;
  }
  uint16_t next;
  bool sampled = sample_on_carry(&m.sample_left[cls], cls, retry, &next);
  set_hits(c, m, cls, next);
  m.sample_pops += next ? (65536u - next) / kHitStep : 65536u / kHitStep;
  return sampled;
}

// Whether a carry while sampling gives the decay clock its notice: once per 4096
// pops, as without sampling, whose legs are shorter (a notice on every carry of a
// big class, one per 128 pops, showed in a malloc/free loop). Lock held.
bool sample_paced_notice(CpuMeta& m) {
  if (m.sample_pops < kHitsPerCarry) return false;
  m.sample_pops = 0;
  return true;
}

// An allocation served by a miss, counted in its class's sampling stream as the
// fast path counts a pop (the statistics count it as a hit: only while sampling):
// without this, 1 in a batch of a class that always misses (a program that keeps
// what it allocates) was never sampled. True when it is the sampled one.
// The count is added without the lock, as the fast path adds it (the lock never kept
// that add out): only a carry, once in a leg, takes it. Taking it on every refill
// showed in N x alloc of small objects while the guard sampled by default.
// A re-arm that stores the counter meanwhile may lose this pop from the schedule.
bool sample_miss(uint32_t c, unsigned cls) {
  auto* h = reinterpret_cast<uint16_t*>(region_of(c) + kHitsOffset);
  uint16_t v = static_cast<uint16_t>(__atomic_load_n(&h[cls], __ATOMIC_RELAXED) + kHitStep);
  __atomic_store_n(&h[cls], v, __ATOMIC_RELAXED);
  if (v >= kHitStep) return false;
  CpuMeta& m = meta_[c];
  LockGuard g(m.lock);
  m.class_hits[cls].fetch_add(kHitsPerCarry, std::memory_order_relaxed);
  return sample_carry(c, m, cls, false);
}

}  // namespace percpu_internal

using namespace percpu_internal;

USLAB_STARTUP_TEXT void percpu_sample_arm() {
  if (!g_percpu) return;
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    if (!(cpu_prepared_[c / 64].load(std::memory_order_acquire) & (uint64_t{1} << (c % 64))))
      continue;
    CpuMeta& m = meta_[c];
    LockGuard g(m.lock);
    arm_sampling(c, m);
  }
}

}  // namespace uslab
