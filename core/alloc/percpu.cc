// core/alloc/percpu.cc — per-CPU sheaves: set-up, refill and drain, draining for
// trim, the decay tick's share, the remote-node buffers and their flush, stats and
// fork; a CPU's metadata and sheaf slots backed with writable pages before they are
// read (first_touch.h). The adaptive capacity is capacity.cc's, the heap profiler's
// streams percpu_sampling.cc's, what they share percpu_meta.h's. See percpu.h for
// the layout and the rules; the locking is percpu_meta.h's.
#include "core/alloc/percpu.h"
#include "core/alloc/percpu_meta.h"

#include <atomic>
#include <cstring>

#include "core/alloc/background.h"
#include "core/alloc/decay.h"
#include "core/alloc/error_report.h"
#include "core/alloc/sampler.h"
#include "core/alloc/first_touch.h"
#include "core/alloc/huge_cache.h"

namespace uslab {

constinit char* g_cpu_region = nullptr;
constinit uint32_t g_cpu_count = 0;
constinit uint8_t g_percpu = 0;
constinit uint8_t g_percpu_one_node = 0;

namespace percpu_internal {

CpuMeta* meta_ = nullptr;
// meta_ is set before g_cpu_count is published (release), and both under init_lock_.
USLAB_LOCK_SET(
    kCpu, [] { return __atomic_load_n(&g_cpu_count, __ATOMIC_ACQUIRE); },
    [](uint32_t c) { return &meta_[c].lock; });
size_t budget_ = 0;
USLAB_LARGE_ZERO constinit std::atomic<uint64_t> cpu_prepared_[kMaxCpus / 64] = {};

// Backs CPU c's CpuMeta and its shard's metadata with writable pages at the CPU's
// first miss, before they are read (first_touch.h: a read first maps the zero page,
// whose replacement at the first write interrupts every CPU of the process). The
// headers of c's sheaves are not included: the fast paths have read them by then.
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
// The pages are the OS's (4, 16 or 64 KiB): 64, 16 or 4 of them a region.
static_assert((size_t{1} << kCpuRegionShift) / 4096 <= 64, "a bit per page");
unsigned slots_per_page_shift() { return __builtin_ctzll(os::page_size() / sizeof(void*)); }

// The region's pages that slots begin … end of a sheaf lie on (a bit each).
uint64_t slot_pages(unsigned idx, uint32_t end) {
  const unsigned shift = slots_per_page_shift();
  uint32_t first = begin_of(idx) >> shift, last = end >> shift;
  return (~uint64_t{0} >> (63 - last)) & (~uint64_t{0} << first);
}

void prepare_slots(uint32_t c, CpuMeta& m, unsigned idx, uint32_t end) {
  uint64_t want = slot_pages(idx, end);
  uint64_t missing = want & ~m.pages_ready;
  if (!missing) return;
  uint32_t lo = static_cast<uint32_t>(__builtin_ctzll(missing));
  uint32_t hi = 63 - static_cast<uint32_t>(__builtin_clzll(missing));
  os::populate(region_of(c) + size_t{lo} * os::page_size(), size_t{hi - lo + 1} * os::page_size());
  m.pages_ready |= want;
}

}  // namespace percpu_internal

using namespace percpu_internal;

namespace {

constinit Mutex init_lock_;
USLAB_LOCK_ONE(kPercpuInit, init_lock_);
constinit std::atomic<bool> decided_{false};
constinit std::atomic<uint64_t> remote_flushes_{0};  // percpu_remote_flush calls
}  // namespace

// uslab's own rseq registration is made here on a thread's first slow path; a thread
// the kernel refused, or on a CPU id beyond the table, has no usable CPU.
uint32_t percpu_usable_cpu() {
  uint32_t c = rseq_cpu_id();
  if (c < g_cpu_count) return c;
  if (c == kRseqCpuUninitialized && rseq_register_thread()) {
    c = rseq_cpu_id();
    if (c < g_cpu_count) return c;
  }
  return kNoCpu;
}

namespace {

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

// Runs a batch section (pop or push of up to n objects) on the CPU the thread is
// on, again when it moved meanwhile; returns what it moved (0 without a usable
// CPU). With `miss` (Miss::kAlloc or Miss::kFree), a section that moved fewer than n
// counts as a miss of that direction, so that classes used in bulk grow their
// capacity like the others.
enum class Miss { kNone, kAlloc, kFree };
template <typename Section>
size_t on_current_cpu(unsigned cls, size_t n, Miss miss, Section section) {
  for (;;) {
    uint32_t c = percpu_usable_cpu();
    if (c == kNoCpu) return 0;
    long k = section(c);
    if (k < 0) continue;
    if (miss != Miss::kNone && static_cast<size_t>(k) < n) on_miss(c, cls, miss == Miss::kAlloc);
    return static_cast<size_t>(k);
  }
}

// Puts buf[0..n) on the current CPU's sheaf as far as it has room; the rest goes
// to the depots, given from shard `here` (the one whose depot they came from).
void push_or_give(unsigned here, unsigned cls, void** buf, size_t n) {
  if (n == 0) return;
  n -= on_current_cpu(cls, n, Miss::kNone,
                      [&](uint32_t c) { return percpu_push_batch(c, cls, buf, n); });
  if (n) depot_give(here, cls, buf, n, batch_size(cls));
}

// The L2 size (512 KiB … 4 MiB), and no more than a 16 MiB share for `cpus` CPUs
// (at least 1 MiB): with 16 CPUs of 2 MiB each, the sheaves of a larson-style
// server held far more than jemalloc's peak RSS; 1 MiB each made it even at the same
// speed. A program with every class in use wants more: one batch of each class up to
// 16 KiB is over 1 MiB, and with 512 KiB rptest stole capacity on nearly every grow
// (faster with a 1 MiB floor). Not taken: with that floor, `bench rss` frag came back
// later than decay_ms in some runs.
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
  if (rseq_init_process(g_config.percpu, g_config.membarrier) != RseqMode::kNone) {
    uint32_t n = topology_in_use().cpus_possible;
    if (g_config.percpu_cpus && n > g_config.percpu_cpus)
      n = static_cast<uint32_t>(g_config.percpu_cpus);
    if (n > kMaxCpus) n = kMaxCpus;
    char* region = static_cast<char*>(os::map_metadata(size_t{n} << kCpuRegionShift));
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
#if defined(__x86_64__)
      bool base = g_config.sheaf_addressing == Config::SheafAddressing::kBase ||
                  (g_config.sheaf_addressing == Config::SheafAddressing::kAuto && cpu_is_intel());
#else
      constexpr bool base = false;  // one form elsewhere (percpu_rseq_aarch64.h)
#endif
      __atomic_store_n(&g_cpu_count, n, __ATOMIC_RELEASE);
      __atomic_store_n(&g_percpu, base ? kSheafBase : kSheafIndex, __ATOMIC_RELEASE);
      percpu_nodes_changed();
    }
  }
  decided_.store(true, std::memory_order_release);
  return g_percpu;
}

