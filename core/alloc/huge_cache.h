// core/alloc/huge_cache.h — freed huge segments kept for reuse.
//
// Owns: up to kHugeCacheEntries segments whose huge object (above the page heap's
// largest span) was freed, kept mapped and resident for decay_ms, so that a program
// that allocates and frees blocks of many MiB in a loop reuses them instead of
// faulting fresh zero pages in every time (glibc avoids that storm by raising its
// mmap threshold; jemalloc and mimalloc were measured many times slower than glibc
// on it). At most a quarter of the rest of the heap's mapped bytes
// (what a program is likely to reuse: one whose huge blocks are a small part of its
// heap keeps no peak's worth of them beside it, as sqlite3 did at exit), but kHugeCacheMinBytes whatever the heap, and kHugeCacheBytes at
// most; each at most kHugeCacheEntryBytes;
// the oldest go first, and the decay tick and malloc_trim unmap them. A request none
// fits takes the largest to grow (huge_cache_take_largest): kept blocks never add to
// a peak that keeps rising. A block is reused only by a shard of the node its pages
// are on (with memory bound to nodes): a thread on node 1 was handed node 0's pages.
//
// Locking: one Mutex guards the entries; segments are unmapped with it held (rare).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/alloc/segment.h"

namespace uslab {

constexpr size_t kHugeCacheEntries = 8;
constexpr size_t kHugeCacheEntryBytes = size_t{64} << 20;
constexpr size_t kHugeCacheBytes = size_t{128} << 20;
constexpr size_t kHugeCacheMinBytes = size_t{32} << 20;
constexpr size_t kHugeCacheHeapShare = 4;

// The smallest cached segment of shard's node that can hold obj_bytes (a page
// multiple; the object at the default offset, so alignment up to a page), its span
// set up for obj_bytes; nullptr when none fits. Its pages are not zero, and stay
// resident past the object (as glibc's heap top does) until the segment is unmapped.
Segment* huge_cache_take(size_t obj_bytes, unsigned shard);
// On a miss: the largest cached segment of shard's node, its span set up for an
// object filling it, to be grown with segment_resize_huge (its pages are reused, not
// faulted in again, and it no longer adds to the peak beside the new block); nullptr
// when none is kept.
Segment* huge_cache_take_largest(unsigned shard);
// Keeps seg, whose object was freed, or unmaps it (too big, unusual alignment).
void huge_cache_put(Segment* seg);
// Unmaps the segments cached longer than decay_ms (all of them with `all`).
size_t huge_cache_purge(bool all);
size_t huge_cache_bytes();

// Unmaps a huge segment and recycles its span descriptor.
void huge_segment_destroy(Segment* seg);

}  // namespace uslab
