// core/alloc/percpu.cc — per-CPU sheaves: set-up, refill and drain, adaptive
// capacity, draining for trim, the decay tick's share, the remote-node buffers and
// their flush, stats and fork; a CPU's metadata and sheaf slots backed with writable pages
// before they are read (first_touch.h). See percpu.h for the layout and the rules;
// CpuMeta::lock guards everything in a CpuMeta (but its relaxed statistics counters)
// and the `end` fields of that CPU's headers; cpu_prepared_ is set lock-free (an
// atomic OR; preparing twice is harmless).
#include "core/alloc/percpu.h"

#include <atomic>
#include <cstring>

#include "core/alloc/background.h"
#include "core/alloc/decay.h"
#include "core/alloc/sampler.h"
#include "core/alloc/first_touch.h"
#include "core/alloc/huge_cache.h"
#include "core/alloc/thread_cache.h"

namespace uslab {

constinit char* g_cpu_region = nullptr;
constinit uint32_t g_cpu_count = 0;
constinit bool g_percpu = false;
constinit bool g_percpu_one_node = false;

namespace {

// A bit per class, changed under its CPU's lock and also read without it (on_miss).
struct ClassBits {
  std::atomic<uint64_t> w[kMaxClasses / 64];
  bool has(unsigned cls) const { return w[cls / 64].load(std::memory_order_relaxed) >> (cls % 64) & 1; }
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
void bump(std::atomic<uint64_t>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

struct alignas(64) CpuMeta {  // one line each: CPUs lock their own on a miss that grows
  Mutex lock;
  bool ready;                // used since start or the last drain
  uint32_t clock;            // the class the capacity thief looked at last
  ClassBits missed;          // missed since the thief last passed
  ClassBits active;          // missed since the last decay tick
  ClassBits held;            // grown since start (cleared when found without capacity)
  size_t capacity_bytes;     // sum over classes of capacity × size
  uint64_t grows, steals, drains;
  std::atomic<uint32_t> misses;  // on_miss calls (racy; paces the decay clock)
  // Sheaf misses per class for the statistics. Per CPU: 16 CPUs bumping one shared
  // counter per refill cost more than the refill. Relaxed: a migrated thread may
  // bump another CPU's.
  std::atomic<uint64_t> class_refills[kMaxClasses];
  std::atomic<uint64_t> class_drains[kMaxClasses];
  std::atomic<uint64_t> class_hits[kMaxClasses];  // banked carries of the hit counters
  uint16_t hits_seen[kMaxClasses];  // each hit counter at the last decay tick
  // Refills + drains of each class at the last decay tick, and in the tick period
  // before it: how much a class needs its capacity (the thief's hysteresis).
  uint32_t misses_at_tick[kMaxClasses];
  uint32_t misses_before[kMaxClasses];
  uint8_t steal_wait[kMaxClasses];  // misses before a class denied capacity tries again
  uint64_t pages_ready;  // pages of the CPU's region prepare_slots backed (a bit each)
  // The heap profiler's streams (sampler.h): allocations after the current leg up to
  // the next sample, per class, armed in epoch sample_epoch.
  uint32_t sample_epoch;
  uint32_t sample_pops;  // pops in the legs set since the last decay notice they paced
  uint64_t sample_left[kMaxClasses];
};

constexpr uint32_t kNoCpu = ~uint32_t{0};

constinit Mutex init_lock_;
constinit std::atomic<bool> decided_{false};
constinit std::atomic<uint64_t> remote_flushes_{0};  // percpu_remote_flush calls
CpuMeta* meta_ = nullptr;
size_t budget_ = 0;
// CPUs whose metadata prepare_cpu has backed (a bit each).
constinit std::atomic<uint64_t> cpu_prepared_[kMaxCpus / 64] = {};

char* region_of(uint32_t cpu) { return g_cpu_region + (size_t{cpu} << kCpuRegionShift); }
uint32_t* headers(uint32_t cpu) {
  return reinterpret_cast<uint32_t*>(region_of(cpu) + kHeaderOffset);
}
void** slots_of(uint32_t cpu) { return reinterpret_cast<void**>(region_of(cpu)); }

uint32_t begin_of(unsigned cls) { return kSheafLayout.begin[cls]; }
// Capacity and cached count of a class on a CPU (a racy read, except that the
// capacity is stable under the CPU's lock); a header never used reads as 0 / 0.
uint32_t capacity_of(uint32_t cpu, unsigned cls) {
  uint32_t end = __atomic_load_n(&headers(cpu)[cls], __ATOMIC_RELAXED) >> 16;
  return end > begin_of(cls) ? end - begin_of(cls) : 0;
}
uint32_t cached_of(uint32_t cpu, unsigned cls) {
  uint32_t cur = __atomic_load_n(&headers(cpu)[cls], __ATOMIC_RELAXED) & 0xffff;
  return cur > begin_of(cls) ? cur - begin_of(cls) : 0;
}
// The hit counter of a class on a CPU (kHitsOffset; written by its fast path).
uint16_t hits_of(uint32_t cpu, unsigned cls) {
  auto* h = reinterpret_cast<uint16_t*>(region_of(cpu) + kHitsOffset);
  return __atomic_load_n(&h[cls], __ATOMIC_RELAXED);
}

// The CPU whose sheaves this thread may use now, or kNoCpu (then it uses its
// per-thread cache): uslab's own rseq registration is made here on a thread's first
// slow path; a thread the kernel refused, or on a CPU id beyond the table, has none.
uint32_t usable_cpu() {
  uint32_t c = rseq_cpu_id();
  if (c < g_cpu_count) return c;
  if (c == kRseqCpuUninitialized && rseq_register_thread()) {
    c = rseq_cpu_id();
    if (c < g_cpu_count) return c;
  }
  return kNoCpu;
}

// Backs CPU c's CpuMeta and its shard's metadata with writable pages at the CPU's
// first miss, before they are read (first_touch.h: a read first maps the zero page,
// whose replacement at the first write interrupts every CPU of the process). The
// headers of c's sheaves are not included: the fast paths have read them by then.
// Sets the hit counter of class cls on CPU c (the heap profiler's legs, sampler.h),
// banking the difference so that the hit statistics stay whole. c's lock held, or c
// unused yet. A thread on c may add to the counter meanwhile (its fast path is one
// add, not atomic with this store from another CPU): a pop lost to the profile's
// schedule, nothing else.
void set_hits(uint32_t c, CpuMeta& m, unsigned cls, uint16_t value) {
  auto* h = reinterpret_cast<uint16_t*>(region_of(c) + kHitsOffset);
  uint16_t old = __atomic_load_n(&h[cls], __ATOMIC_RELAXED);
  __atomic_store_n(&h[cls], value, __ATOMIC_RELAXED);
  m.class_hits[cls].fetch_add(static_cast<uint64_t>((int64_t{old} - int64_t{value}) / int64_t{kHitStep}),
                              std::memory_order_relaxed);
}

// Arms every class's sampling stream of CPU c (sampler.h).
void arm_sampling(uint32_t c, CpuMeta& m) {
  m.sample_epoch = g_sample_epoch;
  for (unsigned cls = 1; cls < kMaxClasses; cls++) set_hits(c, m, cls, sample_arm(&m.sample_left[cls], cls));
}

// A carry of class cls's counter on CPU c (lock held): whether the allocation is the
// sampled one, with the counter set for the next leg. `retry`: the allocation will
// pop again through the fast path, which adds its step.
bool sample_carry(uint32_t c, CpuMeta& m, unsigned cls, bool retry) {
  if (m.sample_epoch != g_sample_epoch) {
    arm_sampling(c, m);
    return false;
  }
  uint16_t next;
  bool sampled = sample_on_carry(&m.sample_left[cls], cls, &next);
  set_hits(c, m, cls, static_cast<uint16_t>(sampled || !retry ? next : next - kHitStep));
  m.sample_pops += next ? (65536u - next) / kHitStep : 65536u / kHitStep;
  return sampled;
}

// Whether a carry while sampling gives the decay clock its notice: once per 4096
// pops, as without sampling, whose legs are shorter (a notice on every carry of a
// 4 KiB class, one per 128 pops, was 1.3% of a malloc/free loop). Lock held.
bool sample_paced_notice(CpuMeta& m) {
  if (m.sample_pops < kHitsPerCarry) return false;
  m.sample_pops = 0;
  return true;
}

// An allocation served by a miss, counted in its class's sampling stream as the
// fast path counts a pop (the statistics count it as a hit: only while sampling):
// without this, 1 in a batch of a class that always misses (a program that keeps
// what it allocates) was never sampled. True when it is the sampled one.
bool sample_miss(uint32_t c, unsigned cls) {
  CpuMeta& m = meta_[c];
  LockGuard g(m.lock);
  auto* h = reinterpret_cast<uint16_t*>(region_of(c) + kHitsOffset);
  uint16_t v = static_cast<uint16_t>(__atomic_load_n(&h[cls], __ATOMIC_RELAXED) + kHitStep);
  __atomic_store_n(&h[cls], v, __ATOMIC_RELAXED);
  if (v >= kHitStep) return false;
  m.class_hits[cls].fetch_add(kHitsPerCarry, std::memory_order_relaxed);
  return sample_carry(c, m, cls, false);
}

void prepare_cpu(uint32_t c) {
  uint64_t bit = uint64_t{1} << (c % 64);
  if (cpu_prepared_[c / 64].load(std::memory_order_acquire) & bit) return;
  os::populate(&meta_[c], sizeof(CpuMeta));
  prepare_shard(shard_of_cpu(c));
  // Sampling from the CPU's first allocation: its streams' first legs would otherwise
  // be whole laps of 4096 pops, none of them sampled.
  if (g_sampling) arm_sampling(c, meta_[c]);
  cpu_prepared_[c / 64].fetch_or(bit, std::memory_order_release);
}

// Backs CPU c's slots of sheaf idx up to `end` (the sheaf's new end, its lock held)
// with writable pages before the capacity reaches them: the fast paths read the top
// slot before they write above it (pop's test for an empty sheaf, push's for a
// double free), and a never-written page that is read first maps the zero page
// (first_touch.h). A sheaf's first slot page was such a page whenever the CPU freed
// into it before it allocated from it. One system call for the pages not backed yet.
void prepare_slots(uint32_t c, CpuMeta& m, unsigned idx, uint32_t end) {
  constexpr uint32_t kPerPage = os::kOsPage / sizeof(void*);
  static_assert((size_t{1} << kCpuRegionShift) / os::kOsPage <= 64, "a bit per page");
  uint32_t first = begin_of(idx) / kPerPage, last = end / kPerPage;
  uint64_t want = (~uint64_t{0} >> (63 - last)) & (~uint64_t{0} << first);  // pages first … last
  uint64_t missing = want & ~m.pages_ready;
  if (!missing) return;
  uint32_t lo = static_cast<uint32_t>(__builtin_ctzll(missing));
  uint32_t hi = 63 - static_cast<uint32_t>(__builtin_clzll(missing));
  os::populate(region_of(c) + size_t{lo} * os::kOsPage, size_t{hi - lo + 1} * os::kOsPage);
  m.pages_ready |= want;
}

// A fixed-capacity sheaf of CPU c (kDeferSheaf, kRemoteSheaf): opened with capacity
// `cap` when closed (0 objects moved), else emptied into out. -1 when the thread is
// not on c. Takes c's lock.
long take_fixed_sheaf(uint32_t c, unsigned idx, uint32_t cap, void** out) {
  prepare_cpu(c);
  CpuMeta& m = meta_[c];
  LockGuard g(m.lock);
  if (!m.ready) __atomic_store_n(&m.ready, true, __ATOMIC_RELEASE);
  if (capacity_of(c, idx) != 0) return percpu_pop_batch(c, idx, out, cap);
  prepare_slots(c, m, idx, begin_of(idx) + cap);
  return percpu_resize(c, idx, begin_of(idx) + cap, nullptr);
}

uint32_t misses_of(CpuMeta& m, unsigned cls) {
  return static_cast<uint32_t>(m.class_refills[cls].load(std::memory_order_relaxed) +
                               m.class_drains[cls].load(std::memory_order_relaxed));
}
// Misses of a class on a CPU since the tick before last (its lock held).
uint32_t recent_misses(CpuMeta& m, unsigned cls) {
  return misses_of(m, cls) - m.misses_at_tick[cls] + m.misses_before[cls];
}

// Takes capacity from a class of CPU c other than `keep` that has not missed since
// the thief last passed it (second-chance clock) and missed less than half as often
// as `keep` lately. Lock of c held. False when nothing could be taken (or the thread
// left c). Without the hysteresis, and with two revolutions of the clock that always
// found a victim, the 50 classes of rptest, all missing, passed capacity back and
// forth: one steal per grow (500,000 in 16 s), each batch stolen drained to the
// depot and refilled again, 25% of the run's time. The clock visits the classes in
// `held` only (a walk of all 127 headers was 20% of rptest's time) and kStealLooks of
// them a call, so that a miss where no class qualifies costs little; it goes on from
// there next time.
constexpr unsigned kStealLooks = 8;
constexpr uint8_t kStealWait = 8;
bool steal(uint32_t c, CpuMeta& m, unsigned keep) {
  const uint32_t need = recent_misses(m, keep);
  for (unsigned looked = 0; looked < kStealLooks; looked++) {
    unsigned v = m.held.next_after(m.clock);
    if (v == 0) return false;
    m.clock = v;
    uint32_t cap = capacity_of(c, v);
    if (cap == 0) m.held.set(v, false);  // drained
    if (v == keep || cap == 0) continue;
    if (m.missed.has(v)) {
      m.missed.set(v, false);
      continue;
    }
    if (2 * uint64_t{recent_misses(m, v)} >= need) continue;
    uint32_t step = batch_size(v) < cap ? batch_size(v) : cap;
    void* spill[kMaxBatch];
    long k = percpu_resize(c, v, begin_of(v) + cap - step, spill);
    if (k < 0) return false;
    m.capacity_bytes -= size_t{step} * class_size(v);
    m.steals++;
    if (k) depot_give(v, spill, static_cast<size_t>(k));
    return true;
  }
  return false;
}

// The decay clock is read on every 8th miss of a CPU: a read on every refill and
// drain (two a batch, plus the page heap's) was 6% of N x alloc / N x free at 1 KiB.
void tick_every_few_misses(CpuMeta& m) {
  uint32_t k = m.misses.load(std::memory_order_relaxed) + 1;
  m.misses.store(k, std::memory_order_relaxed);
  if (k % 8 == 0) decay_maybe_tick();
  background_poke();  // every miss: one load, unless the thread sleeps or is wanted
}

// Called on every miss of cls on CPU c: grows the class's capacity by a batch while
// the CPU's byte budget allows (taking capacity from classes that stopped missing
// when it does not). Misses on free (`alloc` false) grow it only to two batches,
// enough to batch the drains: objects a CPU frees but does not allocate (the
// consumer of a producer/consumer pair) would only sit in a bigger sheaf.
// A miss that would change nothing (the class marked, at its most capacity) takes
// no lock: the steady state of a class that streams through its sheaf. What it reads
// may be stale; a bit cleared meanwhile is set again by the next miss.
void on_miss(uint32_t c, unsigned cls, bool alloc) {
  prepare_cpu(c);
  CpuMeta& m = meta_[c];
  uint32_t max = sheaf_max_capacity(cls);
  if (!alloc && max > 2 * batch_size(cls)) max = 2 * batch_size(cls);
  if (__atomic_load_n(&m.ready, __ATOMIC_ACQUIRE) && m.missed.has(cls) && m.active.has(cls) &&
      capacity_of(c, cls) >= max)
    return tick_every_few_misses(m);
  m.lock.lock();
  if (!m.ready) __atomic_store_n(&m.ready, true, __ATOMIC_RELEASE);
  m.missed.set(cls, true);
  m.active.set(cls, true);
  uint32_t cap = capacity_of(c, cls);
  if (cap < max) {
    uint32_t step = batch_size(cls) < max - cap ? batch_size(cls) : max - cap;
    size_t need = size_t{step} * class_size(cls);
    while (m.capacity_bytes + need > budget_ && m.steal_wait[cls] == 0 && steal(c, m, cls)) {
    }
    if (m.capacity_bytes + need > budget_) {
      // No class to take from: the next kStealWait misses do not look again (when
      // all classes are busy, looking on every miss cost 10% of rptest's time).
      m.steal_wait[cls] = m.steal_wait[cls] ? m.steal_wait[cls] - 1 : kStealWait;
    } else {
      prepare_slots(c, m, cls, begin_of(cls) + cap + step);
      if (percpu_resize(c, cls, begin_of(cls) + cap + step, nullptr) >= 0) {
        m.capacity_bytes += need;
        m.grows++;
        m.held.set(cls, true);
      }
    }
  }
  m.lock.unlock();
  tick_every_few_misses(m);
}

// Runs a batch section (pop or push of up to n objects) on the CPU the thread is
// on, again when it moved meanwhile; returns what it moved (0 without a usable
// CPU). With `miss` (Miss::kAlloc or Miss::kFree), a section that moved fewer than n
// counts as a miss of that direction, so that classes used in bulk grow their
// capacity like the others.
enum class Miss { kNone, kAlloc, kFree };
template <typename Section>
size_t on_current_cpu(unsigned cls, size_t n, Miss miss, Section section) {
  for (;;) {
    uint32_t c = usable_cpu();
    if (c == kNoCpu) return 0;
    long k = section(c);
    if (k < 0) continue;
    if (miss != Miss::kNone && static_cast<size_t>(k) < n) on_miss(c, cls, miss == Miss::kAlloc);
    return static_cast<size_t>(k);
  }
}

// Puts buf[0..n) on the current CPU's sheaf as far as it has room; the rest goes
// to the depot.
void push_or_give(unsigned cls, void** buf, size_t n) {
  if (n == 0) return;
  n -= on_current_cpu(cls, n, Miss::kNone,
                      [&](uint32_t c) { return percpu_push_batch(c, cls, buf, n); });
  if (n) depot_give(cls, buf, n);
}

// The L2 size (512 KiB … 4 MiB), and no more than a 16 MiB share for `cpus` CPUs
// (at least 1 MiB): with 16 CPUs of 2 MiB each, the sheaves of a larson-style
// server held 1.8x jemalloc's peak RSS; 1 MiB each made it even at the same speed.
size_t default_budget(uint32_t cpus) {
  size_t b = topology_in_use().l2.bytes;
  if (b < (size_t{512} << 10)) b = size_t{512} << 10;
  if (b > (size_t{4} << 20)) b = size_t{4} << 20;
  size_t share = (size_t{16} << 20) / cpus;
  if (share < (size_t{1} << 20)) share = size_t{1} << 20;
  return b < share ? b : share;
}

}  // namespace

bool percpu_decide() {
  if (decided_.load(std::memory_order_acquire)) return g_percpu;
  LockGuard g(init_lock_);
  if (decided_.load(std::memory_order_relaxed)) return g_percpu;
  config_init();
  if (rseq_init_process(g_config.percpu) != RseqMode::kNone) {
    uint32_t n = topology_in_use().cpus_possible;
    if (g_config.percpu_cpus && n > g_config.percpu_cpus) n = static_cast<uint32_t>(g_config.percpu_cpus);
    if (n > kMaxCpus) n = kMaxCpus;
    char* region = static_cast<char*>(os::map(size_t{n} << kCpuRegionShift));
    meta_ = static_cast<CpuMeta*>(g_meta_arena.alloc(n * sizeof(CpuMeta)));
    if (region && meta_) {
      // Each CPU's sheaves on its node's memory (with several real nodes), one mbind
      // per run of CPUs of one node.
      for (uint32_t c = 0, run = 0; c <= n; c++)
        if (c == n || node_of_cpu(c) != node_of_cpu(run)) {
          bind_to_shard_node(region + (size_t{run} << kCpuRegionShift),
                             size_t{c - run} << kCpuRegionShift, shard_of_cpu(run));
          run = c;
        }
      budget_ = g_config.cpu_cache_bytes ? g_config.cpu_cache_bytes : default_budget(n);
      g_cpu_region = region;
      __atomic_store_n(&g_cpu_count, n, __ATOMIC_RELEASE);
      __atomic_store_n(&g_percpu, true, __ATOMIC_RELEASE);
      percpu_nodes_changed();
    }
  }
  decided_.store(true, std::memory_order_release);
  return g_percpu;
}

void* percpu_alloc_retry(unsigned cls) { return percpu_alloc(cls); }

void* percpu_alloc_tick(unsigned cls) {
  // The carry banks the hits that wrapped the counter, less the one the retry below
  // counts again. Any CPU's bank will do (the statistics sum them): the thread may
  // have moved since.
  uint32_t c = rseq_cpu_id();
  bool sampled = false, notice = true;
  if (c < g_cpu_count) {
    CpuMeta& m = meta_[c];
    m.class_hits[cls].fetch_add(kHitsPerCarry - 1, std::memory_order_relaxed);
    // A tick this carry runs sees the counter where the previous carry left it (0):
    // without the mark, the class that triggers the ticks would look idle to them.
    LockGuard g(m.lock);
    m.active.set(cls, true);
    if (__builtin_expect(g_sampling, 0)) {
      sampled = sample_carry(c, m, cls, true);
      notice = sample_paced_notice(m);
    }
  }
  if (notice) decay_notice();
  if (__builtin_expect(sampled, 0))
    if (void* p = g_sample_hooks->small(cls)) return p;
  return percpu_alloc(cls);
}
void percpu_free_retry(void* p, unsigned cls) { percpu_free(p, cls); }

bool percpu_decided() { return decided_.load(std::memory_order_acquire); }

unsigned current_shard() {
  uint32_t c = g_percpu ? rseq_cpu_id() : kNoCpu;
  return c < g_cpu_count ? shard_of_cpu(c) : t_cache->shard;
}

void* percpu_alloc_slow(unsigned cls) {
  uint32_t c = usable_cpu();
  if (c == kNoCpu) return thread_cache_alloc(cls);
  on_miss(c, cls, true);
  void* buf[kMaxBatch];
  size_t n = g_depot[shard_of_cpu(c)][cls].take(cls, buf, batch_size(cls));
  USLAB_PROBE(sheaf_refill, cls, n);
  bump(meta_[c].class_refills[cls]);
  if (n == 0) return os::fail_nomem();
  if (__builtin_expect(g_sampling, 0) && sample_miss(c, cls))
    if (void* q = g_sample_hooks->small(cls)) {
      push_or_give(cls, buf, n);
      return q;
    }
  void* obj = buf[--n];
  push_or_give(cls, buf, n);
  return obj;
}

void percpu_free_slow(void* p, unsigned cls) {
  void* buf[kMaxBatch];
  for (;;) {
    uint32_t c = usable_cpu();
    if (c == kNoCpu) return thread_cache_free(p, cls);
    on_miss(c, cls, false);
    // One section: p goes in or, when the sheaf is full, a batch made of its top
    // objects and p goes to the depot.
    long k = percpu_push_draining(c, cls, p, buf, batch_size(cls) - 1);
    if (k == kSheafMoved) continue;
    if (k == kSheafDoubleFree) return report_bad_free(p, "double free", cls);
    if (k == kSheafClosed) return depot_give(cls, &p, 1);
    if (k > 0) {
      buf[k++] = p;
      USLAB_PROBE(sheaf_drain, cls, k);
      bump(meta_[c].class_drains[cls]);
      depot_give(cls, buf, static_cast<size_t>(k));
    }
    return;
  }
}

void percpu_nodes_changed() {
  __atomic_store_n(&g_percpu_one_node, g_percpu && node_count() == 1, __ATOMIC_RELAXED);
}

void percpu_remote_flush(const uint64_t* entries, size_t n) {
  // Grouped by (class, shard) through a small open-addressed table: a buffer holds
  // a few dozen distinct groups at most, and a sort would cost more than the frees.
  constexpr unsigned kSlots = 512;  // > 2 x the groups a full buffer can hold
  static_assert(kSlots >= 2 * kRemoteCap);
  struct Group {
    uint16_t key, count, next;  // key: class | shard << 7; next: fill position
  };
  Group groups[kRemoteCap];
  uint16_t slot_group[kSlots];
  uint16_t which[kRemoteCap];
  void* objs[kRemoteCap];
  for (size_t done = 0; done < n;) {
    const uint64_t* e = entries + done;
    size_t k = n - done < kRemoteCap ? n - done : kRemoteCap, ng = 0;
    memset(slot_group, 0xff, sizeof slot_group);
    for (size_t i = 0; i < k; i++) {
      uint16_t key = static_cast<uint16_t>(remote_entry_key(e[i]));
      unsigned slot = (key * 0x9e37u >> 7) % kSlots;
      while (slot_group[slot] != 0xffff && groups[slot_group[slot]].key != key)
        slot = (slot + 1) % kSlots;
      if (slot_group[slot] == 0xffff) {
        slot_group[slot] = static_cast<uint16_t>(ng);
        groups[ng++] = Group{key, 0, 0};
      }
      groups[slot_group[slot]].count++;
      which[i] = slot_group[slot];
    }
    for (size_t g = 0, at = 0; g < ng; at += groups[g].count, g++) groups[g].next = static_cast<uint16_t>(at);
    for (size_t i = 0; i < k; i++)
      objs[groups[which[i]].next++] = remote_entry_object(e[i]);
    USLAB_PROBE(remote_flush, k, ng);
    for (size_t g = 0, at = 0; g < ng; at += groups[g].count, g++) {
      unsigned cls = groups[g].key & 127, shard = groups[g].key >> 7;
      note_remote_node_frees(node_of_shard(shard), groups[g].count);
      // To the slabs: groups are small (a buffer mixes classes), and small sheaves
      // in the owner's depot measured no faster (xnode: 24.4 M/s both).
      g_central[shard][cls].free_batch(cls, objs + at, groups[g].count, true);
    }
    done += k;
  }
  remote_flushes_.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// A full remote-node buffer (or a closed one): its entries are flushed to their
// nodes and the entry goes in; the entry itself is flushed when the thread has no
// usable CPU or keeps moving.
void remote_miss(void* entry, unsigned) {
  uint64_t buf[kRemoteCap];
  for (int tries = 0; tries < 2; tries++) {
    uint32_t c = usable_cpu();
    if (c == kNoCpu) break;
    void* top;
    if (percpu_peek(c, kRemoteSheaf, &top) < 0) continue;
    if (top == entry) {
      uint64_t e = reinterpret_cast<uintptr_t>(entry);
      return report_bad_free(remote_entry_object(e), "double free", remote_entry_key(e) & 127);
    }
    long n = take_fixed_sheaf(c, kRemoteSheaf, kRemoteCap, reinterpret_cast<void**>(buf));
    if (n < 0) continue;
    if (n > 0) percpu_remote_flush(buf, static_cast<size_t>(n));
    void* one[1] = {entry};
    if (percpu_push_batch(c, kRemoteSheaf, one, 1) == 1) return;
  }
  uint64_t e = reinterpret_cast<uintptr_t>(entry);
  percpu_remote_flush(&e, 1);
}

void remote_retry(void* entry, unsigned) {
  percpu_push_one<remote_miss, remote_retry>(entry, kRemoteSheaf);
}

}  // namespace

void percpu_free_nodes(void* p, unsigned cls) {
  uint32_t c = rseq_cpu_id();
  if (c >= g_cpu_count) c = usable_cpu();  // a thread's first free registers it
  const Span* s = PageMap::get(p);
  // The thread may move before the push: then the object only lands in the wrong
  // buffer, which costs locality, never correctness (both flush to the owner).
  if (c != kNoCpu && node_of_shard(s->shard) != node_of_cpu(c))
    return percpu_push_one<remote_miss, remote_retry>(reinterpret_cast<void*>(remote_entry(p, s)),
                                                     kRemoteSheaf);
  percpu_free(p, cls);
}

namespace {

// A set of header indexes (size classes, kDeferSheaf and kRemoteSheaf).
struct HeaderSet {
  uint64_t w[(kSheafHeaders + 63) / 64] = {};
  void add(unsigned i) { w[i / 64] |= uint64_t{1} << (i % 64); }
  bool has(unsigned i) const { return w[i / 64] >> (i % 64) & 1; }
  static HeaderSet range(unsigned lo, unsigned hi) {
    HeaderSet s;
    for (unsigned i = lo; i < hi; i++) s.add(i);
    return s;
  }
};

// Detaches CPU c's sheaves in `set` (its lock held): their headers become 0 and
// cur[i] the top slot each had. See percpu.h for why the swap-to-0, fence, re-check
// loop leaves no section able to commit on those headers. False when the fence
// fails: the headers stay 0 and the cached objects are abandoned rather than risked.
bool detach(uint32_t c, const HeaderSet& set, uint32_t* cur) {
  uint32_t* h = headers(c);
  for (unsigned i = 1; i < kSheafHeaders; i++)
    if (set.has(i)) cur[i] = __atomic_exchange_n(&h[i], 0u, __ATOMIC_SEQ_CST) & 0xffff;
  for (;;) {
    if (!rseq_fence_cpu(c)) return false;
    bool again = false;
    for (unsigned i = 1; i < kSheafHeaders; i++)
      if (set.has(i) && __atomic_load_n(&h[i], __ATOMIC_SEQ_CST) != 0) {
        // A section committed after the swap (a 16-bit store of current).
        cur[i] = __atomic_exchange_n(&h[i], 0u, __ATOMIC_SEQ_CST) & 0xffff;
        again = true;
      }
    if (!again) return true;
  }
}

// Empties CPU c's sheaves of the classes in `set` into the slabs, their capacity
// back to the budget (its lock held).
bool drain_cpu(uint32_t c, CpuMeta& m, const HeaderSet& set) {
  uint32_t cur[kSheafHeaders];
  size_t capacity = 0;
  for (unsigned cls = 1; cls < kMaxClasses; cls++)
    if (set.has(cls)) capacity += size_t{capacity_of(c, cls)} * class_size(cls);
  m.capacity_bytes -= capacity;
  if (!detach(c, set, cur)) return false;
  void** slots = slots_of(c);
  for (unsigned cls = 1; cls < kMaxClasses; cls++)
    if (set.has(cls))
      for (uint32_t i = begin_of(cls); i < cur[cls]; i += kMaxBatch) {
        // Objects are the slots (begin, current].
        uint32_t k = cur[cls] - i < kMaxBatch ? cur[cls] - i : static_cast<uint32_t>(kMaxBatch);
        sheaf_acquire(slots + i + 1, k);
        central_free(cls, slots + i + 1, k);
      }
  m.drains++;
  return true;
}

// Empties CPU c's sheaves of the classes in `set` (its lock held) into the slabs;
// their capacity stays. Objects a class keeps cached while it is in use are scattered
// over slabs that are otherwise free: after a peak freed in random order, the batch
// each class kept for light activity pinned 2.2 MB of slabs for 175 KB of objects
// (RSS 4.0-4.2 MiB above the level before the peak; 2.1-3.2 when emptied). The next
// refill takes from the slabs that live objects pin. Done on a detached sheaf, whose
// header is then stored back (no section can commit on a header of 0, see percpu.h).
void trim_cpu(uint32_t c, const HeaderSet& set) {
  uint32_t end[kMaxClasses], cur[kSheafHeaders];
  uint32_t* h = headers(c);
  for (unsigned cls = 1; cls < kMaxClasses; cls++)
    if (set.has(cls)) end[cls] = __atomic_load_n(&h[cls], __ATOMIC_RELAXED) >> 16;
  if (!detach(c, set, cur)) return;
  void** slots = slots_of(c);
  for (unsigned cls = 1; cls < kMaxClasses; cls++) {
    if (!set.has(cls)) continue;
    uint32_t b = begin_of(cls), n = cur[cls] > b ? cur[cls] - b : 0;
    for (uint32_t i = 0; i < n; i += kMaxBatch) {
      uint32_t k = n - i < kMaxBatch ? n - i : static_cast<uint32_t>(kMaxBatch);
      sheaf_acquire(slots + b + 1 + i, k);
      central_free(cls, slots + b + 1 + i, k);
    }
    __atomic_store_n(&h[cls], end[cls] << 16 | b, __ATOMIC_SEQ_CST);
  }
}

// Flushes CPU c's remote-node buffer to the owning nodes (its lock held); the
// buffer stays open. Done on the detached buffer, whose header is then stored back.
void flush_remote_cpu(uint32_t c) {
  if (cached_of(c, kRemoteSheaf) == 0) return;  // nothing to fence for
  uint32_t* h = headers(c);
  uint32_t end = __atomic_load_n(&h[kRemoteSheaf], __ATOMIC_RELAXED) >> 16, cur[kSheafHeaders];
  if (!detach(c, HeaderSet::range(kRemoteSheaf, kRemoteSheaf + 1), cur)) return;
  uint32_t b = begin_of(kRemoteSheaf), n = cur[kRemoteSheaf] > b ? cur[kRemoteSheaf] - b : 0;
  percpu_remote_flush(reinterpret_cast<uint64_t*>(slots_of(c) + b + 1), n);
  __atomic_store_n(&h[kRemoteSheaf], end << 16 | b, __ATOMIC_SEQ_CST);
}

void drain_classes(unsigned lo, unsigned hi) {
  if (g_percpu && rseq_fence_available())
    for (uint32_t c = 0; c < g_cpu_count; c++) {
      CpuMeta& m = meta_[c];
      LockGuard g(m.lock);
      if (!m.ready) continue;
      drain_cpu(c, m, HeaderSet::range(lo, hi));
      flush_remote_cpu(c);  // it may hold objects of these classes
    }
  depot_flush_classes(lo, hi);
}

}  // namespace

// The tick's share of the CPU sheaves (percpu.h): idle classes drained, the others
// emptied by trim_cpu.
void percpu_decay_sheaves() {
  if (!g_percpu || !rseq_fence_available()) return;
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    CpuMeta& m = meta_[c];
    LockGuard g(m.lock);
    if (!m.ready) continue;
    HeaderSet idle, in_use;
    bool any_idle = false, any_in_use = false;
    for (unsigned cls = 1; cls < kMaxClasses; cls++) {
      uint16_t hits = hits_of(c, cls);
      bool used = hits != m.hits_seen[cls] || m.active.has(cls);
      m.hits_seen[cls] = hits;
      uint32_t misses = misses_of(m, cls);
      m.misses_before[cls] = misses - m.misses_at_tick[cls];
      m.misses_at_tick[cls] = misses;
      if (!capacity_of(c, cls)) continue;
      if (!used) {
        idle.add(cls);
        any_idle = true;
      } else if (cached_of(c, cls) > 0) {
        in_use.add(cls);
        any_in_use = true;
      }
    }
    m.active.clear_all();
    if (any_idle) drain_cpu(c, m, idle);
    if (any_in_use) trim_cpu(c, in_use);
    flush_remote_cpu(c);
  }
}

void percpu_sample_arm() {
  if (!g_percpu) return;
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    if (!(cpu_prepared_[c / 64].load(std::memory_order_acquire) & (uint64_t{1} << (c % 64)))) continue;
    CpuMeta& m = meta_[c];
    LockGuard g(m.lock);
    arm_sampling(c, m);
  }
}

size_t percpu_take(unsigned cls, void** out, size_t n) {
  return on_current_cpu(cls, n, Miss::kAlloc,
                        [&](uint32_t c) { return percpu_pop_batch(c, cls, out, n); });
}

size_t percpu_put(unsigned cls, void* const* ptrs, size_t n) {
  return on_current_cpu(cls, n, Miss::kFree,
                        [&](uint32_t c) { return percpu_push_batch(c, cls, ptrs, n); });
}

void percpu_drain_all() { drain_classes(1, kMaxClasses); }

void percpu_drain_class(unsigned cls) { drain_classes(cls, cls + 1); }

long percpu_defer_take(void** out) {
  for (;;) {
    uint32_t c = usable_cpu();
    if (c == kNoCpu) return -1;
    long k = take_fixed_sheaf(c, kDeferSheaf, kDeferCap, out);
    if (k >= 0) return k;
  }
}

void percpu_defer_drain_all(void (*sink)(void* const*, size_t, void*), void* arg) {
  if (!g_percpu || !rseq_fence_available()) return;
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    // Copied out under the lock, handed over after it (sink allocates blocks, whose
    // slow path may need this CPU's lock).
    void* buf[kDeferCap];
    uint32_t n = 0;
    if (cached_of(c, kDeferSheaf) == 0) continue;  // nothing to fence for
    {
      CpuMeta& m = meta_[c];
      LockGuard g(m.lock);
      uint32_t cur[kSheafHeaders];
      if (!m.ready || !detach(c, HeaderSet::range(kDeferSheaf, kDeferSheaf + 1), cur)) continue;
      uint32_t begin = begin_of(kDeferSheaf);
      n = cur[kDeferSheaf] > begin ? cur[kDeferSheaf] - begin : 0;
      memcpy(buf, slots_of(c) + begin + 1, n * sizeof(void*));
    }
    if (n) {
      sheaf_acquire(buf, n);
      sink(buf, n, arg);
    }
  }
}

