// core/platform/fault.cc — injected system-call failures; see fault.h.
#include "core/platform/fault.h"

#include <fcntl.h>
#include <sys/syscall.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/platform/os.h"

extern char** environ;

namespace uslab::os::fault {

namespace {

struct Name {
  const char* name;
  long value;
};
constexpr Name kCalls[] = {
    {"mmap", SYS_mmap}, {"munmap", SYS_munmap}, {"mremap", SYS_mremap},
    {"madvise", SYS_madvise}, {"mprotect", SYS_mprotect}, {"memfd_create", SYS_memfd_create},
    {"ftruncate", SYS_ftruncate}, {"mbind", SYS_mbind}, {"get_mempolicy", SYS_get_mempolicy},
    {"getrandom", SYS_getrandom}, {"membarrier", SYS_membarrier}, {"rseq", SYS_rseq},
    {"openat", SYS_openat}, {"mincore", SYS_mincore},
    {"sched_getaffinity", SYS_sched_getaffinity}, {"process_vm_readv", SYS_process_vm_readv},
    {"any", -1}};
constexpr Name kErrors[] = {{"ENOMEM", ENOMEM}, {"EAGAIN", EAGAIN}, {"EINVAL", EINVAL},
                            {"EPERM", EPERM},   {"ENOSYS", ENOSYS}, {"EFAULT", EFAULT},
                            {"EINTR", EINTR},   {"EMFILE", EMFILE}, {"ENFILE", ENFILE},
                            {"EACCES", EACCES}, {"EBUSY", EBUSY},   {"EIO", EIO}};

struct Rule {
  long nr;          // -1: any call of kCalls
  long error;       // positive errno
  uint64_t nth;     // the Nth call (N and N+ forms), else 0
  bool from_nth;    // N+: every call from the Nth on
  uint32_t permille;  // pK form
  std::atomic<uint64_t> calls;
};

constexpr unsigned kMaxRules = 4;
constinit Rule g_rules[kMaxRules] = {};
constinit unsigned g_count = 0;
constinit std::atomic<int> g_state{0};  // 0 not read, 1 reading, 2 read
constinit std::atomic<uint64_t> g_random{0};
constinit std::atomic<uint64_t> g_injected{0};
constinit const char* g_text = nullptr;  // the rules' text
constinit uint64_t g_seed = 0;

// kCalls' name of nr; nullptr when nr is not injectable.
const char* call_name(long nr) {
  for (const Name& c : kCalls)
    if (c.value == nr) return c.name;
  return nullptr;
}

const char* error_name(long error) {
  for (const Name& e : kErrors)
    if (e.value == error) return e.name;
  return "?";
}

// The value of `table` named by [s, s + n); false when none is.
template <size_t N>
bool lookup(const Name (&table)[N], const char* s, size_t n, long* out) {
  for (const Name& e : table)
    if (strlen(e.name) == n && memcmp(e.name, s, n) == 0) return *out = e.value, true;
  return false;
}

uint64_t parse_number(const char*& p, const char* end) {
  uint64_t v = 0;
  while (p < end && *p >= '0' && *p <= '9') v = v * 10 + static_cast<uint64_t>(*p++ - '0');
  return v;
}

// One rule, [s, end); false when it is malformed.
bool parse_rule(const char* s, const char* end, Rule* r, uint64_t* seed) {
  const char* c1 = static_cast<const char*>(memchr(s, ':', static_cast<size_t>(end - s)));
  if (!c1) return false;
  const char* c2 = static_cast<const char*>(memchr(c1 + 1, ':', static_cast<size_t>(end - c1 - 1)));
  if (!c2 || !lookup(kCalls, s, static_cast<size_t>(c1 - s), &r->nr) ||
      !lookup(kErrors, c1 + 1, static_cast<size_t>(c2 - c1 - 1), &r->error))
    return false;
  const char* p = c2 + 1;
  if (p < end && *p == 'p') {
    p++;
    r->permille = static_cast<uint32_t>(parse_number(p, end));
    if (p < end && *p == '@') {
      p++;
      *seed = parse_number(p, end);
    }
    return p == end && r->permille > 0 && r->permille <= 1000;
  }
  r->nth = parse_number(p, end);
  if (p < end && *p == '+') r->from_nth = true, p++;
  return p == end && r->nth > 0;
}

// The environment before libc has set environ up (the first calls come from ld.so's
// mallocs): the process's initial one.
USLAB_LARGE_ZERO char g_env_block[32768];
// Where the messages go: stderr, or USLAB_FAULT_LOG's file (for suites whose programs'
// stderr is compared).
int g_log_fd = 2;

void say(const char* fmt, auto... args) {
  char line[256];
  size_t n = os::format(line, sizeof line, fmt, args...);
  os::write_fd(g_log_fd, line, n);
}

// The value of NAME= in the environment, or nullptr.
const char* env(const char* name, size_t len) {
  if (environ) {
    for (char** e = environ; *e; e++)
      if (strncmp(*e, name, len) == 0) return *e + len;
    return nullptr;
  }
  static long block_len = -1;
  if (block_len < 0) block_len = os::read_file("/proc/self/environ", g_env_block, sizeof g_env_block - 1);
  for (long i = 0; i < block_len; i += static_cast<long>(strlen(g_env_block + i)) + 1)
    if (strncmp(g_env_block + i, name, len) == 0) return g_env_block + i + len;
  return nullptr;
}

// Once; a call made while the rules are read (the read's own, another thread's) is
// not injected.
void read_rules() {
  int expected = 0;
  if (!g_state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) return;
  const char* text = env("USLAB_FAULT=", 12);
  if (const char* log = env("USLAB_FAULT_LOG=", 16)) {
    long fd = os::syscall6(SYS_openat, AT_FDCWD, reinterpret_cast<long>(log),
                           O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) g_log_fd = static_cast<int>(fd);
  }
  uint64_t seed = 0;
  bool seeded = false;
  for (const char* s = text; s && *s && g_count < kMaxRules;) {
    const char* end = strchr(s, ';');
    if (!end) end = s + strlen(s);
    uint64_t rule_seed = 0;
    if (parse_rule(s, end, &g_rules[g_count], &rule_seed)) {
      if (rule_seed) seed = rule_seed, seeded = true;
      g_count++;
    } else {
      char bad[64] = {};
      memcpy(bad, s, static_cast<size_t>(end - s) < sizeof bad - 1 ? static_cast<size_t>(end - s)
                                                                     : sizeof bad - 1);
      say("uslab: USLAB_FAULT: bad rule '%s' (CALL:ERRNO:N, N+ or pK[@SEED])\n", bad);
    }
    s = *end ? end + 1 : end;
  }
  if (!seeded) seed = os::now_ns() | 1;
  g_seed = seed;
  g_random.store(seed, std::memory_order_relaxed);
  g_text = text;
  g_state.store(2, std::memory_order_release);
}

// The next number of the shared sequence (xorshift64*): one sequence for every thread,
// so a single-threaded run repeats exactly.
uint64_t next_random() {
  uint64_t x = g_random.load(std::memory_order_relaxed), y;
  do {
    y = x ? x : 0x9e3779b97f4a7c15ull;
    y ^= y >> 12;
    y ^= y << 25;
    y ^= y >> 27;
  } while (!g_random.compare_exchange_weak(x, y, std::memory_order_relaxed));
  return y * 0x2545f4914f6cdd1dull;
}

}  // namespace

void set_rule(const char* call, long error, uint32_t permille, uint64_t seed) {
  g_state.store(1, std::memory_order_relaxed);
  g_count = 0;
  Rule& r = g_rules[0];
  if (call && lookup(kCalls, call, strlen(call), &r.nr) && permille) {
    r.error = error;
    r.nth = 0;
    r.from_nth = false;
    r.permille = permille;
    r.calls.store(0, std::memory_order_relaxed);
    g_count = 1;
  }
  g_random.store(seed | 1, std::memory_order_relaxed);
  g_seed = seed | 1;
  g_text = call ? call : "";
  g_state.store(2, std::memory_order_release);
}

long inject(long nr) {
  if (!call_name(nr)) return 0;
  if (g_state.load(std::memory_order_acquire) != 2) {
    read_rules();
    if (g_state.load(std::memory_order_acquire) != 2) return 0;
  }
  for (unsigned i = 0; i < g_count; i++) {
    Rule& r = g_rules[i];
    if (r.nr != nr && r.nr != -1) continue;
    uint64_t n = r.calls.fetch_add(1, std::memory_order_relaxed) + 1;
    bool fail = r.permille ? next_random() % 1000 < r.permille
                           : n == r.nth || (r.from_nth && n > r.nth);
    if (!fail) continue;
    // The rules and the seed with the first, so that the run can be repeated.
    uint64_t seen = g_injected.fetch_add(1, std::memory_order_relaxed);
    if (seen == 0)
      say("uslab: fault injection: USLAB_FAULT=%s, seed %lu\n", g_text,
          static_cast<unsigned long>(g_seed));
    if (seen < 5)
      say("uslab: fault injection: %s, its call %lu, fails with %s\n", call_name(nr),
          static_cast<unsigned long>(n), error_name(r.error));
    return -r.error;
  }
  return 0;
}

}  // namespace uslab::os::fault
