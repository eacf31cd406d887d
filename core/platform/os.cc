// core/platform/os.cc — raw syscalls, clock and allocation-free diagnostics.
// See os.h for the rules; no locks here, every function is reentrant.
#include "core/platform/os.h"
#include "core/platform/config.h"
#include "core/platform/track.h"
#if USLAB_FAULT_INJECTION
#include "core/platform/fault.h"
#endif

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <fcntl.h>
#include <linux/futex.h>
#include <cstring>
#include <signal.h>
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace uslab::os {

namespace {

// The system calls uslab makes that a sandbox may refuse, in the order the statistics
// name them (refused_call_name).
struct Refusable {
  long nr;
  const char* name;
};
constexpr Refusable kRefusable[] = {
    {SYS_rseq, "rseq"}, {SYS_membarrier, "membarrier"}, {SYS_mbind, "mbind"},
    {SYS_get_mempolicy, "get_mempolicy"}, {SYS_memfd_create, "memfd_create"},
    {SYS_ftruncate, "ftruncate"}, {SYS_mincore, "mincore"}, {SYS_madvise, "madvise"},
    {SYS_mremap, "mremap"}, {SYS_mprotect, "mprotect"}, {SYS_mmap, "mmap"},
    {SYS_getrandom, "getrandom"}, {SYS_process_vm_readv, "process_vm_readv"},
    {SYS_sched_getaffinity, "sched_getaffinity"}, {SYS_getcpu, "getcpu"},
    {SYS_openat, "openat"}, {SYS_readlinkat, "readlinkat"}};
constexpr unsigned kRefusableCount = sizeof kRefusable / sizeof kRefusable[0];
static_assert(kRefusableCount <= 32);

constinit uint32_t g_refused_eperm = 0, g_refused_enosys = 0;  // a bit per kRefusable entry

// A call answered EPERM or ENOSYS: a seccomp filter's answers (or a kernel without
// it), noted for the statistics. Only failures come here.
[[gnu::noinline, gnu::cold]] void note_refused(long nr, long r) {
  for (unsigned i = 0; i < kRefusableCount; i++)
    if (kRefusable[i].nr == nr)
      __atomic_fetch_or(r == -EPERM ? &g_refused_eperm : &g_refused_enosys, 1u << i,
                        __ATOMIC_RELAXED);
}

long raw_syscall(long nr, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = nr;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                   : "memory");
  return x0;
#else
  int saved = errno;
  long r = syscall(nr, a, b, c, d, e, f);
  if (r == -1) r = -errno;
  errno = saved;
  return r;
#endif
}

}  // namespace

long syscall6(long nr, long a, long b, long c, long d, long e, long f) {
#if USLAB_FAULT_INJECTION
  if (long injected = fault::inject(nr)) return injected;  // never noted as refused
#endif
  long r = raw_syscall(nr, a, b, c, d, e, f);
  if (r == -EPERM || r == -ENOSYS) [[unlikely]]
    note_refused(nr, r);
  return r;
}

long membarrier(int cmd, unsigned flags, int cpu) {
  uint64_t pause_ns = 100000;
  for (int tries = 0;; tries++) {
    long r = syscall6(SYS_membarrier, cmd, flags, cpu);
    if (r >= 0 || (r != -ENOMEM && r != -EAGAIN && r != -EINTR) || tries == 8) return r;
    sleep_ns(pause_ns);
    if (pause_ns < 10000000) pause_ns *= 2;
  }
}

RefusedCalls refused_calls() {
  return {__atomic_load_n(&g_refused_eperm, __ATOMIC_RELAXED),
          __atomic_load_n(&g_refused_enosys, __ATOMIC_RELAXED)};
}

const char* refused_call_name(unsigned i) {
  return i < kRefusableCount ? kRefusable[i].name : nullptr;
}

const char* RefusedCalls::error(unsigned i) const {
  return eperm >> i & 1 ? "EPERM" : enosys >> i & 1 ? "ENOSYS" : nullptr;
}

static bool failed(long r) { return r < 0 && r > -4096; }

// 0 until set_page_size; then never written again.
static constinit size_t g_page_size = 0;
static constinit size_t g_kernel_page = 4096;

