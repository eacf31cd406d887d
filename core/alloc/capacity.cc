// core/alloc/capacity.cc — the CPU sheaves' adaptive capacity: a class that misses
// grows by a batch while its CPU's byte budget allows, and takes capacity from
// classes that stopped missing when it does not (a second-chance clock with
// hysteresis: the capacity thief). A CPU whose objects come back to it through the
// depot borrows the budget other CPUs leave unused (the lender), up to kLendMax
// budgets; the decay tick (percpu.cc) takes lent capacity back once the other CPUs
// use their budgets, drains idle classes and snapshots the misses the thief
// compares.
// Locking: a CPU's capacity fields are guarded by its CpuMeta::lock; on_miss reads
// a few of them without it first (see there). capacity_total_ is an atomic sum that
// each CPU changes under its own lock: the lender's test of it is racy, and what two
// CPUs borrow at once past the total is taken back at the next tick.
#include "core/alloc/background.h"
#include "core/alloc/decay.h"
#include "core/alloc/depot.h"
#include "core/alloc/percpu_meta.h"

namespace uslab::percpu_internal {

constinit std::atomic<size_t> capacity_total_{0};

void add_capacity(CpuMeta& m, ptrdiff_t d) {
  m.capacity_bytes += static_cast<size_t>(d);
  capacity_total_.fetch_add(static_cast<size_t>(d), std::memory_order_relaxed);
}

namespace {

// A CPU may hold up to kLendMax budgets of capacity while the other CPUs hold next to
// nothing (a quarter of a budget), and otherwise what kLendMax budgets (the CPUs'
// budgets, on fewer CPUs) leave it. A server handling one request at a time cycles
// its working set through a CPU's sheaves and the depot (`bench requests`: slower
// than tcmalloc with one budget, level with four) while the other CPUs' budgets sit
// unused. A program that keeps several CPUs busy borrows nothing: with all the CPUs'
// budgets as the pool, each of larson's threads borrowed an idle CPU's budget and
// peaked higher, no faster (as with a floor of kLendMax budgets for all).
// Only a CPU whose refills a depot sheaf served lately borrows (`reuse`: +1 for such
// a refill, -kSlabRefill for one from the slabs, within ±kReuseCap; at least
// kReuseToBorrow): its objects come back and are handed out again, and a bigger
// sheaf saves a depot round trip per batch. A heap that grows from the slabs gains
// nothing from it, and the objects it caches pin slabs: the `bench rss` frag peak
// grew when every refill, or every depot-served one, borrowed; with these weights it
// stays within the runs' spread. Stricter weights are worse: the slab refills that
// follow each decay tick's trim would keep a server's requests from borrowing again
// (slower requests after pauses).
constexpr int32_t kSlabRefill = 8, kReuseCap = 256, kReuseToBorrow = 64;

size_t lend_limit_now(size_t mine) {
  return lend_limit(mine, capacity_total_.load(std::memory_order_relaxed), g_cpu_count, budget_);
}

}  // namespace

size_t lend_limit(size_t mine, size_t total, unsigned cpus, size_t budget) {
  const size_t others = total > mine ? total - mine : 0;
  if (others <= budget / 4) return kLendMax * budget;
  const size_t pool = (cpus < kLendMax ? cpus : kLendMax) * budget;
  return pool > others + budget ? pool - others : budget;
}

size_t lent_excess(const CpuMeta& m) {
  if (m.capacity_bytes <= budget_) return 0;
  size_t limit = lend_limit_now(m.capacity_bytes);
  return m.capacity_bytes > limit ? m.capacity_bytes - limit : 0;
}

uint32_t misses_of(CpuMeta& m, unsigned cls) {
  return static_cast<uint32_t>(m.class_refills[cls].load(std::memory_order_relaxed) +
                               m.class_drains[cls].load(std::memory_order_relaxed));
}
namespace {

// Misses of a class on a CPU since the tick before last (its lock held).
uint32_t recent_misses(CpuMeta& m, unsigned cls) {
  return misses_of(m, cls) - m.misses_at_tick[cls] + m.misses_before[cls];
}

// Whether class v has stopped missing on the CPU, though it missed often lately: the
// CPU has missed more than kQuietGaps times v's longest recent gap between two of its
// misses within the last two tick periods (and kQuietMin times) since its last one.
// Misses counted, not time: a program that moves from one size to the next within a
// tick period (`bench concurrent`) leaves the classes before it with the most recent
// misses, and the rate test alone kept the new class from growing. A class's own gaps,
// not its share of the misses: classes used in turns (a burst of misses each, all
// wanting more than the budget) are quiet between their bursts for about as long as
// they always are, and taking from them there was a steal every eighth miss.
constexpr uint32_t kQuietGaps = 2, kQuietMin = 64;
bool stopped_missing(CpuMeta& m, unsigned v) {
  const uint32_t last = m.last_miss[v].load(std::memory_order_relaxed);
  if (last == 0) return false;
  const uint64_t quiet = m.misses.load(std::memory_order_relaxed) + 1 - last;
  return quiet > uint64_t{kQuietGaps} * m.long_gap[v].load(std::memory_order_relaxed) + kQuietMin;
}

// A miss of cls: its gap since the one before, and this one's place.
void note_miss(CpuMeta& m, unsigned cls) {
  const uint32_t now = m.misses.load(std::memory_order_relaxed) + 1;
  const uint32_t last = m.last_miss[cls].load(std::memory_order_relaxed);
  const uint32_t window = now - m.misses_tick_before.load(std::memory_order_relaxed);
  const uint32_t gap = now - last;
  if (last != 0 && gap <= window && gap > m.long_gap[cls].load(std::memory_order_relaxed))
    m.long_gap[cls].store(gap, std::memory_order_relaxed);
  m.last_miss[cls].store(now, std::memory_order_relaxed);
}

// Takes capacity from a class of CPU c other than `keep` that has not missed since the
// thief last passed it (second-chance clock) and missed less than half as often as
// `keep` lately, or has stopped missing. Lock of c held. False when nothing could be
// taken (or the thread left c). Without the hysteresis, and with two revolutions of the
// clock that always found a victim, the 50 classes of rptest, all missing, passed
// capacity back and forth: one steal per grow, each batch stolen drained to the depot
// and refilled again, a large share of the run's time. The clock visits the classes
// in `held` only (a walk of every header was a large share too) and
// kStealLooks of them a call, so that a miss where no class qualifies costs little; it
// goes on from there next time.
constexpr unsigned kStealLooks = 8;
constexpr uint8_t kStealWait = 8;
bool steal(uint32_t c, CpuMeta& m, unsigned keep) USLAB_REQUIRES(m.lock) {
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
    if (2 * uint64_t{recent_misses(m, v)} >= need && !stopped_missing(m, v)) continue;
    uint32_t step = batch_size(v) < cap ? batch_size(v) : cap;
    void* spill[kMaxBatch];
    long k = percpu_resize(c, v, begin_of(v) + cap - step, spill);
    if (k < 0) return false;
    add_capacity(m, -static_cast<ptrdiff_t>(size_t{step} * class_size(v)));
    m.steals++;
    if (k) depot_give(shard_of_cpu(c), v, spill, static_cast<size_t>(k));
    return true;
  }
  return false;
}

// The decay clock is read on every 8th miss of a CPU: a read on every refill and
// drain (two a batch, plus the page heap's) showed in N x alloc / N x free.
void tick_every_few_misses(CpuMeta& m) {
  uint32_t k = m.misses.load(std::memory_order_relaxed) + 1;
  m.misses.store(k, std::memory_order_relaxed);
  if (k % 8 == 0) decay_maybe_tick();
  background_poke();  // every miss: one load, unless the thread sleeps or is wanted
}

}  // namespace

