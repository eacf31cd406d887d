// core/prof/prof.cc — the heap profiler's records and triggers (prof.h).
// Locking: g_lock guards the tables and totals (a leaf lock; see prof.h).
#include "core/prof/prof.h"

#include <sys/syscall.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "core/alloc/alloc.h"
#include "core/prof/stack.h"
#include "core/prof/write.h"

namespace uslab::prof {

size_t g_cache_samples = 0;

namespace {

// A distinct stack (with its class) and its estimates.
struct StackRec {
  uint64_t hash;
  const uintptr_t* frames;  // in the frame arena (never freed: dumps read it unlocked)
  uint32_t depth;
  uint32_t cls;
  char cache[32];  // the object cache's name, for cache classes
  double alloc_objects, alloc_bytes, live_objects, live_bytes, peak_objects, peak_bytes;
};

// A sampled object still allocated.
struct LiveRec {
  uintptr_t p;  // 0: empty slot
  uint32_t stack;
  uint32_t size;   // the object's (usable) bytes; large ones beyond 4 GiB: saturated
  double objects;  // 1 / p(sampled)
  double bytes;    // size / p(sampled)
};

constinit Mutex g_lock;
USLAB_LOCK_ONE(kProfiler, g_lock);
bool g_enabled = false;
bool g_active = false;               // sampling (prof.active)
uint64_t g_mean = 512 << 10;         // mean bytes between samples (prof_sample)
__thread bool t_in_prof __attribute__((tls_model("initial-exec")));
// Sampled objects freed by a thread while it was inside the profiler (a signal
// handler's free while the thread held g_lock): forgotten when it leaves.
constexpr unsigned kPendingFrees = 4;
__thread uintptr_t t_pending[kPendingFrees] __attribute__((tls_model("initial-exec")));
__thread unsigned t_npending __attribute__((tls_model("initial-exec")));

// The tables, each a mapping of its own, grown by doubling.
StackRec* g_stacks = nullptr;
size_t g_stack_count = 0, g_stack_cap = 0;
uint32_t* g_stack_index = nullptr;  // open addressing: stack number + 1, 0 empty
size_t g_index_cap = 0;
LiveRec* g_live = nullptr;
size_t g_live_count = 0, g_live_cap = 0;
// The frame arena: chunks mapped as needed.
uintptr_t* g_arena = nullptr;
size_t g_arena_left = 0;
size_t g_mapped = 0;

double g_live_bytes = 0, g_live_objects = 0;
double g_peak_bytes = 0;      // the highest live estimate
double g_snapshot_bytes = 0;  // live estimate when the peak columns were copied
uint64_t g_samples = 0, g_dumps = 0;
uint64_t g_start_ns = 0;

// Triggers.
volatile sig_atomic_t g_signal_pending = 0;
double g_next_interval = 0;  // live estimate that sets off the next interval dump
bool g_interval_pending = false;
unsigned g_seq = 0;

void* map_counted(size_t bytes) {
  void* p = os::map(bytes);
  if (p) g_mapped += bytes;
  return p;
}
void unmap_counted(void* p, size_t bytes) {
  os::unmap(p, bytes);
  g_mapped -= bytes;
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}
uint64_t hash_stack(const Stack& st, unsigned cls) {
  uint64_t h = mix(0, cls);
  for (unsigned i = 0; i < st.depth; i++) h = mix(h, st.frames[i]);
  return h | 1;
}
size_t slot_of(uint64_t key, size_t cap) { return (key * 0x9e3779b97f4a7c15ULL) >> 20 & (cap - 1); }

bool grow_index() {
  size_t cap = g_index_cap ? 2 * g_index_cap : 4096;
  auto* idx = static_cast<uint32_t*>(map_counted(cap * sizeof(uint32_t)));
  if (!idx) return false;
  for (size_t i = 0; i < g_stack_count; i++) {
    size_t s = slot_of(g_stacks[i].hash, cap);
    while (idx[s]) s = (s + 1) & (cap - 1);
    idx[s] = static_cast<uint32_t>(i + 1);
  }
  if (g_stack_index) unmap_counted(g_stack_index, g_index_cap * sizeof(uint32_t));
  g_stack_index = idx;
  g_index_cap = cap;
  return true;
}

// The number of the stack (found or added), or -1 without memory. Lock held.
long intern(const Stack& st, unsigned cls) {
  uint64_t h = hash_stack(st, cls);
  if (g_stack_count * 2 >= g_index_cap && !grow_index()) return -1;
  size_t s = slot_of(h, g_index_cap);
  for (; g_stack_index[s]; s = (s + 1) & (g_index_cap - 1)) {
    StackRec& r = g_stacks[g_stack_index[s] - 1];
    if (r.hash == h && r.cls == cls && r.depth == st.depth &&
        memcmp(r.frames, st.frames, st.depth * sizeof(uintptr_t)) == 0)
      return g_stack_index[s] - 1;
  }
  if (g_stack_count == g_stack_cap) {
    size_t cap = g_stack_cap ? 2 * g_stack_cap : 1024;
    auto* a = static_cast<StackRec*>(map_counted(cap * sizeof(StackRec)));
    if (!a) return -1;
    if (g_stacks) {
      memcpy(a, g_stacks, g_stack_count * sizeof(StackRec));
      unmap_counted(g_stacks, g_stack_cap * sizeof(StackRec));
    }
    g_stacks = a;
    g_stack_cap = cap;
  }
  if (g_arena_left < st.depth) {
    constexpr size_t kChunk = 1 << 20;
    g_arena = static_cast<uintptr_t*>(map_counted(kChunk));
    if (!g_arena) {
      g_arena_left = 0;
      return -1;
    }
    g_arena_left = kChunk / sizeof(uintptr_t);
  }
  uintptr_t* frames = g_arena;
  memcpy(frames, st.frames, st.depth * sizeof(uintptr_t));
  g_arena += st.depth;
  g_arena_left -= st.depth;
  StackRec& r = g_stacks[g_stack_count];
  memset(&r, 0, sizeof r);
  r.hash = h;
  r.frames = frames;
  r.depth = st.depth;
  r.cls = cls;
  if (cls >= kFirstCacheClass)
    if (const ObjCache* c = obj_cache_of(cls)) {
      size_t n = strnlen(c->name, sizeof r.cache - 1);
      memcpy(r.cache, c->name, n);
    }
  g_stack_index[s] = static_cast<uint32_t>(g_stack_count + 1);
  return static_cast<long>(g_stack_count++);
}

bool grow_live() {
  size_t cap = g_live_cap ? 2 * g_live_cap : 4096;
  auto* t = static_cast<LiveRec*>(map_counted(cap * sizeof(LiveRec)));
  if (!t) return false;
  for (size_t i = 0; i < g_live_cap; i++) {
    if (!g_live[i].p) continue;
    size_t s = slot_of(g_live[i].p, cap);
    while (t[s].p) s = (s + 1) & (cap - 1);
    t[s] = g_live[i];
  }
  if (g_live) unmap_counted(g_live, g_live_cap * sizeof(LiveRec));
  g_live = t;
  g_live_cap = cap;
  return true;
}

// The peak columns follow the live ones while the live estimate sets new highs, in
// steps of 1/64 (a copy of every stack on every sample of a growing heap would be
// quadratic): the peak profile is the live heap at a moment within 1.6% of the
// highest estimate.
void note_peak() {
  if (g_live_bytes <= g_peak_bytes) return;
  g_peak_bytes = g_live_bytes;
  if (g_live_bytes < g_snapshot_bytes * (1 + 1.0 / 64)) return;
  g_snapshot_bytes = g_live_bytes;
  for (size_t i = 0; i < g_stack_count; i++) {
    g_stacks[i].peak_objects = g_stacks[i].live_objects;
    g_stacks[i].peak_bytes = g_stacks[i].live_bytes;
  }
}

// 1 / p(sampled) for an object of `size` bytes: its weight. Sizes repeat (classes,
// spans of whole pages), so the last few are kept, with the mean they were for
// (computing it was a tenth of a sample's cost). Lock held.
double inverse_probability(size_t size) {
  struct Entry {
    size_t size;
    uint64_t mean, mine;
    double inverse;
  };
  USLAB_LARGE_ZERO static Entry cache[64];
  Entry& e = cache[(size >> 3) % 64];
  // An object is sampled when the schedule's points fall in it, and is the
  // profiler's with its share of the rate (sampler.h).
  const uint64_t mean = g_sample_bytes, mine = sample_client_bytes(SampleClient::kProfiler);
  if (e.size != size || e.mean != mean || e.mine != mine)
    e = Entry{size, mean, mine,
              1 / (sample_share(SampleClient::kProfiler) * sample_probability(size))};
  return e.inverse;
}

// Records sampled object p of `size` bytes, class cls (0: large), allocated with the
// calling thread's stack. Inline in its two callers, so that the unwinder has one
// frame fewer to step through (stack.h).
[[gnu::always_inline]] inline void record(const void* p, size_t size, unsigned cls) {
  Stack st;
  stack_capture(&st);
  double bytes;
  {
    LockGuard g(g_lock);
    double objects = inverse_probability(size);
    bytes = static_cast<double>(size) * objects;
    long k = intern(st, cls);
    if (k < 0 || (g_live_count * 2 >= g_live_cap && !grow_live())) return;
    size_t s = slot_of(reinterpret_cast<uintptr_t>(p), g_live_cap);
    while (g_live[s].p) s = (s + 1) & (g_live_cap - 1);
    g_live[s] =
        LiveRec{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(k),
                static_cast<uint32_t>(size < UINT32_MAX ? size : UINT32_MAX), objects, bytes};
    g_live_count++;
    StackRec& r = g_stacks[k];
    r.alloc_objects += objects;
    r.alloc_bytes += bytes;
    r.live_objects += objects;
    r.live_bytes += bytes;
    g_live_objects += objects;
    g_live_bytes += bytes;
    g_samples++;
    if (cls >= kFirstCacheClass) g_cache_samples++;
    note_peak();
    if (g_config.prof_interval && g_live_bytes >= g_next_interval) {
      g_next_interval = g_live_bytes + static_cast<double>(g_config.prof_interval);
      g_interval_pending = true;  // written by poll(), outside the allocator's locks
    }
  }
  USLAB_PROBE4(prof_sample, p, size, static_cast<uint64_t>(bytes), cls);
  USLAB_OTEL_ALLOC(p, size, static_cast<uint64_t>(bytes));
}

// Forgets p's record, if any (backward-shift deletion keeps the probe runs whole).
// Lock held.
void forget_locked(uintptr_t p) {
  USLAB_DCHECK(g_lock.held());
  if (!g_live_cap) return;
  size_t s = slot_of(p, g_live_cap);
  while (g_live[s].p != p) {
    if (!g_live[s].p) return;
    s = (s + 1) & (g_live_cap - 1);
  }
  const LiveRec& r = g_live[s];
  StackRec& st = g_stacks[r.stack];
  st.live_objects -= r.objects;
  st.live_bytes -= r.bytes;
  g_live_objects -= r.objects;
  g_live_bytes -= r.bytes;
  if (st.cls >= kFirstCacheClass) g_cache_samples--;
  g_live_count--;
  USLAB_PROBE4(prof_free, p, r.size, static_cast<uint64_t>(r.bytes), st.cls);
  USLAB_OTEL_FREE(p);
  for (size_t hole = s, j = (s + 1) & (g_live_cap - 1);; j = (j + 1) & (g_live_cap - 1)) {
    if (!g_live[j].p) {
      g_live[hole].p = 0;
      return;
    }
    size_t home = slot_of(g_live[j].p, g_live_cap);
    // Move j into the hole unless its home lies cyclically in (hole, j].
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      g_live[hole] = g_live[j];
      hole = j;
    }
  }
}

void forget(uintptr_t p) {
  if (t_in_prof) {  // g_lock may be this thread's: later (a record left over if full)
    if (t_npending < kPendingFrees) t_pending[t_npending++] = p;
    return;
  }
  LockGuard g(g_lock);
  forget_locked(p);
}

// The thread leaves the profiler: frees that came meanwhile are forgotten now.
void leave() {
  t_in_prof = false;
  while (t_npending) {
    uintptr_t p = t_pending[--t_npending];
    LockGuard g(g_lock);
    forget_locked(p);
  }
}

}  // namespace
void poll();
namespace {

// The sampled object of class cls (sampler.h's hook): a large span of its own for a
// size class, so that its free finds the mark; in its slab for a cache.
void* sample_small(unsigned cls, Request) {
  if (t_in_prof) return nullptr;
  t_in_prof = true;
  void* p;
  size_t size = class_size(cls);
  if (cls >= kFirstCacheClass) {
    p = take_object(cls);  // a cache object stays in its slab (handed out by the caller)
  } else {
    // A large span straight from the page heap (a small object's pages never need
    // alloc_large's huge, guard or memory-limit handling; its decay notice comes
    // from the allocation that sampled it).
    bool zeroed;
    Span* s = g_page_heap[current_shard()].alloc((size + kPageSize - 1) >> kPageShift, 1,
                                                 SpanKind::kLarge, &zeroed);
    p = s ? s->start : nullptr;
    if (s) {
      s->sampled = Span::kSampledSmall;
      s->obj_size = static_cast<uint32_t>(size);
    }
  }
  if (p) record(p, size, cls);
  leave();
  poll();  // a dump prof_interval or prof_signal asked for
  return p;
}

const SampleHooks g_hooks = {sample_small};

// Where a dump goes: PREFIX.PID.SEQ.KIND.pb
void dump_path(char* out, size_t cap, const char* kind) {
  os::format(out, cap, "%s.%d.%u.%s.pb", g_config.prof_prefix,
             static_cast<int>(os::syscall6(SYS_getpid)),
             __atomic_fetch_add(&g_seq, 1, __ATOMIC_RELAXED), kind);
}

// Copies the stacks under the lock, then writes them unlocked. which: 0 the live
// columns as in use, 1 the peak's.
int write_now(const char* path, int which) {
  if (t_in_prof) return EAGAIN;
  t_in_prof = true;
  size_t n, bytes;
  StackView* views;
  {
    LockGuard g(g_lock);
    n = g_stack_count;
    bytes = (n ? n : 1) * sizeof(StackView);
    views = static_cast<StackView*>(os::map(bytes));
    if (views)
      for (size_t i = 0; i < n; i++) {
        const StackRec& r = g_stacks[i];
        StackView& v = views[i];
        v.frames = r.frames;
        v.depth = r.depth;
        v.cls = r.cls;
        v.class_bytes = r.cls ? static_cast<unsigned>(class_size(r.cls)) : 0;
        memcpy(v.cache, r.cache, sizeof v.cache);
        v.alloc_objects = r.alloc_objects;
        v.alloc_bytes = r.alloc_bytes;
        v.inuse_objects = which ? r.peak_objects : r.live_objects;
        v.inuse_bytes = which ? r.peak_bytes : r.live_bytes;
      }
  }
  int err = ENOMEM;
  if (views) {
    ProfileInfo info{g_config.prof_sample, g_start_ns, os::now_ns()};
    err = write_profile(path, views, n, info);
    os::unmap(views, bytes);
    if (!err) __atomic_fetch_add(&g_dumps, 1, __ATOMIC_RELAXED);
  }
  leave();
  return err;
}

void dump_kind(const char* kind, int which) {
  char path[512];
  dump_path(path, sizeof path, kind);
  if (int err = write_now(path, which))
    os::print_stderr("uslab: prof: cannot write %s (errno %d)\n", path, err);
}

void on_signal(int) { g_signal_pending = 1; }

}  // namespace