size_t percpu_defer_pending() {
  size_t n = 0;
  if (!g_percpu) return 0;
  for (uint32_t c = 0; c < g_cpu_count; c++)
    if (__atomic_load_n(&meta_[c].ready, __ATOMIC_ACQUIRE)) n += cached_of(c, kDeferSheaf);
  return n;
}

void percpu_class_stats(PerCpuClassStats out[kMaxClasses]) {
  memset(out, 0, sizeof(PerCpuClassStats) * kMaxClasses);
  if (!g_percpu) return;
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    CpuMeta& m = meta_[c];
    for (unsigned cls = 1; cls < kMaxClasses; cls++) {
      out[cls].refills += m.class_refills[cls].load(std::memory_order_relaxed);
      out[cls].drains += m.class_drains[cls].load(std::memory_order_relaxed);
      out[cls].hits += m.class_hits[cls].load(std::memory_order_relaxed);
    }
    if (!__atomic_load_n(&m.ready, __ATOMIC_ACQUIRE)) continue;
    for (unsigned cls = 1; cls < kMaxClasses; cls++) {
      out[cls].cpu_objects += cached_of(c, cls);
      out[cls].hits += hits_of(c, cls) / kHitStep;
    }
  }
}

size_t percpu_cached_bytes() {
  size_t bytes = 0;
  if (!g_percpu) return 0;
  for (uint32_t c = 0; c < g_cpu_count; c++)
    if (__atomic_load_n(&meta_[c].ready, __ATOMIC_ACQUIRE))
      for (unsigned cls = 1; cls < kMaxClasses; cls++) bytes += size_t{cached_of(c, cls)} * class_size(cls);
  return bytes;
}

