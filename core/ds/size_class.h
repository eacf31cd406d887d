// core/ds/size_class.h — the geometry of the heap: page and segment sizes, and the
// small-object size classes.
//
// Owns: the compile-time class table (object size, slab length, objects per slab,
// exact-division constants, per-thread cache capacity) and the O(1) size → class
// lookup (one byte table, no loop). Everything here is constexpr and immutable: no locking.
//
// Classes: 8, then 16-byte steps to 128, four classes per power of two up to 1 KiB,
// eight from 1 to 16 KiB, and four, all page multiples, up to 32 KiB (one-object
// slabs of other sizes there waste their tail). The rounding waste stays under 25%
// above 128 bytes (129 → 160 wastes 24%) and under 12.5% from 1 to 16 KiB, where real
// programs ask for a power of two plus a header: SQLite's page cache entries are
// 4096 + 272 bytes, its other buffers 1024 + 8 and 4096 + 8; with four steps per
// power of two there they rounded up to 5120 and 1280 bytes, and an in-memory
// database peaked above tcmalloc and jemalloc.
// It costs 16 object-cache classes. Every class from 16 up is a multiple of 16, so
// results are 16-byte aligned.
// Class 0 means "not a small class" (large allocations, free spans).
//
// Classes kFirstCacheClass … kMaxClasses-1 belong to object caches
// (uslab_cache_create): their geometry is filled in at run time, in g_class_info,
// before any of their objects exists, and is read-only while the cache lives.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "core/platform/os.h"