void* percpu_alloc_retry(unsigned cls, Request r) { return percpu_alloc(cls, r); }
void* percpu_alloc_base(unsigned cls, Request r) { return percpu_alloc_as<true>(cls, r); }
void percpu_free_base(void* p, unsigned cls) { percpu_free_as<true>(p, cls); }

void* percpu_alloc_tick(unsigned cls, Request r) {
  // The carry banks the hits that wrapped the counter, less the one the retry below
  // counts again. Any CPU's bank will do (the statistics sum them): the thread may
  // have moved since.
  uint32_t c = rseq_cpu_id();
  bool sampled = false, notice = true;
  if (c < g_cpu_count) {
    CpuMeta& m = meta_[c];
    m.class_hits[cls].fetch_add(kHitsPerCarry - 1, std::memory_order_relaxed);
    depot_note_epoch(shard_of_cpu(c));
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
  if (__builtin_expect(sampled, 0)) {
    if (void* p = g_sample_hooks->small(cls, r)) return p;
    // Declined (a client's re-entry, no slot free): served unsampled, by a pop the
    // hit counter does not count. A counted retry would carry at once where the next
    // sample is one allocation away (a mean of a few bytes), and be declined again.
    void* p = nullptr;
    on_current_cpu(cls, 1, Miss::kNone,
                   [&](uint32_t cpu) { return percpu_pop_batch(cpu, cls, &p, 1); });
    if (p) return p;
  }
  return percpu_alloc(cls, r);
}
void percpu_free_retry(void* p, unsigned cls) { percpu_free(p, cls); }

bool percpu_decided() { return decided_.load(std::memory_order_acquire); }

namespace {

// Depot sheaves a miss of CPU c's sheaf of cls moves: up to half its capacity, at most
// kSheavesPerMove (depot.h).
size_t sheaves_per_move(uint32_t c, unsigned cls) {
  const size_t half = capacity_of(c, cls) / (2 * batch_size(cls));
  return half < 1 ? 1 : half < kSheavesPerMove ? half : kSheavesPerMove;
}

}  // namespace

void* percpu_refill(uint32_t c, unsigned cls, Request r) {
  // The miss first: taking the batch before it was slower in N x alloc (AMD EPYC),
  // for the same work.
  Depot& depot = g_depot[shard_of_cpu(c)][cls];
  on_miss(c, cls, true, depot.has_full());
  void* buf[kMaxRefill];
  const size_t batch = batch_size(cls);
  size_t n = depot.take(cls, buf, sheaves_per_move(c, cls) * batch, batch);
  if (n == 0) {
    // No slab could be made (out of memory, or mmap refused): objects of cls that other
    // CPUs' sheaves hold (freed by a thread that has since moved, or by the thread
    // that runs deferred frees) go back to the slabs, and the refill tries once more.
    // No lock is held here; draining takes each CPU's.
    percpu_drain_class(cls);
    n = depot.take(cls, buf, sheaves_per_move(c, cls) * batch, batch);
  }
  USLAB_PROBE(sheaf_refill, cls, n);
  bump(meta_[c].class_refills[cls]);
  if (n == 0) return os::fail_nomem();
  if (__builtin_expect(g_sampling, 0) && sample_miss(c, cls))
    if (void* q = g_sample_hooks->small(cls, r)) {
      push_or_give(shard_of_cpu(c), cls, buf, n);
      return q;
    }
  void* obj = buf[--n];
  push_or_give(shard_of_cpu(c), cls, buf, n);
  return obj;
}

bool percpu_drain(uint32_t c, void* p, unsigned cls) {
  void* buf[kMaxRefill];
  on_miss(c, cls, false);
  // One section: p goes in or, when the sheaf is full, a batch made of its top
  // objects and p goes to the depot (to the slabs past its bound: more of them).
  const size_t batch = batch_size(cls);
  size_t n = g_depot[shard_of_cpu(c)][cls].at_bound(cls) ? slab_drain_size(cls)
                                                          : sheaves_per_move(c, cls) * batch;
  long k = percpu_push_draining(c, cls, p, buf, n - 1);
  if (k == kSheafMoved) return false;
  if (k == kSheafDoubleFree) {
    report_bad_free(p, "double free", cls);
  } else if (k == kSheafClosed) {
    depot_give(shard_of_cpu(c), cls, &p, 1);
  } else if (k > 0) {
    buf[k++] = p;
    USLAB_PROBE(sheaf_drain, cls, k);
    bump(meta_[c].class_drains[cls]);
    depot_give(shard_of_cpu(c), cls, buf, static_cast<size_t>(k), batch);
  }
  return true;
}

void percpu_nodes_changed() {
  __atomic_store_n(&g_percpu_one_node, node_count() == 1 ? g_percpu : uint8_t{0},
                   __ATOMIC_RELAXED);
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
    for (size_t g = 0, at = 0; g < ng; at += groups[g].count, g++)
      groups[g].next = static_cast<uint16_t>(at);
    for (size_t i = 0; i < k; i++) objs[groups[which[i]].next++] = remote_entry_object(e[i]);
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
    uint32_t c = percpu_usable_cpu();
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
  if (c >= g_cpu_count) c = percpu_usable_cpu();  // a thread's first free registers it
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
// fails. A fence first, before any header changes: where fences fail for good (a
// filter that refuses membarrier, installed after start) nothing is detached and the
// sheaves stay in use on their CPU. Where a fence fails after the swap (a transient
// failure, or a refusal that began meanwhile), each header taken is put back where it
// is still 0: the slots were not touched, a section that read the header before the
// swap and commits after it stores a header that is right for them, and one that
// read 0 missed and waits for this CPU's lock (held) to open the sheaf. The sheaves
// stay in use then too, nothing lost.
bool detach(uint32_t c, const HeaderSet& set, uint32_t* cur) {
  if (!rseq_fence_cpu(c)) return false;
  uint32_t* h = headers(c);
  uint32_t taken[kSheafHeaders];
  for (unsigned i = 1; i < kSheafHeaders; i++)
    if (set.has(i)) {
      taken[i] = __atomic_exchange_n(&h[i], 0u, __ATOMIC_SEQ_CST);
      cur[i] = taken[i] & 0xffff;
    }
  for (;;) {
    if (!rseq_fence_cpu(c)) {
      for (unsigned i = 1; i < kSheafHeaders; i++) {
        uint32_t zero = 0;
        if (set.has(i) && taken[i] != 0)
          __atomic_compare_exchange_n(&h[i], &zero, taken[i], false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED);
      }
      return false;
    }
    bool again = false;
    for (unsigned i = 1; i < kSheafHeaders; i++)
      if (set.has(i) && __atomic_load_n(&h[i], __ATOMIC_SEQ_CST) != 0) {
        // A section that read the header before the swap committed after it.
        taken[i] = __atomic_exchange_n(&h[i], 0u, __ATOMIC_SEQ_CST);
        cur[i] = taken[i] & 0xffff;
        again = true;
      }
    if (!again) return true;
  }
}

// Empties CPU c's sheaves of the classes in `set` into the slabs, their capacity
// back to the budget (its lock held).
bool drain_cpu(uint32_t c, CpuMeta& m, const HeaderSet& set) USLAB_REQUIRES(m.lock) {
  uint32_t cur[kSheafHeaders];
  size_t capacity = 0;
  for (unsigned cls = 1; cls < kMaxClasses; cls++)
    if (set.has(cls)) capacity += size_t{capacity_of(c, cls)} * class_size(cls);
  if (!detach(c, set, cur)) return false;
  add_capacity(m, -static_cast<ptrdiff_t>(capacity));
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
// each class kept for light activity pinned ten times its bytes in slabs. The next
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

// Calls f(class) for each entry of CPU c's remote-node buffer: a racy read of entries
// the CPU may be pushing or flushing, good for a count, not a list.
template <typename F>
void for_each_remote_pending(uint32_t c, F f) {
  uint32_t n = cached_of(c, kRemoteSheaf);
  auto* e = reinterpret_cast<uint64_t*>(slots_of(c) + begin_of(kRemoteSheaf) + 1);
  for (uint32_t i = 0; i < n && i < kRemoteCap; i++)
    f(static_cast<unsigned>(remote_entry_key(__atomic_load_n(&e[i], __ATOMIC_RELAXED)) & 127));
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

// Closes CPU c's fixed-capacity sheaf idx (kDeferSheaf, kRemoteSheaf) when it is
// open and empty (its lock held), so that its slot pages can go back with the rest of
// an idle CPU's (release_idle_slot_pages); its next use opens it again
// (take_fixed_sheaf). Open, each kept a page resident on every CPU that ever freed a
// remote-node object or deferred one. A push that lands before the fence keeps it
// open, as it was. True when closed.
bool close_fixed_if_empty(uint32_t c, unsigned idx) {
  uint32_t* h = headers(c);
  uint32_t header = __atomic_load_n(&h[idx], __ATOMIC_RELAXED), cur[kSheafHeaders];
  if (header == 0 || cached_of(c, idx) != 0) return false;
  if (!detach(c, HeaderSet::range(idx, idx + 1), cur)) return false;
  if (cur[idx] == begin_of(idx)) return true;
  __atomic_store_n(&h[idx], (header >> 16) << 16 | cur[idx], __ATOMIC_SEQ_CST);
  return false;
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

// The tick's share of the CPU sheaves (percpu.h): idle classes drained, those that
// served from their sheaf without a miss emptied by trim_cpu.
namespace {

// Gives back CPU c's slot pages that no open sheaf uses (its lock held): a thread that
// moved over the CPUs of a big machine left every region it passed with its slot pages
// resident after their sheaves were drained (on 64 CPUs, a single-threaded
// program's idle_return never came back near its start).
// Page 0 stays (headers, hit counters). A closed sheaf's slots read as 0 once purged,
// as they did before they were first written; prepare_slots backs them again when a
// sheaf reopens (every reopening holds this lock).
void release_idle_slot_pages(uint32_t c, CpuMeta& m) {
  uint64_t keep = 1;
  uint32_t* h = headers(c);
  for (unsigned i = 1; i < kSheafHeaders; i++) {
    uint32_t end = __atomic_load_n(&h[i], __ATOMIC_RELAXED) >> 16;
    if (end > begin_of(i)) keep |= slot_pages(i, end);
  }
  uint64_t release = m.pages_ready & ~keep;
  while (release) {
    uint32_t lo = static_cast<uint32_t>(__builtin_ctzll(release)), hi = lo;
    while (hi + 1 < 64 && (release >> (hi + 1) & 1)) hi++;
    os::purge_zeroing(region_of(c) + size_t{lo} * os::page_size(),
                      size_t{hi - lo + 1} * os::page_size());
    uint64_t run = (~uint64_t{0} >> (63 - hi)) & (~uint64_t{0} << lo);
    release &= ~run;
    m.pages_ready &= ~run;
  }
}

// Drains classes of CPU c (its lock held) until it holds no lent capacity that the
// other CPUs now use (lent_excess): those that did not miss in the last tick first,
// the others only when they are not enough.
void give_back_lent(uint32_t c, CpuMeta& m, const HeaderSet& missed) USLAB_REQUIRES(m.lock) {
  size_t excess = lent_excess(m), taken = 0;
  if (excess == 0) return;
  HeaderSet give;
  for (int pass = 0; pass < 2 && taken < excess; pass++)
    for (unsigned cls = 1; cls < kMaxClasses && taken < excess; cls++) {
      size_t bytes = size_t{capacity_of(c, cls)} * class_size(cls);
      if (bytes == 0 || give.has(cls) || (pass == 0 && missed.has(cls))) continue;
      give.add(cls);
      taken += bytes;
    }
  drain_cpu(c, m, give);
}

}  // namespace

void percpu_decay_sheaves() {
  if (!g_percpu || !rseq_fence_available()) return;
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    CpuMeta& m = meta_[c];
    LockGuard g(m.lock);
    if (!m.ready) continue;
    HeaderSet idle, in_use, missed_now;
    bool any_idle = false, any_in_use = false, any_used = false;
    for (unsigned cls = 1; cls < kMaxClasses; cls++) {
      uint16_t hits = hits_of(c, cls);
      bool missed = m.missed_tick.has(cls), used = hits != m.hits_seen[cls] || m.active.has(cls);
      if (missed) missed_now.add(cls);
      m.hits_seen[cls] = hits;
      uint32_t misses = misses_of(m, cls);
      m.misses_before[cls] = misses - m.misses_at_tick[cls];
      m.misses_at_tick[cls] = misses;
      any_used |= used;
      if (used || !capacity_of(c, cls)) m.idle_ticks[cls] = 0;
      if (!capacity_of(c, cls)) continue;
      if (!used) {
        if (++m.idle_ticks[cls] < cache_idle_ticks()) continue;
        m.idle_ticks[cls] = 0;
        idle.add(cls);
        any_idle = true;
      } else if (!missed && cached_of(c, cls) > 0) {
        in_use.add(cls);
        any_in_use = true;
      }
    }
    for (auto& gap : m.long_gap)
      gap.store(gap.load(std::memory_order_relaxed) / 2, std::memory_order_relaxed);
    m.misses_tick_before.store(m.misses_last_tick.load(std::memory_order_relaxed),
                               std::memory_order_relaxed);
    m.misses_last_tick.store(m.misses.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m.active.clear_all();
    m.missed_tick.clear_all();
    if (any_idle) drain_cpu(c, m, idle);
    if (any_in_use) trim_cpu(c, in_use);
    give_back_lent(c, m, missed_now);
    flush_remote_cpu(c);
    bool closed = false;
    if (!any_used) {  // no class in use here: the empty fixed sheaves close too
      closed |= close_fixed_if_empty(c, kRemoteSheaf);
      closed |= close_fixed_if_empty(c, kDeferSheaf);
    }
    if (any_idle || closed) release_idle_slot_pages(c, m);
  }
}

// n = 0 moves nothing: the sections' copy loop moves at least one pointer, or two.
size_t percpu_take(unsigned cls, void** out, size_t n) {
  if (n == 0) return 0;
  return on_current_cpu(cls, n, Miss::kAlloc,
                        [&](uint32_t c) { return percpu_pop_batch(c, cls, out, n); });
}

size_t percpu_put(unsigned cls, void* const* ptrs, size_t n) {
  if (n == 0) return 0;
  return on_current_cpu(cls, n, Miss::kFree,
                        [&](uint32_t c) { return percpu_push_batch(c, cls, ptrs, n); });
}

void percpu_drain_all() { drain_classes(1, kMaxClasses); }

size_t percpu_drain_class(unsigned cls) {
  drain_classes(cls, cls + 1);
  if (!g_percpu || rseq_fence_available()) return 0;
  size_t left = 0;  // read racily: the caller's class is no longer in use
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    if (!__atomic_load_n(&meta_[c].ready, __ATOMIC_ACQUIRE)) continue;
    left += cached_of(c, cls);
    for_each_remote_pending(c, [&](unsigned k) { left += k == cls; });
  }
  return left;
}

long percpu_defer_take(void** out) {
  for (;;) {
    uint32_t c = percpu_usable_cpu();
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
      for (unsigned cls = 1; cls < kMaxClasses; cls++)
        bytes += size_t{cached_of(c, cls)} * class_size(cls);
  return bytes;
}

void percpu_remote_stats(RemoteNodeStats* out) {
  *out = RemoteNodeStats{};
  for (uint32_t n = 0; n < kTopoMaxNodes; n++) out->received[n] = remote_node_frees(n);
  out->flushes = remote_flushes_.load(std::memory_order_relaxed);
  if (!g_percpu) return;
  for (uint32_t c = 0; c < g_cpu_count; c++) {
    if (!__atomic_load_n(&meta_[c].ready, __ATOMIC_ACQUIRE)) continue;
    out->pending += cached_of(c, kRemoteSheaf);
    for_each_remote_pending(c, [&](unsigned cls) { out->pending_by_class[cls]++; });
  }
}

size_t percpu_header_bytes() {
  if (!g_percpu) return 0;
  size_t pages = 0;
  for (uint32_t c = 0; c < g_cpu_count; c++)
    pages += __atomic_load_n(&meta_[c].ready, __ATOMIC_ACQUIRE);
  return pages * os::page_size();
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
    s.borrows += m.borrows;
    s.steals += m.steals;
    s.drains += m.drains;
  }
  return s;
}

}  // namespace uslab