void percpu_remote_stats(RemoteNodeStats* out) {
  *out = RemoteNodeStats{};
  for (uint32_t n = 0; n < kTopoMaxNodes; n++) out->received[n] = remote_node_frees(n);
  out->flushes = remote_flushes_.load(std::memory_order_relaxed);
  if (!g_percpu) return;
  for (uint32_t c = 0; c < g_cpu_count; c++)
    if (__atomic_load_n(&meta_[c].ready, __ATOMIC_ACQUIRE)) out->pending += cached_of(c, kRemoteSheaf);
}

PerCpuStats percpu_stats() {
  PerCpuStats s{};
  if (!g_percpu) return s;
  s.cpus_possible = g_cpu_count;
  s.budget = budget_;
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    CpuMeta& m = meta_[c];
    LockGuard g(m.lock);
    if (!m.ready) continue;
    s.cpus_used++;
    s.grows += m.grows;
    s.steals += m.steals;
    s.drains += m.drains;
  }
  return s;
}

void percpu_fork_prepare() {
  for (uint32_t c = 0; c < g_cpu_count; c++) meta_[c].lock.lock();
}

void percpu_fork_parent() {
  for (uint32_t c = 0; c < g_cpu_count; c++)
    meta_[c].lock.unlock();
}

void percpu_fork_child() {
  for (uint32_t c = 0; c < g_cpu_count; c++) meta_[c].lock.reset_after_fork();
}

}  // namespace uslab
