// compat/mallctl.cc — jemalloc's mallctl (also as uslab_mallctl), for the names programs written for jemalloc
// use to read statistics and to ask for memory back (the README lists them).
//
// Programs that run on jemalloc purge explicitly (redis after FLUSHALL reads
// arenas.narenas, then calls arena.<narenas>.purge); under uslab those calls must
// reach the heap. Semantics follow jemalloc's manual: a value of the wrong length is
// EINVAL (the first bytes are copied out), a write to a read-only name EPERM, a name
// that takes no value given one EPERM, an unknown name or arena index ENOENT, a bad
// decay time EFAULT; a read and a write in one call return the old value. uslab has
// one arena (arenas.narenas is 1): arena.0, arena.1 (jemalloc's deprecated "all"
// index, narenas) and arena.4096 (MALLCTL_ARENAS_ALL) all name it.
//
// Locking: g_ctl_lock serialises mallctl calls (the epoch and the statistics
// snapshot); the heap calls take their own locks after it.
#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/core.h"
#include "include/uslab.h"
#include "preload/export.h"

using namespace uslab;

namespace {

constexpr unsigned kArenas = 1;
constexpr unsigned kArenasAll = 4096;  // MALLCTL_ARENAS_ALL

// One mallctl call's buffers.
struct Call {
  void* oldp;
  size_t* oldlenp;
  void* newp;
  size_t newlen;

  bool reads() const { return oldp && oldlenp; }
  bool writes() const { return newp != nullptr || newlen != 0; }

