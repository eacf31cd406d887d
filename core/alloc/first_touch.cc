// core/alloc/first_touch.cc — preparing a shard's metadata; see first_touch.h.
// Locking: none (idempotent).
#include "core/alloc/first_touch.h"

#include "core/alloc/central.h"

namespace uslab {

constinit uint8_t g_shard_prepared[kMaxShards] = {};

void prepare_shard_slow(unsigned sh) {
  os::populate(&g_page_heap[sh], sizeof g_page_heap[sh]);
  os::populate(g_central[sh], sizeof g_central[sh]);
  __atomic_store_n(&g_shard_prepared[sh], 1, __ATOMIC_RELEASE);
}

size_t prepared_shard_bytes() {
  size_t one = os::page_up(sizeof g_page_heap[0]) + os::page_up(sizeof g_central[0]), n = 0;
  for (unsigned sh = 0; sh < kMaxShards; sh++) n += shard_prepared(sh);
  return n * one;
}

}  // namespace uslab
