// core/platform/config.cc — USLAB_CONF parsing. Runs once inside the allocator's
// initialisation (under its init lock), allocates nothing, calls no libc that may
// allocate.
#include "core/platform/config.h"

#include <sys/auxv.h>

#include <atomic>
#include <cstring>

#include "core/platform/os.h"

extern "C" {
// A program may define this to bake in options (as jemalloc's malloc_conf).
extern const char* uslab_malloc_conf __attribute__((weak));
}
extern char** environ;

namespace uslab {

constinit Config g_config;

namespace {

bool key_is(const char* k, size_t klen, const char* name) {
  return strlen(name) == klen && memcmp(k, name, klen) == 0;
}

bool parse_bool(const char* v, size_t n, bool* out) {
  if ((n == 1 && v[0] == '1') || (n == 4 && memcmp(v, "true", 4) == 0) ||
      (n == 2 && memcmp(v, "on", 2) == 0)) {
    *out = true;
    return true;
  }
  if ((n == 1 && v[0] == '0') || (n == 5 && memcmp(v, "false", 5) == 0) ||
      (n == 3 && memcmp(v, "off", 3) == 0)) {
    *out = false;
    return true;
  }
  return false;
}

// stats / USLAB_STATS: a boolean, or json (the report at exit as JSON).
bool parse_stats(const char* v, size_t n, Config* cfg) {
  cfg->stats_json = key_is(v, n, "json");
  return cfg->stats_json ? (cfg->stats_at_exit = true) : parse_bool(v, n, &cfg->stats_at_exit);
}

bool parse_u64(const char* v, size_t n, uint64_t* out) {
  if (n == 0 || n > 18) return false;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9') return false;
    x = x * 10 + (uint64_t)(v[i] - '0');
  }
  *out = x;
  return true;
}

// A byte count, with an optional binary suffix (k, m, g, t; either case).
bool parse_size(const char* v, size_t n, uint64_t* out) {
  unsigned shift = 0;
  if (n > 1) {
    switch (v[n - 1] | 0x20) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
      default:
        break;
    }
  }
  uint64_t x;
  if (!parse_u64(v, shift ? n - 1 : n, &x) || (shift && x > (UINT64_MAX >> shift))) return false;
  *out = x << shift;
  return true;
}

// A signal by number (1-64) or name (SIGUSR2 or USR2; the ones a program leaves to
// its user: USR1, USR2, and the real-time ones as RTMIN+n).
bool parse_signal(const char* v, size_t n, uint64_t* out) {
  if (n > 3 && memcmp(v, "SIG", 3) == 0) {
    v += 3;
    n -= 3;
  }
  uint64_t x;
  if (key_is(v, n, "USR1"))
    x = 10;
  else if (key_is(v, n, "USR2"))
    x = 12;
  else if (n > 6 && memcmp(v, "RTMIN+", 6) == 0 && parse_u64(v + 6, n - 6, &x))
    x += 34;
  else if (!parse_u64(v, n, &x))
    return false;
  if (x < 1 || x > 64 || x == 9 || x == 19) return false;  // SIGKILL and SIGSTOP cannot be caught
  *out = x;
  return true;
}

// One of `names`, the values of enumeration E in order: its value into *out.
template <class E, size_t N>
bool parse_choice(const char* v, size_t n, const char* const (&names)[N], E* out) {
  for (size_t i = 0; i < N; i++)
    if (key_is(v, n, names[i])) {
      *out = static_cast<E>(i);
      return true;
    }
  return false;
}

void warn(const char* origin, const char* what, const char* k, size_t klen) {
  char key[64];
  size_t n = klen < sizeof key - 1 ? klen : sizeof key - 1;
  memcpy(key, k, n);
  key[n] = 0;
  os::print_stderr("uslab: %s: %s '%s', using the default\n", origin, what, key);
}