USLAB_STARTUP_TEXT void init() {
  config_init();
  if (!g_config.prof || g_enabled) return;
  stack_init();
  g_start_ns = os::now_ns();
  g_mean = g_config.prof_sample;
  g_next_interval = static_cast<double>(g_config.prof_interval);
  g_enabled = true;
  if (g_config.prof_active) set_active(true);
  if (g_config.prof_signal) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(static_cast<int>(g_config.prof_signal), &sa, nullptr);
  }
}

bool enabled() { return g_enabled; }

bool set_active(bool on) {
  if (!g_enabled) return false;
  __atomic_store_n(&g_active, on, __ATOMIC_RELAXED);
  set_sample_client(SampleClient::kProfiler, &g_hooks, on ? g_mean : 0);
  return true;
}

bool active() { return __atomic_load_n(&g_active, __ATOMIC_RELAXED); }

uint64_t sample_bytes() { return g_mean; }

void reset(uint64_t sample_bytes) {
  if (sample_bytes) {
    g_mean = sample_bytes;
    if (active()) set_sample_client(SampleClient::kProfiler, &g_hooks, sample_bytes);
  }
  LockGuard g(g_lock);
  for (size_t i = 0; i < g_stack_count; i++) {
    StackRec& r = g_stacks[i];
    r.alloc_objects = r.alloc_bytes = 0;
    r.peak_objects = r.live_objects;
    r.peak_bytes = r.live_bytes;
  }
  g_peak_bytes = g_snapshot_bytes = g_live_bytes;
}

