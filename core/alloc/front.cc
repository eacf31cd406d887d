// core/alloc/front.cc — what passes between the two front ends (front.h): the
// process's choice of one, the per-CPU slow paths' fallback to the thread cache, the
// calling thread's shard, and sampling armed in both.
// Locking: none of its own; percpu_decide takes kPercpuInit once.
#include "core/alloc/front.h"

namespace uslab {

void* thread_cache_alloc_slow(unsigned cls, Request r) {
  // The process's first allocation decides between per-CPU sheaves and these caches.
  if (t_cache == &g_empty_cache && !percpu_decided() && percpu_decide())
    return percpu_alloc(cls, r);
  return thread_cache_refill(cls, r);
}

void* percpu_alloc_slow(unsigned cls, Request r) {
  uint32_t c = percpu_usable_cpu();
  if (c == kNoCpu) return thread_cache_alloc(cls, r);
  return percpu_refill(c, cls, r);
}

void percpu_free_slow(void* p, unsigned cls) {
  for (;;) {
    uint32_t c = percpu_usable_cpu();
    if (c == kNoCpu) return thread_cache_free(p, cls);
    if (percpu_drain(c, p, cls)) return;
  }
}

unsigned current_shard() {
  uint32_t c = g_percpu ? rseq_cpu_id() : kNoCpu;
  return c < g_cpu_count ? shard_of_cpu(c) : t_cache->shard;
}

USLAB_STARTUP_TEXT void set_sample_client(SampleClient which, const SampleHooks* hooks,
                                          uint64_t mean_bytes) {
  if (!sample_set_client(which, hooks, mean_bytes)) return;
  percpu_sample_arm();
  thread_cache_sample_arm_mine();
}

}  // namespace uslab