void apply(Config& cfg, const char* k, size_t klen, const char* v, size_t vlen,
           const char* origin) {
  bool ok;
  if (key_is(k, klen, "abort_on_error")) {
    ok = parse_bool(v, vlen, &cfg.abort_on_error);
  } else if (key_is(k, klen, "tcache")) {
    ok = parse_bool(v, vlen, &cfg.tcache);
  } else if (key_is(k, klen, "percpu")) {
    ok = parse_bool(v, vlen, &cfg.percpu);
  } else if (key_is(k, klen, "cpu_cache_bytes")) {
    uint64_t bytes;
    ok = parse_size(v, vlen, &bytes) && (bytes == 0 || (bytes >= (1u << 16) && bytes <= (1u << 30)));
    if (ok) cfg.cpu_cache_bytes = bytes;
  } else if (key_is(k, klen, "shard_cpus")) {
    uint64_t n;
    ok = parse_u64(v, vlen, &n) && n <= 4096;
    if (ok) cfg.shard_cpus = n;
  } else if (key_is(k, klen, "percpu_cpus")) {
    uint64_t n;
    ok = parse_u64(v, vlen, &n) && n <= 4096;
    if (ok) cfg.percpu_cpus = n;
  } else if (key_is(k, klen, "stats")) {
    ok = parse_stats(v, vlen, &cfg);
  } else if (key_is(k, klen, "decay_ms")) {
    ok = parse_u64(v, vlen, &cfg.decay_ms);
  } else if (key_is(k, klen, "membarrier")) {
    ok = parse_bool(v, vlen, &cfg.membarrier);
  } else if (key_is(k, klen, "background_thread")) {
    bool on;
    ok = true;
    if (key_is(v, vlen, "auto"))
      cfg.background_thread = Config::Background::kAuto;
    else if (parse_bool(v, vlen, &on))
      cfg.background_thread = on ? Config::Background::kOn : Config::Background::kOff;
    else
      ok = false;
  } else if (key_is(k, klen, "memory_limit")) {
    uint64_t bytes;
    ok = true;
    if (key_is(v, vlen, "none"))
      cfg.memory_limit = kMemoryLimitNone;
    else if (parse_size(v, vlen, &bytes) && bytes != kMemoryLimitNone)
      cfg.memory_limit = bytes;
    else
      ok = false;
  } else if (key_is(k, klen, "memory_limit_hard")) {
    ok = parse_bool(v, vlen, &cfg.memory_limit_hard);
  } else if (key_is(k, klen, "live_stats")) {
    ok = parse_bool(v, vlen, &cfg.live_stats);
  } else if (key_is(k, klen, "os_page")) {
    uint64_t bytes;
    ok = parse_size(v, vlen, &bytes) && bytes >= 4096 && bytes <= os::kMaxOsPage &&
         (bytes & (bytes - 1)) == 0;
    if (ok) cfg.os_page = bytes;
  } else if (key_is(k, klen, "thp")) {
    ok = parse_bool(v, vlen, &cfg.thp);
  } else if (key_is(k, klen, "poison")) {
    ok = parse_bool(v, vlen, &cfg.poison);
  } else if (key_is(k, klen, "guard")) {
    ok = parse_bool(v, vlen, &cfg.guard);
  } else if (key_is(k, klen, "guard_sample")) {
    uint64_t bytes;
    ok = parse_size(v, vlen, &bytes) && bytes <= (uint64_t{1} << 40);
    if (ok) cfg.guard_sample = bytes;
  } else if (key_is(k, klen, "guard_slots")) {
    uint64_t n;
    ok = parse_u64(v, vlen, &n) && n >= 1 && n <= 65536;
    if (ok) cfg.guard_slots = n;
  } else if (key_is(k, klen, "guard_recover")) {
    ok = parse_bool(v, vlen, &cfg.guard_recover);
  } else if (key_is(k, klen, "prof")) {
    ok = parse_bool(v, vlen, &cfg.prof);
  } else if (key_is(k, klen, "prof_active")) {
    ok = parse_bool(v, vlen, &cfg.prof_active);
  } else if (key_is(k, klen, "prof_sample")) {
    uint64_t bytes;
    ok = parse_size(v, vlen, &bytes) && bytes >= 1 && bytes <= (uint64_t{1} << 40);
    if (ok) cfg.prof_sample = bytes;
  } else if (key_is(k, klen, "prof_prefix") || key_is(k, klen, "prof_final")) {
    // prof_final takes a bool or, as a shorthand, the prefix itself (turning it on).
    bool on;
    ok = vlen > 0 && vlen < sizeof cfg.prof_prefix;
    if (ok && key_is(k, klen, "prof_final") && parse_bool(v, vlen, &on)) {
      cfg.prof_final = on;
    } else if (ok) {
      memcpy(cfg.prof_prefix, v, vlen);
      cfg.prof_prefix[vlen] = 0;
      if (key_is(k, klen, "prof_final")) cfg.prof_final = true;
    }
  } else if (key_is(k, klen, "prof_interval")) {
    ok = parse_size(v, vlen, &cfg.prof_interval);
  } else if (key_is(k, klen, "prof_signal")) {
    ok = parse_signal(v, vlen, &cfg.prof_signal);
  } else if (key_is(k, klen, "foreign_free")) {
    ok = parse_choice(v, vlen, {"forward", "report", "abort"}, &cfg.foreign_free);
  } else if (key_is(k, klen, "topology")) {
    ok = parse_choice(v, vlen, {"auto", "probe", "hwloc"}, &cfg.topology);
  } else if (key_is(k, klen, "sheaf_addressing")) {
    ok = parse_choice(v, vlen, {"auto", "index", "base"}, &cfg.sheaf_addressing);
  } else {
    warn(origin, "unknown key", k, klen);
    return;
  }
  if (!ok) warn(origin, "bad value for key", k, klen);
}