// Called on every miss of cls on CPU c: grows the class's capacity by a batch while
// the CPU's byte budget allows (taking capacity from classes that stopped missing
// when it does not). Misses on free (`alloc` false) grow it only to two batches,
// enough to batch the drains: objects a CPU frees but does not allocate (the
// consumer of a producer/consumer pair) would only sit in a bigger sheaf.
// A refill a depot sheaf served may grow past the budget while the other CPUs leave
// theirs unused (kLendMax), without taking from other classes.
// A miss that would change nothing (the class marked, at its most capacity) takes
// no lock: the steady state of a class that streams through its sheaf. What it reads
// may be stale; a bit cleared meanwhile is set again by the next miss.
void on_miss(uint32_t c, unsigned cls, bool alloc, bool from_depot) {
  prepare_cpu(c);
  CpuMeta& m = meta_[c];
  note_miss(m, cls);
  if (alloc) {
    int32_t r = m.reuse.load(std::memory_order_relaxed) + (from_depot ? 1 : -kSlabRefill);
    r = r > kReuseCap ? kReuseCap : r < -kReuseCap ? -kReuseCap : r;
    m.reuse.store(r, std::memory_order_relaxed);
  }
  uint32_t max = sheaf_max_capacity(cls);
  if (!alloc && max > 2 * batch_size(cls)) max = 2 * batch_size(cls);
  if (__atomic_load_n(&m.ready, __ATOMIC_ACQUIRE) && m.missed.has(cls) && m.missed_tick.has(cls) &&
      capacity_of(c, cls) >= max)
    return tick_every_few_misses(m);
  m.lock.lock();
  if (!m.ready) __atomic_store_n(&m.ready, true, __ATOMIC_RELEASE);
  m.missed.set(cls, true);
  m.missed_tick.set(cls, true);
  m.active.set(cls, true);
  uint32_t cap = capacity_of(c, cls);
  if (cap < max) {
    uint32_t step = batch_size(cls) < max - cap ? batch_size(cls) : max - cap;
    size_t need = size_t{step} * class_size(cls);
    // Past the budget (lent capacity) a class takes from the others what it grows by.
    size_t limit = m.capacity_bytes > budget_ ? m.capacity_bytes : budget_;
    if (from_depot && m.reuse.load(std::memory_order_relaxed) >= kReuseToBorrow &&
        m.capacity_bytes + need > budget_ &&
        m.capacity_bytes + need <= lend_limit_now(m.capacity_bytes))
      limit = m.capacity_bytes + need;
    while (m.capacity_bytes + need > limit && m.steal_wait[cls] == 0 && steal(c, m, cls)) {
    }
    if (m.capacity_bytes + need > limit) {
      // No class to take from: the next kStealWait misses do not look again (when
      // all classes are busy, looking on every miss showed in rptest's time).
      m.steal_wait[cls] = m.steal_wait[cls] ? m.steal_wait[cls] - 1 : kStealWait;
    } else {
      prepare_slots(c, m, cls, begin_of(cls) + cap + step);
      if (percpu_resize(c, cls, begin_of(cls) + cap + step, nullptr) >= 0) {
        add_capacity(m, static_cast<ptrdiff_t>(need));
        m.grows++;
        if (m.capacity_bytes > budget_) m.borrows++;
        m.held.set(cls, true);
      }
    }
  }
  m.lock.unlock();
  tick_every_few_misses(m);
}

}  // namespace uslab::percpu_internal
