// test/unit/every_kind.h — one allocation of every kind (small, large, huge), freed:
// the slow paths and locks each kind reaches, for tests that need them used.
#pragma once

#include <cstddef>

#include "core/core.h"

inline void alloc_and_free_every_kind() {
  void* small = uslab::heap::alloc(100);
  void* large = uslab::heap::alloc(300000);
  void* huge = uslab::heap::alloc(size_t{40} << 20);
  uslab::heap::free(huge);
  uslab::heap::free(large);
  uslab::heap::free(small);
}