size_t page_size() {
  size_t p = __atomic_load_n(&g_page_size, __ATOMIC_RELAXED);
  if (__builtin_expect(p != 0, 1)) return p;
  config_init();  // sets it
  return __atomic_load_n(&g_page_size, __ATOMIC_RELAXED);
}

size_t kernel_page_size() {
  page_size();  // sets it
  return g_kernel_page;
}

size_t set_page_size(size_t at_least) {
  size_t kernel = getauxval(AT_PAGESZ);
  if (kernel < 4096 || (kernel & (kernel - 1))) kernel = 4096;
  if (kernel > kMaxOsPage)
    fatal("uslab: the kernel's pages of %zu bytes are larger than the %zu it supports\n", kernel,
          kMaxOsPage);
  g_kernel_page = kernel;
  size_t p = at_least > kernel ? at_least : kernel;
  __atomic_store_n(&g_page_size, p, __ATOMIC_RELAXED);
  return p;
}

// mmap refused outright, not for want of memory (a seccomp filter's EPERM or
// ENOSYS): said once, as every allocation that needs new memory fails from then on.
static void say_map_refused(long err) {
  static bool said;
  if (err == -ENOMEM || __atomic_exchange_n(&said, true, __ATOMIC_RELAXED)) return;
  print_stderr("uslab: mmap refused (%s): allocations that need new memory fail with ENOMEM\n",
               err == -EPERM ? "EPERM" : err == -ENOSYS ? "ENOSYS" : err == -EACCES ? "EACCES"
                                                                    : "an error");
}

