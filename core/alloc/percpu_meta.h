// core/alloc/percpu_meta.h — what the per-CPU sheaves' files share (internal to
// percpu.cc, capacity.cc and percpu_sampling.cc; nothing outside core/alloc/percpu*
// and capacity.cc includes it).
//
// Owns: CpuMeta, each CPU's slow-path state (its lock, its capacity policy's
// counters, its statistics, its sampling streams), the accessors of a CPU's region
// (headers, slots, hit counters; the layout is percpu.h's), and the functions one
// of those files calls in another. Locking: CpuMeta::lock guards everything in a
// CpuMeta but its relaxed statistics counters, and the `end` fields of that CPU's
// headers; cpu_prepared_ is set lock-free (an atomic OR; preparing twice is harmless).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/alloc/percpu.h"

namespace uslab::percpu_internal {

// A bit per class, changed under its CPU's lock and also read without it (on_miss).
struct ClassBits {
  std::atomic<uint64_t> w[kMaxClasses / 64];
  bool has(unsigned cls) const {
    return w[cls / 64].load(std::memory_order_relaxed) >> (cls % 64) & 1;
  }
  void set(unsigned cls, bool on) {
    uint64_t v = w[cls / 64].load(std::memory_order_relaxed), bit = uint64_t{1} << (cls % 64);
    w[cls / 64].store(on ? v | bit : v & ~bit, std::memory_order_relaxed);
  }
  void clear_all() {
    for (auto& x : w) x.store(0, std::memory_order_relaxed);
  }
  // The first class after `from` with its bit set, going round past the last class
  // to class 1; 0 when none is.
  unsigned next_after(unsigned from) const {
    for (unsigned pass = 0; pass < 2; pass++) {
      unsigned start = pass == 0 ? from + 1 : 1, stop = pass == 0 ? kMaxClasses : from + 1;
      for (unsigned word = start / 64; word * 64 < stop; word++) {
        uint64_t x = w[word].load(std::memory_order_relaxed);
        if (word == start / 64) x &= ~uint64_t{0} << (start % 64);
        if (!x) continue;
        unsigned j = 64 * word + static_cast<unsigned>(__builtin_ctzll(x));
        if (j < stop) return j;
        break;
      }
    }
    return 0;
  }
};

// Bumps a statistics counter that threads on one CPU share: a plain load and store
// (no locked instruction on the miss paths), so a thread preempted between them by
// another one bumping the same counter loses a count.
inline void bump(std::atomic<uint64_t>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

struct alignas(64) CpuMeta {  // one line each: CPUs lock their own on a miss that grows
  Mutex lock;
  // Written under lock; on_miss reads the first three without it (a stale bit costs
  // one locked miss more).
  bool ready;                                    // used since start or the last drain
  ClassBits missed;                              // missed since the thief last passed
  ClassBits active;                              // missed or carried since the last decay tick
  ClassBits missed_tick;                         // missed since the last decay tick
  uint32_t clock USLAB_GUARDED_BY(lock);         // the class the capacity thief looked at last
  ClassBits held USLAB_GUARDED_BY(lock);         // grown since start (cleared when found without
                                                 // capacity)
  size_t capacity_bytes USLAB_GUARDED_BY(lock);  // sum over classes of capacity × size
  uint64_t grows, steals, drains;
  uint64_t borrows;  // grows past the budget (capacity lent by the other CPUs)
  // Refills a depot sheaf served lately against those the slabs did (capacity.cc's
  // lender; racy, as bump()).
  std::atomic<int32_t> reuse;
  std::atomic<uint32_t> misses;  // on_miss calls (racy; paces the decay clock)
  // Sheaf misses per class for the statistics. Per CPU: 16 CPUs bumping one shared
  // counter per refill cost more than the refill. Relaxed: a migrated thread may
  // bump another CPU's.
  std::atomic<uint64_t> class_refills[kMaxClasses];
  std::atomic<uint64_t> class_drains[kMaxClasses];
  std::atomic<uint64_t> class_hits[kMaxClasses];  // banked carries of the hit counters
  uint16_t hits_seen[kMaxClasses];                // each hit counter at the last decay tick
  // Refills + drains of each class at the last decay tick, and in the tick period
  // before it: how much a class needs its capacity (the thief's hysteresis).
  uint32_t misses_at_tick[kMaxClasses];
  uint32_t misses_before[kMaxClasses];
  // Each class's last miss, as `misses` then plus one (0: none yet), and the longest
  // run of the CPU's misses between two of its misses, halved every decay tick: how
  // long the class has been quiet against how long it usually is (racy, as `misses`).
  std::atomic<uint32_t> last_miss[kMaxClasses];
  std::atomic<uint32_t> long_gap[kMaxClasses];
  // `misses` at the last decay tick and at the one before: a gap that began before
  // the second is a class coming back, not its rhythm, and is not recorded.
  std::atomic<uint32_t> misses_last_tick, misses_tick_before;
  uint8_t steal_wait[kMaxClasses];  // misses before a class denied capacity tries again
  uint8_t idle_ticks[kMaxClasses];  // decay ticks in a row the class went unused (its lock held)
  uint64_t pages_ready;             // pages of the CPU's region prepare_slots backed (a bit each)
  // The heap profiler's streams (sampler.h): allocations after the current leg up to
  // the next sample, per class, armed in epoch sample_epoch.
  uint32_t sample_epoch;
  uint32_t sample_pops;  // pops in the legs set since the last decay notice they paced
  uint64_t sample_left[kMaxClasses];
};

extern CpuMeta* meta_;
extern size_t budget_;  // each CPU's capacity budget in bytes
// The sum of capacity_bytes over the CPUs: each CPU changes its share under its own
// lock (add_capacity); read without a lock, it may be a grow or two behind.
extern std::atomic<size_t> capacity_total_;
// CPUs whose metadata prepare_cpu has backed (a bit each).
extern std::atomic<uint64_t> cpu_prepared_[kMaxCpus / 64];

inline char* region_of(uint32_t cpu) { return g_cpu_region + (size_t{cpu} << kCpuRegionShift); }
inline uint32_t* headers(uint32_t cpu) {
  return reinterpret_cast<uint32_t*>(region_of(cpu) + kHeaderOffset);
}
inline void** slots_of(uint32_t cpu) { return reinterpret_cast<void**>(region_of(cpu)); }

inline uint32_t begin_of(unsigned cls) { return kSheafLayout.begin[cls]; }
// A class's header on a CPU: current (low 16 bits) and end (high). One word, written
// whole by every section, so any read sees the invariant: a header never used is 0;
// an opened one has begin ≤ current ≤ end ≤ the last slot of the class's range.
inline uint32_t header_of(uint32_t cpu, unsigned cls) {
  uint32_t w = __atomic_load_n(&headers(cpu)[cls], __ATOMIC_RELAXED);
  USLAB_DCHECK(w == 0 ||
               (begin_of(cls) <= (w & 0xffff) && (w & 0xffff) <= (w >> 16) &&
                (w >> 16) < (cls + 1 < kSheafHeaders ? begin_of(cls + 1) : kSheafLayout.slots)));
  return w;
}
// Capacity and cached count of a class on a CPU (a racy read, except that the
// capacity is stable under the CPU's lock); a header never used reads as 0 / 0.
inline uint32_t capacity_of(uint32_t cpu, unsigned cls) {
  uint32_t end = header_of(cpu, cls) >> 16;
  return end > begin_of(cls) ? end - begin_of(cls) : 0;
}
inline uint32_t cached_of(uint32_t cpu, unsigned cls) {
  uint32_t cur = header_of(cpu, cls) & 0xffff;
  return cur > begin_of(cls) ? cur - begin_of(cls) : 0;
}
// The hit counter of a class on a CPU (kHitsOffset; written by its fast path).
inline uint16_t hits_of(uint32_t cpu, unsigned cls) {
  auto* h = reinterpret_cast<uint16_t*>(region_of(cpu) + kHitsOffset);
  return __atomic_load_n(&h[cls], __ATOMIC_RELAXED);
}

// percpu.cc: a CPU's metadata and its slot pages backed before they are read
// (first_touch.h).
void prepare_cpu(uint32_t c);
void prepare_slots(uint32_t c, CpuMeta& m, unsigned idx, uint32_t end);

// capacity.cc: a miss of cls on CPU c grows the class (taking capacity from idle
// classes when the budget is spent); the misses the capacity thief compares.
// `from_depot`: a refill that a depot sheaf served (the objects came back through the
// depot), which may grow the class past the CPU's budget (capacity.cc's lending).
void on_miss(uint32_t c, unsigned cls, bool alloc, bool from_depot = false);
uint32_t misses_of(CpuMeta& m, unsigned cls);
// A CPU's capacity_bytes changed by d bytes (its lock held), and the total with it.
void add_capacity(CpuMeta& m, ptrdiff_t d) USLAB_REQUIRES(m.lock);
// The most capacity a CPU holding `mine` bytes may hold while all `cpus` CPUs hold
// `total` (capacity.cc's lending): at least `budget`, at most kLendMax budgets.
constexpr size_t kLendMax = 4;
size_t lend_limit(size_t mine, size_t total, unsigned cpus, size_t budget);
// Bytes of lent capacity CPU m holds that the other CPUs now use (its lock held):
// what the decay tick takes back from it; 0 when none.
size_t lent_excess(const CpuMeta& m) USLAB_REQUIRES(m.lock);

// percpu_sampling.cc: the heap profiler's streams of a CPU (sampler.h).
void arm_sampling(uint32_t c, CpuMeta& m);
bool sample_carry(uint32_t c, CpuMeta& m, unsigned cls, bool retry);
bool sample_paced_notice(CpuMeta& m);
bool sample_miss(uint32_t c, unsigned cls);

}  // namespace uslab::percpu_internal
