// core/alloc/percpu.h — per-CPU sheaves over restartable sequences.
//
// Owns: one region per possible CPU (256 KiB of address space each, reserved at
// start and touched lazily). Slot 0 of a region is never written (reads 0); then
// come, per size class, a 32-bit header {current, end} (slot indexes in the region),
// then a 16-bit hit counter per class (kHitsOffset: allocations served, for the
// statistics and the decay tick), then the classes' slots. `begin`, a per-class
// constant, indexes a guard slot that is never written either; the cached objects
// are the slots (begin, current], so the top object is slots[current], and `end`
// bounds current (capacity end - begin).
// An empty sheaf's top reads 0 (its guard), and so does a header never used or
// drained (0, so current 0 reads slot 0): pop tests the top for 0 and needs no
// bounds check of its own.
//
// Lock-free fast path: malloc pops and free pushes inside an rseq critical section
// that ends in one committing 32-bit store of the header, `current` moved and `end`
// as the section read it (a pop bumps its class's hit counter just before; a
// restarted pop may count twice). The kernel restarts the section if the thread is
// preempted, migrated or signalled before the commit (the userspace form of SLUB's
// tid check), so there is no atomic instruction and no lock, and an interrupted
// section has no effect (which also makes fork safe).
//
// Slow paths run the batch sections below, which move up to a whole sheaf in one
// section and are tied to an expected CPU (they fail if the thread is elsewhere).
// Rule for every section: before its commit it writes only slots above `current`
// (and its own output): a restart must find the sheaf as it was. A drain that put
// the freed object into a slot it had just emptied broke this and handed blocks out
// twice (test/stress/churn.c's signal storm catches it every run).
// A CPU's capacity (the `end` fields) and its byte budget change only under that
// CPU's Mutex (CpuMeta::lock) and only through sections that run on that CPU.
//
// A header of 0 ({current 0, end 0}) makes every operation miss: that is the state
// of a CPU never used (the region is fresh zero pages) and of a CPU being drained.
// Draining a CPU from another one (trim) swaps each header for 0 with an atomic
// exchange, then fences the CPU with membarrier(PRIVATE_EXPEDITED_RSEQ),
// which aborts every section in flight there; a section that committed between the
// swap and the fence shows as a non-zero header, and the swap is redone. Once all
// headers stay 0 across a fence, no section on that CPU can commit until they are
// restored: the decay tick's trim (percpu.cc) rewrites a detached sheaf from any CPU
// and stores its header back, capacity unchanged. Order of locks: CPU lock → depot →
// central.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/depot.h"
#include "core/alloc/percpu_layout.h"
#include "core/alloc/percpu_rseq.h"
#include "core/alloc/sampler.h"

