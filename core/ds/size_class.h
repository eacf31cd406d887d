// core/ds/size_class.h — the geometry of the heap: page and segment sizes, and the
// small-object size classes.
//
// Owns: the compile-time class table (object size, slab length, objects per slab,
// division magic, per-thread cache capacity) and the O(1) size → class lookup (two
// byte tables, no loop). Everything here is constexpr and immutable: no locking.
//
// Classes: 8, then 16-byte steps to 128, then four classes per power of two up to
// 32 KiB, so the rounding waste above 128 bytes stays under 25% (129 → 160 wastes
// 24%). Every class from 16 up is a multiple of 16, so results are 16-byte aligned.
// Class 0 means "not a small class" (large allocations, free spans).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace uslab {

constexpr size_t kPageShift = 13;  // 8 KiB pages: the unit of slabs and spans
constexpr size_t kPageSize = size_t{1} << kPageShift;
constexpr size_t kSegmentShift = 22;  // 4 MiB segments, aligned to their size
constexpr size_t kSegmentSize = size_t{1} << kSegmentShift;
constexpr size_t kPagesPerSegment = kSegmentSize / kPageSize;  // 512; page 0 is the header
constexpr size_t kMaxSmall = 32768;
constexpr size_t kMaxSlabObjects = 1024;  // bounds the per-slab free bitmap
constexpr size_t kMaxSlabPages = 32;
constexpr unsigned kDivShift = 40;  // offset * magic >> 40 == offset / size, exactly

struct SizeClassInfo {
  uint32_t size;
  uint16_t slab_pages;
  uint16_t objects;   // per slab
  uint16_t tcache_cap;
  uint64_t div_magic;
};

namespace detail {

constexpr size_t kNumClassesWithZero = 1 + 9 + 4 * 8;  // 0, 8..128, 160..32768

constexpr std::array<uint32_t, kNumClassesWithZero> make_sizes() {
  std::array<uint32_t, kNumClassesWithZero> s{};
  size_t i = 1;
  s[i++] = 8;
  for (uint32_t v = 16; v <= 128; v += 16) s[i++] = v;
  for (uint32_t base = 128; base < kMaxSmall; base *= 2)
    for (uint32_t q = 1; q <= 4; q++) s[i++] = base + q * (base / 4);
  return s;
}

constexpr SizeClassInfo make_info(uint32_t size) {
  SizeClassInfo c{size, 0, 0, 0, 0};
  if (size == 0) return c;
  // Shortest slab with at least 8 objects and at most 1/16 of it wasted.
  uint16_t best_pages = 0;
  for (uint16_t np = 1; np <= kMaxSlabPages; np++) {
    size_t bytes = np * kPageSize;
    size_t objs = bytes / size;
    if (objs > kMaxSlabObjects) objs = kMaxSlabObjects;
    size_t waste = bytes - objs * size;
    if (objs >= 8 && waste * 16 <= bytes) {
      best_pages = np;
      break;
    }
  }
  if (best_pages == 0) best_pages = kMaxSlabPages;
  size_t objs = best_pages * kPageSize / size;
  if (objs > kMaxSlabObjects) objs = kMaxSlabObjects;
  c.slab_pages = best_pages;
  c.objects = static_cast<uint16_t>(objs);
  c.div_magic = ((uint64_t{1} << kDivShift) + size - 1) / size;
  size_t cap = 32768 / size;
  c.tcache_cap = static_cast<uint16_t>(cap < 4 ? 4 : cap > 256 ? 256 : cap);
  return c;
}

constexpr std::array<SizeClassInfo, kNumClassesWithZero> make_table() {
  auto sizes = make_sizes();
  std::array<SizeClassInfo, kNumClassesWithZero> t{};
  for (size_t i = 0; i < sizes.size(); i++) t[i] = make_info(sizes[i]);
  return t;
}

// Lookup tables: sizes ≤ 1024 in 8-byte steps, sizes ≤ 32 KiB in 128-byte steps.
constexpr size_t kSmallStepShift = 3, kSmallLimit = 1024;
constexpr size_t kBigStepShift = 7;

template <size_t N, size_t Shift>
constexpr std::array<uint8_t, N> make_lookup() {
  auto sizes = make_sizes();
  std::array<uint8_t, N> t{};
  for (size_t i = 0; i < N; i++) {
    size_t want = i << Shift;
    size_t c = 1;
    while (sizes[c] < want) c++;
    t[i] = static_cast<uint8_t>(c);
  }
  return t;
}

}  // namespace detail

constexpr size_t kNumClasses = detail::kNumClassesWithZero;  // valid classes are 1..kNumClasses-1
inline constexpr auto kClassInfo = detail::make_table();
inline constexpr auto kClassSmallLookup =
    detail::make_lookup<(detail::kSmallLimit >> detail::kSmallStepShift) + 1,
                        detail::kSmallStepShift>();
inline constexpr auto kClassBigLookup =
    detail::make_lookup<(kMaxSmall >> detail::kBigStepShift) + 1, detail::kBigStepShift>();

// Class for `size` (1 ≤ size ≤ kMaxSmall; size 0 maps to the smallest class).
inline unsigned size_to_class(size_t size) {
  if (size <= detail::kSmallLimit)
    return kClassSmallLookup[(size + 7) >> detail::kSmallStepShift];
  return kClassBigLookup[(size + 127) >> detail::kBigStepShift];
}

inline size_t class_size(unsigned cls) { return kClassInfo[cls].size; }

static_assert(kClassInfo[kNumClasses - 1].size == kMaxSmall);
static_assert(kClassInfo[1].size == 8);

}  // namespace uslab
