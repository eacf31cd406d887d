// core/ds/size_class.cc — the run-time class table: the size classes copied from the
// compile-time table; the object-cache classes are filled in by the cache layer.
// Locking: see size_class.h (a cache class is written before its objects exist).
#include "core/ds/size_class.h"

namespace uslab {

namespace {
constexpr std::array<SizeClassInfo, kMaxClasses> initial_table() {
  std::array<SizeClassInfo, kMaxClasses> t{};
  for (size_t c = 0; c < kNumClasses; c++) t[c] = kClassInfo[c];
  return t;
}
}  // namespace

constinit std::array<SizeClassInfo, kMaxClasses> g_class_info = initial_table();

}  // namespace uslab