// The value of an environment entry NAME=value when NAME is `name`, else nullptr.
const char* env_value(const char* entry, const char* name) {
  size_t nlen = strlen(name);
  return strncmp(entry, name, nlen) == 0 && entry[nlen] == '=' ? entry + nlen + 1 : nullptr;
}

// Finds NAME=value in a NUL-separated environment block.
const char* env_lookup(const char* block, size_t len, const char* name) {
  for (size_t i = 0; i < len;) {
    const char* entry = block + i;
    if (const char* v = env_value(entry, name)) return v;
    i += strnlen(entry, len - i) + 1;
  }
  return nullptr;
}

// The names every process looks for (os.h's USLAB_STARTUP_STRING).
USLAB_STARTUP_STRING(kConfName, "USLAB_CONF");
USLAB_STARTUP_STRING(kStatsName, "USLAB_STATS");

// Static storage: the environment block is read once, before any lock is taken.
USLAB_LARGE_ZERO char g_env_block[32768];

}  // namespace

void config_parse(Config& cfg, const char* text, const char* origin) {
  const char* p = text;
  while (*p) {
    const char* end = p;
    while (*end && *end != ',') end++;
    const char* eq = p;
    while (eq < end && *eq != '=') eq++;
    if (end > p) {
      if (eq == end)
        warn(origin, "entry without '=':", p, (size_t)(end - p));
      else
        apply(cfg, p, (size_t)(eq - p), eq + 1, (size_t)(end - eq - 1), origin);
    }
    p = *end ? end + 1 : end;
  }
}

USLAB_STARTUP_TEXT void config_init() {
  static constinit std::atomic<int> state{0};  // 0 not started, 1 parsing, 2 done
  if (state.load(std::memory_order_acquire) == 2) return;
  int expected = 0;
  if (!state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
    while (state.load(std::memory_order_acquire) != 2) os::cpu_relax();
    return;
  }
  // The defaults, from g_config (constinit, in .data; written only at the end here):
  // `Config cfg;` would copy them from a template in .rodata, a page fault of its
  // own in a process that allocates nothing (USLAB_STARTUP_STRING, os.h).
  Config cfg = g_config;
  if (&uslab_malloc_conf != nullptr && uslab_malloc_conf)
    config_parse(cfg, uslab_malloc_conf, "uslab_malloc_conf");

  const char* conf = nullptr;
  const char* stats = nullptr;
  // A setuid, setgid or file-capability process (AT_SECURE) ignores the environment,
  // as glibc ignores its malloc tunables there: whoever runs it must not choose where
  // it writes files (prof_final, prof_prefix) or how it behaves. The linked-in
  // string still applies.
  if (!getauxval(AT_SECURE)) {
    if (environ) {
      // libc's environment, set before any constructor runs; this is at the latest
      // the library's constructor (before main can call setenv), or its dlopen.
      for (char** e = environ; *e; e++) {
        if (const char* v = env_value(*e, kConfName)) conf = v;
        if (const char* v = env_value(*e, kStatsName)) stats = v;
      }
    } else {
      // A call before libc has set it up: the process's initial environment (four
      // system calls that every process would pay at start-up otherwise).
      long len = os::read_file("/proc/self/environ", g_env_block, sizeof g_env_block - 1);
      if (len > 0) {
        g_env_block[len] = 0;
        conf = env_lookup(g_env_block, (size_t)len, "USLAB_CONF");
        stats = env_lookup(g_env_block, (size_t)len, "USLAB_STATS");
      }
    }
  }
  if (conf) config_parse(cfg, conf, "USLAB_CONF");
  if (stats && !parse_stats(stats, strlen(stats), &cfg))
    os::print_stderr("uslab: USLAB_STATS: bad value '%s', using the default\n", stats);
  if (cfg.poison) cfg.percpu = cfg.tcache = false;  // every object through its slab
  cfg.os_page = os::set_page_size(cfg.os_page);
  g_config = cfg;
  state.store(2, std::memory_order_release);
}

}  // namespace uslab