void on_large_sampled(Span* s) {
  if (t_in_prof || !active()) return;
  t_in_prof = true;
  s->sampled = Span::kSampledLarge;
  record(s->start, s->bytes(), 0);
  leave();
  poll();
}

void on_sampled_free(Span* s, const void* start) {
  s->sampled = 0;
  forget(reinterpret_cast<uintptr_t>(start ? start : s->start));
}

void on_cache_free(const void* p) { forget(reinterpret_cast<uintptr_t>(p)); }

int dump(const char* path) {
  if (!g_enabled) return EINVAL;
  if (path) return write_now(path, 0);
  char buf[512];
  dump_path(buf, sizeof buf, "dump");
  return write_now(buf, 0);
}

int dump_named(const char* kind, char* path, size_t cap) {
  if (!g_enabled) return EINVAL;
  dump_path(path, cap, kind);
  return write_now(path, 0);
}

USLAB_STARTUP_TEXT void at_exit() {
  if (!g_enabled || !g_config.prof_final) return;
  dump_kind("final", 0);
  dump_kind("peak", 1);
}

void poll() {
  if (!g_enabled || t_in_prof) return;
  if (g_signal_pending) {
    g_signal_pending = 0;
    dump_kind("signal", 0);
  }
  if (__atomic_exchange_n(&g_interval_pending, false, __ATOMIC_RELAXED)) dump_kind("interval", 0);
}

Stats stats() {
  LockGuard g(g_lock);
  return Stats{g_mapped, g_live_count, g_stack_count, g_samples,
               g_dumps,  g_live_bytes, g_peak_bytes};
}

}  // namespace uslab::prof
