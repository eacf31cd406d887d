// core/alloc/memory_limit.cc — the memory limit; see memory_limit.h.
#include "core/alloc/memory_limit.h"

#include "core/alloc/decay.h"
#include "core/alloc/meta_arena.h"
#include "core/alloc/page_heap.h"
#include "core/alloc/paged_pool.h"
#include "core/platform/cgroup.h"

namespace uslab {

constinit std::atomic<uint32_t> g_limit_state{0};

namespace {

constinit Mutex decide_lock_;
USLAB_LOCK_ONE(kMemoryLimit, decide_lock_);
// Written under decide_lock_ (decided once, or set by memory_limit_set); bytes and
// hard are read by limit_admit_slow without it, as relaxed atomics.
MemoryLimit limit_{};
constinit std::atomic<uint64_t> last_release_ms_{0}, releases_{0}, refusals_{0};
// The heap's resident estimate after the last release (0: below the limit since).
constinit std::atomic<size_t> resident_at_release_{0};

// Decides the limit (decide_lock_ held): the option's, or the cgroup's share.
void decide_locked() USLAB_REQUIRES(decide_lock_) {
  USLAB_DCHECK(decide_lock_.held());
  if (g_limit_state.load(std::memory_order_relaxed) != kLimitUndecided) return;
  limit_.hard = g_config.memory_limit_hard;
  uint64_t conf = g_config.memory_limit;
  if (conf == kMemoryLimitNone) {
    os::format(limit_.source, sizeof limit_.source, "none (memory_limit=none)");
  } else if (conf) {
    limit_.bytes = conf;
    os::format(limit_.source, sizeof limit_.source, "memory_limit=%zu", static_cast<size_t>(conf));
  } else {
    os::CgroupLimit cg;
    if (os::cgroup_memory_limit(os::CgroupFiles{}, &cg) && cg.bytes) {
      limit_.bytes = cg.bytes / 100 * kCgroupLimitPercent;
      os::format(limit_.source, sizeof limit_.source, "%u%% of %zu, cgroup v%d %s",
                 kCgroupLimitPercent, static_cast<size_t>(cg.bytes), cg.version, cg.file);
    } else {
      os::format(limit_.source, sizeof limit_.source,
                 "none (no memory_limit, and no cgroup limit)");
    }
  }
  limit_.decided = true;
  g_limit_state.store(limit_.bytes ? kLimitActive : kLimitNone, std::memory_order_release);
}

void decide() {
  LockGuard g(decide_lock_);
  decide_locked();
}

}  // namespace

size_t heap_resident_estimate() {
  size_t clean = 0;
  for_each_shard_used([&](unsigned sh) { clean += g_page_heap[sh].clean_free_bytes(); });
  size_t mapped = segment_mapped_bytes();
  size_t meta = g_meta_arena.mapped() + g_paged_pool_bytes.load(std::memory_order_relaxed);
  return (mapped > clean ? mapped - clean : 0) + meta;
}

void limit_decide_slow(size_t mapped) {
  config_init();
  // A heap this small reads no file: unless the option gives a limit, wait.
  if (g_config.memory_limit == 0 && mapped < kLimitDecideBytes) return;
  decide();
}

bool limit_admit_slow(size_t bytes) {
  const uint64_t limit = __atomic_load_n(&limit_.bytes, __ATOMIC_RELAXED);
  const bool hard = __atomic_load_n(&limit_.hard, __ATOMIC_RELAXED);
  size_t resident = heap_resident_estimate();
  if (resident + bytes <= limit) {
    if (resident_at_release_.load(std::memory_order_relaxed))
      resident_at_release_.store(0, std::memory_order_relaxed);
    return true;
  }
  // Past the limit: everything cached and every free page back now. Again once a tick
  // has passed, or the heap has grown by a sixteenth of the limit since the last
  // release: a program whose own memory is past the limit pays one release per
  // sixteenth it grows, not one per slab, and one that frees and refills fast (a cache
  // flushed, then filled with other sizes) gets its freed memory back before the
  // kernel's limit is reached, not a tick later.
  uint64_t now = os::now_ms(), last = last_release_ms_.load(std::memory_order_relaxed);
  size_t base = resident_at_release_.load(std::memory_order_relaxed);
  if (hard || !base || now - last >= decay_tick_ms() || resident >= base + limit / 16) {
    last_release_ms_.store(now, std::memory_order_relaxed);
    releases_.fetch_add(1, std::memory_order_relaxed);
    decay_release_all();
    resident = heap_resident_estimate();
    resident_at_release_.store(resident ? resident : 1, std::memory_order_relaxed);
  }
  if (!hard || resident + bytes <= limit) return true;
  refusals_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

MemoryLimit memory_limit(bool decide_now) {
  LockGuard g(decide_lock_);
  if (decide_now) {
    config_init();
    decide_locked();
  }
  return limit_;
}

void memory_limit_set(uint64_t bytes, bool hard) {
  config_init();
  LockGuard g(decide_lock_);
  __atomic_store_n(&limit_.bytes, bytes, __ATOMIC_RELAXED);
  __atomic_store_n(&limit_.hard, hard, __ATOMIC_RELAXED);
  limit_.decided = true;
  if (bytes)
    os::format(limit_.source, sizeof limit_.source, "%zu, set at run time (uslab.memory_limit)",
               static_cast<size_t>(bytes));
  else
    os::format(limit_.source, sizeof limit_.source, "none, set at run time (uslab.memory_limit)");
  resident_at_release_.store(0, std::memory_order_relaxed);
  g_limit_state.store(bytes ? kLimitActive : kLimitNone, std::memory_order_release);
}

LimitStats memory_limit_stats() {
  return LimitStats{releases_.load(std::memory_order_relaxed),
                    refusals_.load(std::memory_order_relaxed)};
}

void memory_limit_describe(const MemoryLimit& l, const LimitStats& st, size_t resident,
                           char* out, size_t cap) {
  if (!l.decided)
    os::format(out, cap, "memory limit: not looked for yet (the heap is below %zu MiB)\n",
               kLimitDecideBytes >> 20);
  else if (!l.bytes)
    os::format(out, cap, "memory limit: %s\n", l.source);
  else
    os::format(out, cap,
               "memory limit: %zu bytes, %s (%s); heap resident now %zu; %zu releases, "
               "%zu allocations refused\n",
               static_cast<size_t>(l.bytes), l.hard ? "hard" : "soft", l.source,
               resident, static_cast<size_t>(st.releases),
               static_cast<size_t>(st.refusals));
}

}  // namespace uslab