namespace uslab {

constexpr size_t kPageShift = 13;  // 8 KiB pages: the unit of slabs and spans
constexpr size_t kPageSize = size_t{1} << kPageShift;
constexpr size_t kSegmentShift = 22;  // 4 MiB segments, aligned to their size
constexpr size_t kSegmentSize = size_t{1} << kSegmentShift;
constexpr size_t kPagesPerSegment = kSegmentSize / kPageSize;  // 512; page 0 is the header
constexpr size_t kMaxSmall = 32768;
constexpr size_t kMaxSlabObjects = 1024;  // bounds the per-slab free bitmap
constexpr size_t kMaxSlabPages = 32;
// Object starts by exact division (Granlund–Montgomery): size = odd << tz, and
// q = offset * inverse(odd) mod 2^64. When size divides offset, q = (offset / size)
// << tz; otherwise q has one of its low tz bits set (offset not a multiple of 2^tz)
// or is at least 2^64 / odd, far above any slab. So offset is the start of object
// i < count exactly when q < count << tz and q & (2^tz - 1) == 0, and i = q >> tz:
// one multiply, two compares, no division and no variable shift on the fast path.
struct SizeClassInfo {
  uint32_t size;
  uint16_t slab_pages;
  uint16_t objects;  // per slab
  uint16_t tcache_cap;
  uint8_t tz;          // trailing zero bits of size
  uint16_t batch;      // objects moved per refill/drain of a CPU sheaf
  uint16_t sheaf_cap;  // most objects one CPU may cache
  uint64_t inv;        // inverse of size >> tz modulo 2^64
};

namespace detail {

constexpr uint32_t kFineFrom = 1024, kFineTo = 16384;  // eight classes per power of two
constexpr size_t kNumClassesWithZero =  // 0, 8..128, 160..1024, 1152..16384, 20480..32768
    1 + 9 + 4 * (std::countr_zero(kFineFrom) - 7) +
    8 * (std::countr_zero(kFineTo) - std::countr_zero(kFineFrom)) +
    4 * (std::countr_zero(uint32_t{kMaxSmall}) - std::countr_zero(kFineTo));

constexpr std::array<uint32_t, kNumClassesWithZero> make_sizes() {
  std::array<uint32_t, kNumClassesWithZero> s{};
  size_t i = 1;
  s[i++] = 8;
  for (uint32_t v = 16; v <= 128; v += 16) s[i++] = v;
  for (uint32_t base = 128; base < kMaxSmall; base *= 2) {
    uint32_t steps = base >= kFineFrom && base < kFineTo ? 8 : 4;
    for (uint32_t q = 1; q <= steps; q++) s[i++] = base + q * (base / steps);
  }
  return s;
}

// Inverse of an odd number modulo 2^64 (Newton's iteration doubles the good bits).
constexpr uint64_t inverse_odd(uint64_t d) {
  uint64_t x = d;  // correct to 3 bits
  for (int i = 0; i < 5; i++) x *= 2 - d * x;
  return x;
}

constexpr size_t kMaxBatch = 64;        // objects moved per refill/drain, at most
constexpr size_t kMaxSheafCap = 1024;   // reserved sheaf slots of a size class
constexpr size_t kCacheSheafCap = 128;  // reserved sheaf slots of a cache class

constexpr uint16_t clamp16(size_t v, size_t lo, size_t hi) {
  return static_cast<uint16_t>(v < lo ? lo : v > hi ? hi : v);
}

// Fills everything but the size from it (also used for object caches at run time).
constexpr SizeClassInfo make_info(uint32_t size, size_t max_sheaf = kMaxSheafCap) {
  SizeClassInfo c{size, 0, 0, 0, 0, 0, 0, 0};
  if (size == 0) return c;
  // Shortest slab with at least 8 objects (fewer above 4 KiB: 16 KiB's worth, down to
  // 1: a slab of big objects stays pinned by any one survivor, so they get small
  // slabs, as jemalloc serves them from page runs) and at most 1/16 of it wasted. The
  // fragmentation workload's peak fell the smaller the slabs of big objects, to near
  // jemalloc's with 16 KiB's worth (N x alloc of 16-32 KiB slower, still faster than
  // jemalloc); 4 objects from 2 KiB up cost more time than it saved, and was not taken.
  size_t min_objs =
      size > 4096 ? (16384 / size > 1 ? 16384 / size : 1) : (32768 / size > 8 ? 8 : 32768 / size);
  uint16_t best_pages = 0;
  for (uint16_t np = 1; np <= kMaxSlabPages; np++) {
    size_t bytes = np * kPageSize;
    size_t objs = bytes / size;
    if (objs > kMaxSlabObjects) objs = kMaxSlabObjects;
    size_t waste = bytes - objs * size;
    if (objs >= min_objs && waste * 16 <= bytes) {
      best_pages = np;
      break;
    }
  }
  if (best_pages == 0) best_pages = kMaxSlabPages;
  size_t objs = best_pages * kPageSize / size;
  if (objs > kMaxSlabObjects) objs = kMaxSlabObjects;
  c.slab_pages = best_pages;
  c.objects = static_cast<uint16_t>(objs);
  c.tz = static_cast<uint8_t>(__builtin_ctz(size));
  c.inv = inverse_odd(size >> c.tz);
  c.tcache_cap = clamp16(32768 / size, 4, 256);
  // About 16 KiB per batch, at least 8 objects up to 64 KiB (a refill or drain of
  // 4 KiB objects every 4 made N x free much slower than every 8); a CPU may cache up
  // to 256 KiB of one class.
  size_t few = 65536 / size < 8 ? 65536 / size : 8;
  c.batch = clamp16(16384 / size > few ? 16384 / size : few, 2, kMaxBatch);
  c.sheaf_cap = clamp16(262144 / size, 16, max_sheaf);
  return c;
}

constexpr std::array<SizeClassInfo, kNumClassesWithZero> make_table() {
  auto sizes = make_sizes();
  std::array<SizeClassInfo, kNumClassesWithZero> t{};
  for (size_t i = 0; i < sizes.size(); i++) t[i] = make_info(sizes[i]);
  return t;
}

// The lookup table: every size up to 32 KiB in 8-byte steps (4 KiB, one load).
constexpr size_t kStepShift = 3;

template <size_t N, size_t Shift>
constexpr std::array<uint8_t, N> make_lookup() {
  auto sizes = make_sizes();
  std::array<uint8_t, N> t{};
  size_t c = 1;  // classes grow with the size: one pass (clang bounds constexpr steps)
  for (size_t i = 0; i < N; i++) {
    while (sizes[c] < (i << Shift)) c++;
    t[i] = static_cast<uint8_t>(c);
  }
  return t;
}

}  // namespace detail

constexpr size_t kNumClasses = detail::kNumClassesWithZero;  // size classes are 1..kNumClasses-1
constexpr size_t kFirstCacheClass = kNumClasses;             // object-cache classes follow
constexpr size_t kMaxClasses = 128;                          // fits the page map's 7 class bits
using detail::kCacheSheafCap;
using detail::kMaxBatch;
inline constexpr auto kClassInfo = detail::make_table();
inline constexpr auto kClassLookup =
    detail::make_lookup<(kMaxSmall >> detail::kStepShift) + 1, detail::kStepShift>();

// Class for `size` (size ≤ kMaxSmall; size 0 maps to the smallest class).
inline unsigned size_to_class(size_t size) {
  return kClassLookup[(size + 7) >> detail::kStepShift];
}

// Geometry of every class, size classes and cache classes alike (see above).
extern std::array<SizeClassInfo, kMaxClasses> g_class_info USLAB_HIDDEN;
inline const SizeClassInfo& class_info(unsigned cls) { return g_class_info[cls]; }
inline size_t class_size(unsigned cls) { return g_class_info[cls].size; }

// Whether off is the start of one of the first count objects of class cls, and its
// index in *index (see above).
inline bool exact_start(uint64_t off, uint64_t inv, uint64_t limit, uint64_t mask) {
  uint64_t q = off * inv;
  return q < limit && (q & mask) == 0;
}

inline bool class_index(unsigned cls, uint64_t off, uint64_t count, uint64_t* index) {
  const SizeClassInfo& c = g_class_info[cls];
  if (!exact_start(off, c.inv, count << c.tz, (uint64_t{1} << c.tz) - 1)) return false;
  *index = off * c.inv >> c.tz;
  return true;
}

// What a small allocation asked for, which the front ends' slow paths pass on to the
// sampling hooks (a guarded object is sized by it; the fast paths keep it in a
// register they leave alone): the size in the low 56 bits and, above them, log2 of
// the alignment when the call asked for more than malloc's 16 bytes (0: malloc's).
// kWholeClass: an object of the class as it is (an object cache's, the profiler's).
using Request = uint64_t;
constexpr Request kWholeClass = ~Request{0};
constexpr unsigned kRequestAlignShift = 56;
inline Request aligned_request(size_t size, size_t align) {
  return size | (Request(__builtin_ctzll(align)) << kRequestAlignShift);
}
inline size_t request_size(Request r) { return r & ((Request{1} << kRequestAlignShift) - 1); }
inline size_t request_align(Request r) {
  const unsigned shift = static_cast<unsigned>(r >> kRequestAlignShift);
  return shift ? size_t{1} << shift : 16;
}

static_assert(kClassInfo[kNumClasses - 1].size == kMaxSmall);
static_assert(kClassInfo[1].size == 8);

}  // namespace uslab