  // Copies value out (EINVAL when the caller's length differs: the first bytes only).
  template <typename T>
  int read(T value) const {
    if (!reads()) return 0;
    if (*oldlenp != sizeof(T)) {
      size_t n = *oldlenp < sizeof(T) ? *oldlenp : sizeof(T);
      memcpy(oldp, &value, n);
      *oldlenp = n;
      return EINVAL;
    }
    memcpy(oldp, &value, sizeof(T));
    return 0;
  }
  // The value written (EINVAL when its length differs).
  template <typename T>
  int written(T* out) const {
    if (!newp || newlen != sizeof(T)) return EINVAL;
    memcpy(out, newp, sizeof(T));
    return 0;
  }
  template <typename T>
  int read_only(T value) const {
    return writes() ? EPERM : read(value);
  }
  int neither() const { return oldp || oldlenp || writes() ? EPERM : 0; }
};

// The epoch and the stats.* values as of its last write.
constinit Mutex g_ctl_lock;
USLAB_LOCK_ONE(kMallctl, g_ctl_lock);
uint64_t g_epoch = 1;
heap::Stats g_snapshot;
bool g_have_snapshot = false;
// The options as the process started (opt.*), before any write here.
uint64_t g_opt_decay_ms = 0;
bool g_opt_background = false;

const heap::Stats& snapshot() {
  if (!g_have_snapshot) {
    g_snapshot = heap::stats();
    g_have_snapshot = true;
  }
  return g_snapshot;
}

ssize_t decay_as_jemalloc(uint64_t ms) {
  return ms >= heap::kDecayNever ? -1 : static_cast<ssize_t>(ms);
}

// Reads, then writes, a decay time in jemalloc's terms (-1: never).
int decay_ctl(const Call& c) {
  ssize_t old = decay_as_jemalloc(heap::decay_ms()), want = 0;
  if (c.writes()) {
    if (int err = c.written(&want)) return err;
    if (want < -1) return EFAULT;
  }
  if (int err = c.read(old)) return err;
  if (c.writes()) heap::set_decay_ms(want == -1 ? heap::kDecayNever : static_cast<uint64_t>(want));
  return 0;
}

// uslab has no muzzy state (free pages go straight back with MADV_DONTNEED): 0, and
// valid writes are accepted and change nothing.
int muzzy_ctl(const Call& c) {
  ssize_t want = 0;
  if (c.writes()) {
    if (int err = c.written(&want)) return err;
    if (want < -1) return EFAULT;
  }
  return c.read(ssize_t{0});
}

// Whether memory comes back with no call (auto or true), as jemalloc reports whether
// background threads are enabled; writing starts (true) or stops (false) the thread.
int background_ctl(const Call& c) {
  bool old = heap::background_configured(), want = false;
  if (c.writes())
    if (int err = c.written(&want)) return err;
  if (int err = c.read(old)) return err;
  if (c.writes()) heap::set_background(want);
  return 0;
}

// uslab's memory limit (core/alloc/memory_limit.h), as tcmalloc's SetMemoryLimit:
// uslab.memory_limit (size_t bytes, 0: none) and uslab.memory_limit_hard (bool). A read
// decides the limit first (the cgroup's, when no option gave one); a write sets it.
int memory_limit_ctl(bool hard_flag, const Call& c) {
  const MemoryLimit l = memory_limit(true);
  size_t bytes = static_cast<size_t>(l.bytes);
  bool hard = l.hard;
  if (c.writes()) {
    int err = hard_flag ? c.written(&hard) : c.written(&bytes);
    if (err) return err;
  }
  if (int err = hard_flag ? c.read(l.hard) : c.read(static_cast<size_t>(l.bytes))) return err;
  if (c.writes()) memory_limit_set(bytes, hard);
  return 0;
}

// "arena.<i>.<rest>" with i naming uslab's arena: rest (nullptr otherwise); *bad_index
// when the name is of that form with an index that names no arena.
const char* arena_name(const char* name, bool* bad_index) {
  *bad_index = false;
  if (strncmp(name, "arena.", 6) != 0) return nullptr;
  const char* p = name + 6;
  if (*p < '0' || *p > '9') return nullptr;
  char* end;
  unsigned long i = strtoul(p, &end, 10);
  if (*end != '.') return nullptr;
  *bad_index = i > kArenas && i != kArenasAll;
  return end + 1;
}

int arena_ctl(const char* rest, const Call& c) {
  if (!strcmp(rest, "purge")) {
    if (int err = c.neither()) return err;
    heap::trim();
    return 0;
  }
  if (!strcmp(rest, "decay")) {
    if (int err = c.neither()) return err;
    heap::decay_now();
    return 0;
  }
  if (!strcmp(rest, "dirty_decay_ms")) return decay_ctl(c);
  if (!strcmp(rest, "muzzy_decay_ms")) return muzzy_ctl(c);
  return ENOENT;
}

int stats_ctl(const char* name, const Call& c) {
  const heap::Stats& st = snapshot();
  size_t value;
  if (!strcmp(name, "stats.allocated"))
    value = st.allocated;
  else if (!strcmp(name, "stats.active"))
    value = st.active;
  else if (!strcmp(name, "stats.metadata"))
    value = st.metadata;
  else if (!strcmp(name, "stats.resident"))
    value = st.resident;
  else if (!strcmp(name, "stats.mapped"))
    value = st.mapped;
  else if (!strcmp(name, "stats.retained"))
    value = 0;  // uslab unmaps what it does not keep
  else if (!strcmp(name, "stats.thp_segments"))
    value = st.huge_segments;
  else if (!strcmp(name, "stats.thp_splits"))
    value = st.thp_splits;
  else if (!strcmp(name, "stats.thp_collapses"))
    value = st.thp_collapses;
  else if (!strcmp(name, "stats.thp_kept"))
    value = st.thp_kept_bytes;
  else if (!strcmp(name, "stats.thp_resident")) {
    // Read now (the kernel walks the mappings), not at the epoch: none where the
    // kernel has no smaps_rollup (before 4.14).
    long b = os::thp_resident_bytes();
    if (b < 0) return ENOENT;
    value = static_cast<size_t>(b);
  } else
    return ENOENT;
  return c.read_only(value);
}

// jemalloc's profiler controls (opt.prof, prof.active, prof.dump, prof.reset,
// prof.lg_sample), served by uslab's (core/prof/prof.h).
size_t lg_of(uint64_t bytes) {
  size_t lg = 0;
  while ((uint64_t{2} << lg) <= bytes) lg++;
  return lg;
}

int prof_ctl(const char* name, const Call& c) {
  auto is = [name](const char* n) { return strcmp(name, n) == 0; };
  if (is("opt.prof")) return c.read_only(prof::enabled());
  if (is("opt.lg_prof_sample") || is("prof.lg_sample"))
    return c.read_only(lg_of(prof::sample_bytes()));
  if (is("opt.prof_prefix")) return c.read_only(static_cast<const char*>(g_config.prof_prefix));
  if (is("opt.prof_final")) return c.read_only(g_config.prof_final);
  if (is("prof.active")) {
    bool old = prof::active();
    if (c.writes()) {
      bool on;
      if (int err = c.written(&on)) return err;
      if (!prof::set_active(on)) return EPERM;  // as jemalloc without opt.prof
    }
    return c.read(old);
  }
  if (is("prof.dump")) {
    if (c.reads()) return EPERM;
    const char* path = nullptr;
    if (c.newp && c.written(&path)) return EINVAL;
    return prof::enabled() ? (prof::dump(path) ? EFAULT : 0) : ENOENT;
  }
  if (is("prof.reset")) {
    if (c.reads()) return EPERM;
    size_t lg = 0;
    if (c.newp && c.written(&lg)) return EINVAL;
    if (lg > 40) return EINVAL;
    if (!prof::enabled()) return ENOENT;
    prof::reset(c.newp ? uint64_t{1} << lg : 0);
    return 0;
  }
  return -1;
}

int ctl(const char* name, const Call& c) {
  auto is = [name](const char* n) { return strcmp(name, n) == 0; };
  if (is("epoch")) {
    uint64_t old = g_epoch;
    if (c.writes()) {
      uint64_t ignored;
      if (int err = c.written(&ignored)) return err;
      g_epoch++;
      g_snapshot = heap::stats();
      g_have_snapshot = true;
    }
    return c.read(c.writes() ? g_epoch : old);
  }
  if (is("version")) return c.read_only(static_cast<const char*>("uslab-" USLAB_VERSION));
  if (strncmp(name, "prof.", 5) == 0 || strncmp(name, "opt.prof", 8) == 0 ||
      is("opt.lg_prof_sample"))
    if (int r = prof_ctl(name, c); r >= 0) return r;
  if (is("thread.tcache.flush")) {
    if (int err = c.neither()) return err;
    heap::flush_thread_cache();
    return 0;
  }
  bool bad_index;
  if (const char* rest = arena_name(name, &bad_index))
    return bad_index ? ENOENT : arena_ctl(rest, c);
  if (is("arenas.narenas") || is("opt.narenas")) return c.read_only(kArenas);
  if (is("arenas.page")) return c.read_only(heap::kPage);
  if (is("arenas.dirty_decay_ms")) return decay_ctl(c);
  if (is("arenas.muzzy_decay_ms")) return muzzy_ctl(c);
  if (is("opt.dirty_decay_ms")) return c.read_only(decay_as_jemalloc(g_opt_decay_ms));
  if (is("opt.muzzy_decay_ms")) return c.read_only(ssize_t{0});
  if (is("background_thread")) return background_ctl(c);
  if (is("uslab.memory_limit")) return memory_limit_ctl(false, c);
  if (is("uslab.memory_limit_hard")) return memory_limit_ctl(true, c);
  if (is("opt.background_thread")) return c.read_only(g_opt_background);
  if (is("max_background_threads")) {
    size_t want = 0;
    if (c.writes()) {
      if (int err = c.written(&want)) return err;
      if (want == 0) return EINVAL;  // uslab runs one; more is accepted, one it stays
    }
    return c.read(size_t{1});
  }
  return stats_ctl(name, c);
}

}  // namespace

extern "C" USLAB_EXPORT int uslab_mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp,
                                          size_t newlen) {
  if (!name) return ENOENT;
  LockGuard g(g_ctl_lock);
  static bool opt_taken = false;
  if (!opt_taken) {
    g_opt_decay_ms = heap::decay_ms();
    g_opt_background = heap::background_configured();
    opt_taken = true;
  }
  return ctl(name, Call{oldp, oldlenp, newp, newlen});
}

#if !USLAB_NO_OVERRIDE
// jemalloc's name, for programs written for jemalloc; a build that leaves the standard
// names to libc (preload/prefixed.cc) leaves this one too.
extern "C" USLAB_EXPORT int mallctl(const char*, void*, size_t*, void*, size_t)
    __attribute__((alias("uslab_mallctl"), copy(uslab_mallctl)));
#endif
