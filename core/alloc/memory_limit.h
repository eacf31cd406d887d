// core/alloc/memory_limit.h — a limit on the heap's memory (as tcmalloc's
// SetMemoryLimit; jemalloc has none).
//
// Owns: the limit in force and where it came from — memory_limit=BYTES (config.h), or, when none is
// given, 90% of the control group's limit (cgroup.h: v2 memory.high or memory.max, v1
// memory.limit_in_bytes, the lowest along the cgroup's ancestors), read once, the first time the
// heap maps kLimitDecideBytes (segment.cc tells it; a program below that reads no file: python3 -c
// pass maps one 4 MiB segment); the heap's resident estimate it is checked against (segments
// mapped, less their free pages that are not resident, plus metadata); and what happens near it.
// Before the heap takes more memory (a page heap's span for a slab or a large object, a huge
// block), limit_admit compares the estimate with the limit: past it, the caches are emptied and
// every free page goes back at once, not after decay_ms (again once a decay tick has passed or the
// heap has grown by a sixteenth of the limit, while the program's own memory stays past it); with
// memory_limit_hard=true an allocation that would still pass it fails (ENOMEM; operator new throws)
// instead of waking the OOM killer.
//
// memory_limit_set (mallctl's uslab.memory_limit, as tcmalloc's SetMemoryLimit) sets
// it at run time, in place of the decision.
//
// Locking: the decision is made once, under its own lock, as is a later setting; the
// admission reads the limit's bytes and hardness as relaxed atomics (a setting takes
// effect at the next admission). limit_admit takes no lock of its own besides that and is called with none of
// the heap's held: the release takes them all, one at a time. When the last release
// happened and the estimate after it are relaxed atomics: two threads may both
// release, which costs time, not correctness.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace uslab {

// The heap maps this much before a cgroup's limit is looked for.
constexpr size_t kLimitDecideBytes = size_t{16} << 20;
// The share of a cgroup's limit taken as the soft limit.
constexpr unsigned kCgroupLimitPercent = 90;

struct MemoryLimit {
  uint64_t bytes;  // 0: none
  bool hard;
  bool decided;      // false: the cgroup not read yet (the heap is still small)
  char source[320];  // where the limit came from, for the statistics
};

// 0: not decided yet; 1: no limit; 2: a limit is in force.
constexpr uint32_t kLimitUndecided = 0, kLimitNone = 1, kLimitActive = 2;
extern std::atomic<uint32_t> g_limit_state;
bool limit_admit_slow(size_t bytes);
// Before the heap takes `bytes` more: true, or false when the hard limit refuses them.
// One load unless a limit is in force.
inline bool limit_admit(size_t bytes) {
  if (__builtin_expect(g_limit_state.load(std::memory_order_relaxed) != kLimitActive, 1))
    return true;
  return limit_admit_slow(bytes);
}
void limit_decide_slow(size_t mapped);
// A segment was mapped (`mapped`: all segments' bytes now): the limit is decided at
// the first one when the option gives it, else once kLimitDecideBytes are mapped.
// Reads files, takes no lock of the heap (a page heap's may be held).
inline void limit_note_mapped(size_t mapped) {
  if (__builtin_expect(g_limit_state.load(std::memory_order_relaxed) == kLimitUndecided, 0))
    limit_decide_slow(mapped);
}

// The heap's resident memory as the limit counts it (an estimate, racy).
size_t heap_resident_estimate();
// The limit (with `decide`, the cgroup is read now if it was not: uslab topology).
MemoryLimit memory_limit(bool decide);
struct LimitStats {
  uint64_t releases;  // times the limit made the caches and free pages go back
  uint64_t refusals;  // allocations the hard limit refused
};
LimitStats memory_limit_stats();
// Sets the limit now (0: none) and whether it refuses allocations past it.
void memory_limit_set(uint64_t bytes, bool hard);
// One line describing limit l with its counters st and the heap's resident estimate
// then, for the statistics and uslab topology.
void memory_limit_describe(const MemoryLimit& l, const LimitStats& st, size_t resident, char* out,
                           size_t cap);

}  // namespace uslab
