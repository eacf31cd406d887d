// core/alloc/first_touch.h — a shard's metadata backed with writable pages before
// anything reads it.
//
// Owns: prepare_shard() and the record of the shards it has prepared.
//
// Why: a page of anonymous memory read before it is ever written maps the kernel's
// shared zero page, and the first write after that replaces the page and flushes the
// TLB of every CPU the process runs on, an IPI to each (do_wp_page ->
// flush_tlb_mm_range), which stalls the other threads as well. A shard's page heap
// and central lists (.bss arrays indexed by shard, 10 pages a shard) are read before
// they are written: a page heap searches its free lists, under its lock but before
// it holds any span; other shards read a central list's count of free objects
// without its lock when they look for objects to borrow. Each such page stalls
// both threads, enough to make a concurrent program's first frees slower than
// jemalloc's (faster once prepared). A shard is
// prepared (MADV_POPULATE_WRITE, os::populate) when a CPU of it misses for the first
// time (percpu.cc, which backs the CPU's own metadata and sheaf slots too) or a
// thread cache is given it (thread_cache.cc). The depots are not: each is written
// (its lock) before it is read. Readers of shards never used (stats, the decay
// tick, borrowing) may still map zero pages there: preparing them later costs the
// IPI then, once per page.
//
// Locking: none. Populating is idempotent and leaves the contents alone, so racing
// first users may both prepare a shard; the flag only spares later system calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/shard.h"

namespace uslab {

extern uint8_t g_shard_prepared[kMaxShards] USLAB_HIDDEN;

void prepare_shard_slow(unsigned sh);

// Backs shard sh's page heap and central lists with writable pages (once).
inline void prepare_shard(unsigned sh) {
  if (!__atomic_load_n(&g_shard_prepared[sh], __ATOMIC_ACQUIRE)) prepare_shard_slow(sh);
}

// The bytes prepare_shard made resident (statistics: uslab's own metadata). A thread
// that runs on every CPU of a big machine prepares every shard.
size_t prepared_shard_bytes();

inline bool shard_prepared(unsigned sh) {
  return __atomic_load_n(&g_shard_prepared[sh], __ATOMIC_ACQUIRE) != 0;
}

}  // namespace uslab