static void* map_raw(size_t bytes) {
  long r = syscall6(SYS_mmap, 0, (long)bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (failed(r)) {
    say_map_refused(r);
    return nullptr;
  }
  return reinterpret_cast<void*>(r);
}

// Aligned to page_size(), which the os_page option may set above the kernel's.
void* map(size_t bytes) {
  return page_size() > g_kernel_page ? map_aligned(bytes, page_size()) : map_raw(bytes);
}

void* map_named(const char* name, size_t bytes) {
  long fd = syscall6(SYS_memfd_create, reinterpret_cast<long>(name), MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  long r = syscall6(SYS_ftruncate, fd, static_cast<long>(bytes));
  if (r == 0)
    r = syscall6(SYS_mmap, 0, static_cast<long>(bytes), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_NORESERVE, fd, 0);
  syscall6(SYS_close, fd);
  return r == 0 || failed(r) ? nullptr : reinterpret_cast<void*>(r);
}

void* map_metadata(size_t bytes) {
  void* p = map(bytes);
  if (p) advise_huge(p, bytes, false);
  return p;
}

// The linker's bounds of this object's .bss and .lbss (hidden: the library's own,
// not the executable's).
extern "C" char __bss_start[] __attribute__((visibility("hidden")));
extern "C" char _end[] __attribute__((visibility("hidden")));

void advise_bss_small_pages() {
  uintptr_t lo = page_up(reinterpret_cast<uintptr_t>(__bss_start));
  uintptr_t hi = page_up(reinterpret_cast<uintptr_t>(_end));
  if (hi > lo) advise_huge(reinterpret_cast<void*>(lo), hi - lo, false);
}

// A mapping at exactly `at`, or nullptr (something is there; with kernels before
// 4.17, which ignore MAP_FIXED_NOREPLACE, the hint may be moved: then refused too).
static void* map_at(uintptr_t at, size_t bytes) {
#ifndef MAP_FIXED_NOREPLACE
  constexpr long MAP_FIXED_NOREPLACE = 0x100000;
#endif
  long r = syscall6(SYS_mmap, (long)at, (long)bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (failed(r)) return nullptr;
  if ((uintptr_t)r == at) return reinterpret_cast<void*>(r);
  unmap(reinterpret_cast<void*>(r), bytes);
  return nullptr;
}

void unmap_if_unclaimed(void* p, size_t bytes) {
  if (map_at(reinterpret_cast<uintptr_t>(p), bytes)) unmap(p, bytes);
}

void* map_aligned(size_t bytes, size_t align) {
  if (align <= g_kernel_page) return map_raw(bytes);
  // Try exact first: the kernel often hands out aligned addresses for large sizes.
  char* p = static_cast<char*>(map_raw(bytes));
  if (!p) return nullptr;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if ((a & (align - 1)) == 0) return p;
  unmap(p, bytes);
  // Then the aligned addresses on either side of the hole the kernel picked: no
  // over-sized mapping, whose transient extra `align` bytes fail under an RLIMIT_AS
  // that still has room for `bytes` (the edge an out-of-memory program lives at).
  uintptr_t down = a & ~(uintptr_t)(align - 1);
  if (void* q = map_at(down, bytes)) return q;
  if (void* q = map_at(down + align, bytes)) return q;
  size_t over = bytes + align - g_kernel_page;
  if (over < bytes) return nullptr;
  p = static_cast<char*>(map_raw(over));
  if (!p) return nullptr;
  uintptr_t start = (reinterpret_cast<uintptr_t>(p) + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = start - reinterpret_cast<uintptr_t>(p);
  size_t tail = over - head - bytes;
  if (head) unmap(p, head);
  if (tail) unmap(reinterpret_cast<char*>(start) + bytes, tail);
  return reinterpret_cast<void*>(start);
}

void* fail_nomem() {
  errno = ENOMEM;
  return nullptr;
}

// What leaves the address space is unpoisoned first (track.h): the program or
// another library may map that range next.
void unmap(void* p, size_t bytes) {
  track_unmap(p, bytes);
  syscall6(SYS_munmap, (long)p, (long)bytes);
}

bool remap_in_place(void* p, size_t old_bytes, size_t new_bytes) {
  if (syscall6(SYS_mremap, (long)p, (long)old_bytes, (long)new_bytes, 0) != (long)p) return false;
  if (new_bytes < old_bytes) track_unmap(static_cast<char*>(p) + new_bytes, old_bytes - new_bytes);
  return true;
}

bool remap_to(void* p, size_t old_bytes, size_t new_bytes, void* to) {
  if (syscall6(SYS_mremap, (long)p, (long)old_bytes, (long)new_bytes, MREMAP_MAYMOVE | MREMAP_FIXED,
               (long)to) != (long)to)
    return false;
  track_unmap(p, old_bytes);
  return true;
}

static constinit size_t g_purge_refused_bytes = 0;

bool purge(void* p, size_t bytes) {
  USLAB_DCHECK(page_aligned(reinterpret_cast<uintptr_t>(p)) && page_aligned(bytes));
  if (syscall6(SYS_madvise, (long)p, (long)bytes, MADV_DONTNEED) == 0) return true;
  __atomic_fetch_add(&g_purge_refused_bytes, bytes, __ATOMIC_RELAXED);
  return false;
}

bool purge_zeroing(void* p, size_t bytes) {
  if (purge(p, bytes)) return true;
  zero_unseen(p, bytes);
  return false;
}

size_t purge_refused_bytes() { return __atomic_load_n(&g_purge_refused_bytes, __ATOMIC_RELAXED); }

void populate(const void* p, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14's value (older headers lack it)
#endif
  uintptr_t lo = page_down(reinterpret_cast<uintptr_t>(p));
  uintptr_t hi = page_up(reinterpret_cast<uintptr_t>(p) + bytes);
  syscall6(SYS_madvise, (long)lo, (long)(hi - lo), MADV_POPULATE_WRITE);
}

bool protect(void* p, size_t bytes, bool accessible) {
  USLAB_DCHECK(page_aligned(reinterpret_cast<uintptr_t>(p)) && page_aligned(bytes));
  return syscall6(SYS_mprotect, (long)p, (long)bytes,
                  accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
}

// Fresh zero pages of protection `prot` in place of whatever [p, p + bytes) held.
USLAB_STARTUP_TEXT static bool map_zero_over(void* p, size_t bytes, int prot) {
  return !failed(syscall6(SYS_mmap, reinterpret_cast<long>(p), static_cast<long>(bytes), prot,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
}

USLAB_STARTUP_TEXT bool uncharge_zero(void* p, size_t bytes) {
  uintptr_t lo = page_up(reinterpret_cast<uintptr_t>(p));
  uintptr_t hi = page_down(reinterpret_cast<uintptr_t>(p) + bytes);
  if (hi <= lo) return true;
  if (map_zero_over(reinterpret_cast<void*>(lo), hi - lo, PROT_READ)) return true;
  // A failed MAP_FIXED may have unmapped the range already: zero pages put back,
  // writable (a read-only mapping is charged nothing, so no limit refused it).
  map_zero_over(reinterpret_cast<void*>(lo), hi - lo, PROT_READ | PROT_WRITE);
  return false;
}

bool charge_zero(void* p, size_t bytes) {
  USLAB_DCHECK(page_aligned(reinterpret_cast<uintptr_t>(p)) && page_aligned(bytes));
  long r = syscall6(SYS_mprotect, reinterpret_cast<long>(p), static_cast<long>(bytes),
                    PROT_READ | PROT_WRITE);
  if (r == 0) return true;
  return r != -ENOMEM && map_zero_over(p, bytes, PROT_READ | PROT_WRITE);
}

bool guard_region(void* p, size_t bytes, bool install) {
  constexpr int kInstall = 102, kRemove = 103;  // Linux 6.13's values (older headers lack them)
  USLAB_DCHECK(page_aligned(reinterpret_cast<uintptr_t>(p)) && page_aligned(bytes));
  return syscall6(SYS_madvise, (long)p, (long)bytes, install ? kInstall : kRemove) == 0;
}

uint64_t random_u64() {
  uint64_t v = 0;
  if (syscall6(SYS_getrandom, (long)&v, sizeof v, GRND_NONBLOCK) == sizeof v && v) return v;
  // No entropy yet (early boot) or no getrandom: the clock and an address, mixed.
  v = now_ns() ^ reinterpret_cast<uintptr_t>(&v);
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdull;
  v ^= v >> 33;
  return v | 1;
}

long thp_resident_bytes() {
  long kib = -1;
  auto line = [](const char* s, size_t len, void* arg) {
    static const char kKey[] = "AnonHugePages:";
    if (len < sizeof kKey - 1 || __builtin_memcmp(s, kKey, sizeof kKey - 1) != 0) return true;
    size_t i = sizeof kKey - 1;
    while (i < len && s[i] == ' ') i++;
    long v = 0;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) v = v * 10 + (s[i] - '0');
    *static_cast<long*>(arg) = v;
    return false;  // found: stop reading
  };
  if (!for_each_line("/proc/self/smaps_rollup", line, &kib)) return -1;
  return kib < 0 ? -1 : kib << 10;
}

const char* thp_mode_name(ThpMode m) {
  return m == ThpMode::kNever ? "never" : m == ThpMode::kMadvise ? "madvise" : "always";
}

ThpMode thp_mode() {
  // 0: not read yet; else the mode + 1. Racing first readers read the same file.
  static constinit std::atomic<uint8_t> mode{0};
  uint8_t m = mode.load(std::memory_order_relaxed);
  if (m) return static_cast<ThpMode>(m - 1);
  char buf[128];
  long n = read_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf - 1);
  ThpMode t = ThpMode::kNever;  // no file: a kernel without THP
  if (n > 0) {
    buf[n] = 0;
    const char* sel = __builtin_strstr(buf, "[");  // the selected word is bracketed
    if (sel && sel[1] == 'a' && sel[2] == 'l')
      t = ThpMode::kAlways;
    else if (sel && sel[1] == 'm')
      t = ThpMode::kMadvise;
  }
  mode.store(static_cast<uint8_t>(static_cast<uint8_t>(t) + 1), std::memory_order_relaxed);
  return t;
}

bool advise_huge(void* p, size_t bytes, bool huge) {
  USLAB_DCHECK(page_aligned(reinterpret_cast<uintptr_t>(p)));
  return syscall6(SYS_madvise, (long)p, (long)bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0;
}

int collapse(void* p, size_t bytes) {
  constexpr long kMadvCollapse = 25;  // <sys/mman.h> names it from glibc 2.37
  long r = syscall6(SYS_madvise, (long)p, (long)bytes, kMadvCollapse);
  return r == 0 ? 0 : static_cast<int>(-r);
}

bool mappings_counted() {
  static int counted = -1;  // racing first calls read the same answer
  int v = __atomic_load_n(&counted, __ATOMIC_RELAXED);
  if (v < 0) {
    char mode[4];
    struct rlimit as;
    v = (read_file("/proc/sys/vm/overcommit_memory", mode, sizeof mode) > 0 && mode[0] == '2') ||
        (syscall6(SYS_prlimit64, 0, RLIMIT_AS, 0, reinterpret_cast<long>(&as)) == 0 &&
         as.rlim_cur != RLIM_INFINITY);
    __atomic_store_n(&counted, v, __ATOMIC_RELAXED);
  }
  return v;
}

bool seccomp_filtered() {
  char buf[4096];
  long n = read_file("/proc/thread-self/status", buf, sizeof buf - 1);
  if (n <= 0) return true;
  buf[n] = 0;
  const char* s = strstr(buf, "\nSeccomp:");
  if (!s) return false;  // a kernel without seccomp
  s += 9;
  while (*s == ' ' || *s == '\t') s++;
  return *s != '0';
}

size_t resident_bytes_pagemap(const void* p, size_t bytes) {
  const size_t n = (bytes + g_kernel_page - 1) / g_kernel_page;
  long fd = syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t entries[256];
  size_t resident = 0;
  const uint64_t first = reinterpret_cast<uintptr_t>(p) / g_kernel_page;
  for (size_t done = 0; done < n;) {
    const size_t k = n - done < 256 ? n - done : 256;
    long r = syscall6(SYS_pread64, fd, (long)entries, (long)(k * sizeof entries[0]),
                      (long)((first + done) * sizeof entries[0]));
    if (r != static_cast<long>(k * sizeof entries[0])) break;
    for (size_t i = 0; i < k; i++) resident += entries[i] >> 63;  // present
    done += k;
  }
  syscall6(SYS_close, fd);
  return resident * g_kernel_page;
}

namespace {
// -1: not known yet; 1: a seccomp filter was in force at the first measurement.
int g_resident_by_pagemap = -1;

}  // namespace

size_t resident_bytes(const void* p, size_t bytes) {
  unsigned char vec[1024];  // 4 MiB of 4 KiB pages
  USLAB_DCHECK(page_aligned(reinterpret_cast<uintptr_t>(p)));
  size_t n = (bytes + g_kernel_page - 1) / g_kernel_page;  // mincore's are the kernel's pages
  if (n > sizeof vec) return 0;
  // mincore is not in systemd's @system-service set, whose filters kill at a call they
  // do not list: under any filter the page map answers (three calls where mincore is
  // one, once a decay tick at most; a filter that came later is not seen).
  int by_pagemap = __atomic_load_n(&g_resident_by_pagemap, __ATOMIC_RELAXED);
  if (by_pagemap < 0) {
    by_pagemap = seccomp_filtered();
    __atomic_store_n(&g_resident_by_pagemap, by_pagemap, __ATOMIC_RELAXED);
  }
  if (by_pagemap) return resident_bytes_pagemap(p, bytes);
  if (syscall6(SYS_mincore, (long)p, (long)bytes, (long)vec) != 0) return 0;
  size_t resident = 0;
  for (size_t i = 0; i < n; i++) resident += vec[i] & 1;
  return resident * g_kernel_page;
}

void futex_wait(const uint32_t* addr, uint32_t expected) {
  syscall6(SYS_futex, (long)addr, FUTEX_WAIT_PRIVATE, expected, 0);
}

void futex_wait_ms(const uint32_t* addr, uint32_t expected, uint64_t timeout_ms) {
  struct timespec ts = {static_cast<time_t>(timeout_ms / 1000),
                        static_cast<long>(timeout_ms % 1000) * 1000000};
  syscall6(SYS_futex, (long)addr, FUTEX_WAIT_PRIVATE, expected, reinterpret_cast<long>(&ts));
}

void futex_wake(const uint32_t* addr, int count) {
  syscall6(SYS_futex, (long)addr, FUTEX_WAKE_PRIVATE, count);
}

// clock_gettime goes through the vDSO: no allocation, no lock, errno untouched on success.
uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// The coarse clock (a few ms of resolution) is enough for decay clocks and costs a
// fraction of the precise one, which page-heap calls used to read on every call.
uint64_t now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

void sleep_ns(uint64_t ns) {
  struct timespec ts = {static_cast<time_t>(ns / 1000000000ull),
                        static_cast<long>(ns % 1000000000ull)};
  syscall6(SYS_nanosleep, reinterpret_cast<long>(&ts), 0);
}

bool read_memory(uintptr_t at, void* out, size_t n) {
  struct {
    void* base;
    size_t len;
  } local{out, n}, remote{reinterpret_cast<void*>(at), n};  // struct iovec
  // The pid asked each time: a cached one would read the parent after a fork.
  return syscall6(SYS_process_vm_readv, syscall6(SYS_getpid), reinterpret_cast<long>(&local), 1,
                  reinterpret_cast<long>(&remote), 1, 0) == static_cast<long>(n);
}

long read_file(const char* path, char* buf, size_t cap) {
  long fd = syscall6(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  while (len < cap) {
    long r = syscall6(SYS_read, fd, (long)(buf + len), (long)(cap - len));
    if (r == -EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
  }
  syscall6(SYS_close, fd);
  return (long)len;
}

bool last_live_thread() {
  char buf[1024];
  long len = read_file("/proc/self/stat", buf, sizeof buf - 1);
  if (len <= 0) return false;
  buf[len] = 0;
  // The fields after the command's name (in parentheses, which it may contain): the
  // leader's state is field 3, the group's num_threads field 20 (an exited leader
  // counts until the group ends).
  const char* p = nullptr;
  for (long i = len - 1; i >= 0 && !p; i--)
    if (buf[i] == ')') p = buf + i + 1;
  if (!p) return false;
  while (*p == ' ') p++;
  const char state = *p;
  for (int field = 3; field < 20; field++) {
    while (*p && *p != ' ') p++;
    while (*p == ' ') p++;
    if (!*p) return false;
  }
  int n = 0;
  for (; *p >= '0' && *p <= '9'; p++) n = n * 10 + (*p - '0');
  if (n == 1) return true;
  return n == 2 && state == 'Z' && syscall6(SYS_gettid) != syscall6(SYS_getpid);
}

bool for_each_line(const char* path, bool (*fn)(const char*, size_t, void*), void* arg) {
  long fd = syscall6(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[2048];
  size_t have = 0;
  bool go = true, eof = false;
  while (go && !(eof && have == 0)) {
    if (!eof && have < sizeof buf) {
      long r = syscall6(SYS_read, fd, (long)(buf + have), (long)(sizeof buf - have));
      if (r == -EINTR) continue;
      if (r <= 0)
        eof = true;
      else
        have += (size_t)r;
    }
    char* nl = static_cast<char*>(memchr(buf, '\n', have));
    size_t len = nl ? (size_t)(nl - buf) : have;
    if (!nl && !eof && have < sizeof buf) continue;  // read more of this line
    if (!nl && !eof) len = sizeof buf / 2;           // a line past the window: cut
    go = fn(buf, len < 1024 ? len : 1024, arg);
    size_t used = nl ? len + 1 : len;
    memmove(buf, buf + used, have - used);
    have -= used;
  }
  syscall6(SYS_close, fd);
  return true;
}

void write_stderr(const char* s, size_t n) { write_fd(2, s, n); }

bool bind_node(void* p, size_t bytes, unsigned node) {
  constexpr long kMpolPreferred = 1;  // <linux/mempolicy.h>, which the libc headers lack
  unsigned long mask[4] = {};
  if (node >= sizeof mask * 8) return false;
  mask[node / 64] = 1ul << (node % 64);
  // maxnode counts bits of the mask plus one (the kernel drops the last).
  return syscall6(SYS_mbind, (long)p, (long)bytes, kMpolPreferred, (long)mask,
                  (long)(sizeof mask * 8 + 1), 0) == 0;
}

// openat and close, which every dynamically linked program makes (its loader's), not
// faccessat: a filter that kills at calls it does not list may leave that out.
USLAB_STARTUP_TEXT bool path_exists(const char* path) {
  long fd = syscall6(SYS_openat, AT_FDCWD, (long)path, O_PATH | O_CLOEXEC);
  if (fd < 0) return false;
  syscall6(SYS_close, fd);
  return true;
}

bool task_memory_policy() {
  constexpr int kMpolDefault = 0, kMpolLocal = 4;  // <linux/mempolicy.h>
  int mode = kMpolDefault;
  if (syscall6(SYS_get_mempolicy, (long)&mode, 0, 0, 0, 0) != 0) return false;
  return mode != kMpolDefault && mode != kMpolLocal;
}

USLAB_STARTUP_TEXT unsigned allowed_nodes() {
  constexpr long kMemsAllowed = 4;  // MPOL_F_MEMS_ALLOWED
  unsigned long mask[16] = {};      // 1024 nodes, the kernel's largest MAX_NUMNODES
  if (syscall6(SYS_get_mempolicy, 0, (long)mask, (long)(sizeof mask * 8), 0, kMemsAllowed) != 0)
    return 0;
  unsigned n = 0;
  for (unsigned long w : mask) n += bit_count(w);
  return n;
}

int dup_high(int fd) {
  long r = syscall6(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 100);
  return r < 0 ? -1 : (int)r;
}

void write_fd(int fd, const char* s, size_t n) {
  while (n) {
    long r = syscall6(SYS_write, fd, (long)s, (long)n);
    if (r == -EINTR) continue;
    if (r <= 0) return;
    s += r;
    n -= (size_t)r;
  }
}

namespace {

struct Out {
  char* buf;
  size_t cap;
  size_t len;
  void put(char c) {
    if (len + 1 < cap) buf[len] = c;
    len++;
  }
  void puts(const char* s) {
    for (; *s; s++) put(*s);
  }
  void num(unsigned long long v, unsigned base, int width, char pad) {
    char tmp[24];
    int n = 0;
    do {
      tmp[n++] = "0123456789abcdef"[v % base];
      v /= base;
    } while (v);
    for (int i = n; i < width; i++) put(pad);
    while (n) put(tmp[--n]);
  }
};

}  // namespace

size_t vformat(char* out, size_t cap, const char* fmt, va_list ap) {
  Out o{out, cap, 0};
  for (; *fmt; fmt++) {
    if (*fmt != '%') {
      o.put(*fmt);
      continue;
    }
    fmt++;
    bool left = false;
    if (*fmt == '-') {
      left = true;
      fmt++;
    }
    char pad = ' ';
    if (*fmt == '0') {
      pad = '0';
      fmt++;
    }
    int width = 0;
    while (*fmt >= '0' && *fmt <= '9') width = width * 10 + (*fmt++ - '0');
    int longs = 0;
    while (*fmt == 'l' || *fmt == 'z') {
      longs++;
      fmt++;
    }
    size_t start = o.len;
    switch (*fmt) {
      case 's': {
        const char* s = va_arg(ap, const char*);
        o.puts(s ? s : "(null)");
        break;
      }
      case 'd': {
        long long v = longs ? va_arg(ap, long long) : va_arg(ap, int);
        if (v < 0) {
          o.put('-');
          v = -v;
        }
        o.num((unsigned long long)v, 10, left ? 0 : width, pad);
        break;
      }
      case 'u':
      case 'x': {
        unsigned long long v = longs ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned);
        o.num(v, *fmt == 'x' ? 16 : 10, left ? 0 : width, pad);
        break;
      }
      case 'p':
        o.puts("0x");
        o.num((uintptr_t)va_arg(ap, void*), 16, 0, '0');
        break;
      case '%':
        o.put('%');
        break;
      default:
        o.put('?');
    }
    if (*fmt == 's' && !left && width > 0) {
      // right-align strings: shift what was written
      size_t n = o.len - start;
      if ((size_t)width > n && o.len + (width - n) < cap) {
        size_t shift = width - n;
        for (size_t i = n; i-- > 0;) o.buf[start + i + shift] = o.buf[start + i];
        for (size_t i = 0; i < shift; i++) o.buf[start + i] = ' ';
        o.len += shift;
      }
    }
    if (left)
      while (o.len - start < (size_t)width) o.put(' ');
    if (!*fmt) break;
  }
  if (cap) o.buf[o.len < cap ? o.len : cap - 1] = 0;
  return o.len < cap ? o.len : (cap ? cap - 1 : 0);
}

size_t format(char* out, size_t cap, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t n = vformat(out, cap, fmt, ap);
  va_end(ap);
  return n;
}

void print_stderr(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  size_t n = vformat(buf, sizeof buf, fmt, ap);
  va_end(ap);
  write_stderr(buf, n);
}

void fatal(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  size_t n = vformat(buf, sizeof buf, fmt, ap);
  va_end(ap);
  write_stderr(buf, n);
  // abort() may take stdio locks; raise SIGABRT directly so a core dump shows the caller.
  long tid = syscall6(SYS_gettid);
  long pid = syscall6(SYS_getpid);
  syscall6(SYS_tgkill, pid, tid, SIGABRT);
  __builtin_trap();
}

}  // namespace uslab::os