namespace uslab {

// Recomputes g_percpu_one_node after the topology changed (shard.h).
void percpu_nodes_changed();


// Bulk moves on the current CPU's sheaf of cls: take pops up to n objects into out;
// put pushes the last k of ptrs[0..n) that fit. Both return k (0 when the thread has
// no usable CPU, or n is 0). The sections below need n ≥ 1: with 0, a push copied two
// stale pointers above the sheaf's top, one into the next class's guard slot, which
// malloc then handed out (uslab_free_bulk and deferred frees on several nodes).
size_t percpu_take(unsigned cls, void** out, size_t n);
size_t percpu_put(unsigned cls, void* const* ptrs, size_t n);

// Decides the front end once (per-CPU when rseq works and the configuration allows);
// returns g_percpu.
bool percpu_decide();
bool percpu_decided();

// No usable CPU: the thread's cache serves it (front.cc).
constexpr uint32_t kNoCpu = ~uint32_t{0};
// The CPU whose sheaves the calling thread may use now, or kNoCpu.
uint32_t percpu_usable_cpu();
// A miss of CPU c's sheaf of cls on allocation (c: percpu_usable_cpu's): the sheaf
// refilled from the depot, one object returned (nullptr with ENOMEM); r: what the
// program asked for, for a sampling hook.
void* percpu_refill(uint32_t c, unsigned cls, Request r);
// A miss on free: p goes in, or with a batch of the sheaf's top objects to the depot.
// False when the thread moved to another CPU meanwhile (nothing done: again).
bool percpu_drain(uint32_t c, void* p, unsigned cls);

// Drains every CPU's sheaves and the depots back to the slabs (malloc_trim), or only
// those of one class (a cache being destroyed). Without membarrier's rseq fence only
// the depots are drained: percpu_drain_class then returns how many objects of the
// class it left in CPU sheaves.
void percpu_drain_all();
size_t percpu_drain_class(unsigned cls);

// The decay tick's share of the CPU sheaves (decay.h): on every CPU, the classes
// that neither missed nor served an allocation over the last kCacheIdleTicks ticks
// are drained and their capacity goes back to the budget (idle capacity shrinks; a
// class in use regrows it by a batch per miss). A class that served allocations from
// its sheaf without a miss holds more than it needs: it is emptied and keeps its
// capacity (objects kept through light use pinned slabs that were otherwise free
// after a peak). One that missed cycled through its sheaf: what it holds is what it
// uses next, and stays. A CPU holding lent capacity (capacity.cc) that the other
// CPUs now use gives it back: its classes that did not miss are drained first.
// Remote-node buffers are flushed.
void percpu_decay_sheaves();
// Arms the heap profiler's sampling streams of every CPU in use (sampler.h), as
// sampling turns on: a CPU armed only at its next carry would sample nothing of its
// first 4096 pops per class (a program that allocates 2000 blocks of 16 KiB: none).
void percpu_sample_arm();
// sample_set_client (sampler.h), and when sampling turns on or its mean changes,
// every CPU's streams and this thread's armed (the others' at their next carry).
void set_sample_client(SampleClient which, const SampleHooks* hooks, uint64_t mean_bytes);
// Bytes of objects in the CPUs' class sheaves (a racy sum).
size_t percpu_cached_bytes();

// The deferred-free sheaves (pushes go through percpu_push_one with kDeferSheaf).
// Only used when rseq_fence_available(): a barrier must be able to empty them all.
// percpu_defer_take opens the current CPU's deferred sheaf if it is not open yet
// and moves its pointers (at most kDeferCap) to out; -1 when the thread has no
// usable CPU. percpu_defer_drain_all empties every CPU's through sink.
long percpu_defer_take(void** out);
void percpu_defer_drain_all(void (*sink)(void* const* objs, size_t n, void* arg), void* arg);
size_t percpu_defer_pending();  // pointers in the CPUs' deferred sheaves (racy sum)

struct PerCpuClassStats {
  size_t cpu_objects;  // cached in CPU sheaves (racy sum)
  uint64_t hits;       // allocations served by the sheaves
  uint64_t refills;    // sheaf misses on allocation (a batch came in)
  uint64_t drains;     // sheaf misses on free that moved a batch out
};
void percpu_class_stats(PerCpuClassStats out[kMaxClasses]);
struct PerCpuStats {
  uint32_t cpus_possible;
  uint32_t cpus_used;
  size_t budget;  // bytes of capacity allowed per CPU
  uint64_t grows, steals, drains;
  uint64_t borrows;  // grows past a CPU's budget, lent by the CPUs that leave theirs unused
};
PerCpuStats percpu_stats();
// The resident header pages of the CPUs' regions (headers and hit counters; the
// slot pages hold cached objects and go back with them), for the statistics.
size_t percpu_header_bytes();



// Free p with several NUMA nodes: onto the class's sheaf when its slab is of the
// current CPU's node, else onto the CPU's remote-node buffer (kRemoteSheaf).
void percpu_free_nodes(void* p, unsigned cls);
// An entry of a remote-node buffer: the object's address (below 2^kRemoteTagShift)
// tagged with its class and its slab's shard in the bits above, so that the flush
// needs no page-map lookup. Pushes of the same object give the same entry (the double-free
// check compares entries).
constexpr unsigned kRemoteTagShift = os::kUserAddressBits;
inline uint64_t remote_entry(const void* p, const Span* s) {
  static_assert(kMaxClasses <= 128 && kMaxShards <= 64 && kRemoteTagShift + 13 <= 64,
                "7 + 6 bits above the address");
  return reinterpret_cast<uintptr_t>(p) | uint64_t{s->size_class} << kRemoteTagShift |
         uint64_t{s->shard} << (kRemoteTagShift + 7);
}
// An entry's object, and its group key: class | shard << 7.
inline void* remote_entry_object(uint64_t e) {
  return reinterpret_cast<void*>(e & ((uint64_t{1} << kRemoteTagShift) - 1));
}
inline unsigned remote_entry_key(uint64_t e) {
  return static_cast<unsigned>(e >> kRemoteTagShift);
}
// Frees remote-node entries to the shards that own them: grouped by class and
// shard, each group in one batch (one lock); counted as remote-node frees received
// by the owners' nodes.
void percpu_remote_flush(const uint64_t* entries, size_t n);
// Remote-node frees received per node (shard.h's counters: objects flushed to it
// from CPUs, or thread caches, of other nodes) and objects waiting in the CPUs'
// remote-node buffers (a racy sum).
struct RemoteNodeStats {
  uint64_t received[kTopoMaxNodes];
  uint64_t flushes;
  size_t pending;
  // Of those, per class: free objects the statistics count as cached by the CPUs,
  // not as allocated (they were: a bulk test on two nodes saw 26 objects of 32 KiB
  // that the program had freed in mallinfo's uordblks until malloc_trim).
  uint32_t pending_by_class[kMaxClasses];
};
void percpu_remote_stats(RemoteNodeStats* out);

}  // namespace uslab
