// core/platform/os.h — the allocator's only door to the kernel.
//
// Owns: raw system calls (mmap, munmap, mprotect, madvise, mbind, get_mempolicy,
// getrandom, futex, write, open/read, gettid), the system's transparent-huge-page
// setting, the monotonic clock, and fatal/diagnostic output on stderr.
//
// Rules: nothing here calls malloc, takes a lock, touches errno (except fail_nomem,
// the malloc family's failure) or goes through a
// libc wrapper another preload could hook (jemalloc#329, #443): every call is a raw
// syscall instruction, so free() preserves errno even when it unmaps memory, and the
// functions are safe before libc's constructors ran and inside a forked child.
// Diagnostics format into a stack buffer; they never allocate.
#pragma once

#include <cstddef>
#include <cstdint>

// For globals read on the fast paths: declared hidden, they are loaded straight
// from their address instead of through the GOT (-fvisibility=hidden covers only
// definitions).
#define USLAB_HIDDEN __attribute__((visibility("hidden")))

// For the big zero-filled arrays indexed by shard or class (page heaps, central
// lists, depots, the page map's root), which a process touches a few pages of: in
// .lbss, after .bss, so that the small globals every process reads and writes at
// start-up share a few pages instead of being spread over 4 MiB between them (each
// page an anonymous fault of its own, paid by every process under a system-wide
// preload). Clang before 17 does not know .lbss as a zero section and stores it in
// the file (PROGBITS: 4 MiB of zeros, file-backed pages): there they stay in .bss.
// So does GCC for aarch64, whose linker knows .lbss only for x86-64's medium model
// (PROGBITS, before .bss, outside the bounds advised off huge pages): there they go
// to .bss.uslab_large (NOBITS), which libuslab.so's link puts after .bss
// (core/platform/large_zero.ld); a static link takes them among its small globals.
#if defined(__clang__) && __clang_major__ < 17
#define USLAB_LARGE_ZERO
#elif defined(__aarch64__)
#define USLAB_LARGE_ZERO __attribute__((section(".bss.uslab_large")))
#else
#define USLAB_LARGE_ZERO __attribute__((section(".lbss")))
#endif

// For the functions every process runs at start-up and exit (the constructor's
// callees, the exit report's and profile's tests): in .text.startup, which the linker
// puts at the start of the text beside the constructor and destructor. A read fault
// maps a file's pages around it 64 KiB at a time, so a process that allocates
// nothing (/bin/true under a system-wide preload) faults one window of the text in,
// not two (bench/RESULTS.md, startup).
#define USLAB_STARTUP_TEXT __attribute__((section(".text.startup")))
// For the strings that start-up reads (environment variable names, the symbols the
// constructor asks dlsym for): in .data, whose pages ld.so has written by then
// (relocations), not in .rodata, a window of its own that a process allocating
// nothing would otherwise fault in for a few names.
#define USLAB_STARTUP_STRING(name, text) char name[] = text

namespace uslab::os {

// Raw syscall; returns -errno on failure, never touches errno.
long syscall6(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0);
// A membarrier command, tried again while the kernel answers as one short of memory
// would (ENOMEM: a fence or a registration allocates a CPU mask; EAGAIN, EINTR), up
// to about 50 ms; its result, or the last error (a filter's EPERM, a CPU that is
// gone: EINVAL).
long membarrier(int cmd, unsigned flags, int cpu);
// The system calls uslab makes that were answered EPERM or ENOSYS since start (what a
// sandbox's seccomp filter answers; ENOSYS also from an older kernel): a bit per
// name of refused_call_name's list, for the statistics.
struct RefusedCalls {
  uint32_t eperm, enosys;
  // "EPERM" or "ENOSYS" for bit i, nullptr when that call was not refused.
  const char* error(unsigned i) const;
};
RefusedCalls refused_calls();
// The name of bit i of RefusedCalls; nullptr past the last.
const char* refused_call_name(unsigned i);

// The OS page: the kernel's (AT_PAGESZ: 4 KiB on x86-64; 4, 16 or 64 KiB on arm64),
// or the larger one the os_page option asks for (config.h), fixed by config_init
// before anything maps memory and read-only after. Every page-granular call here
// (purge, protect, populate, guard_region, advise_huge, resident_bytes, bind_node)
// takes ranges aligned to it: the kernel refuses an unaligned start, and rounds an
// unaligned length up over whatever follows (a purge would wipe a neighbour's data).
// uslab's own page (kPageSize, 8 KiB) may be smaller; page_heap.h says what then.
size_t page_size();
inline uintptr_t page_down(uintptr_t a) { return a & ~(uintptr_t)(page_size() - 1); }
inline uintptr_t page_up(uintptr_t a) { return page_down(a + page_size() - 1); }
inline bool page_aligned(uintptr_t a) { return (a & (page_size() - 1)) == 0; }
// The kernel's page (AT_PAGESZ), whatever os_page says: what other code aligns to.
size_t kernel_page_size();
// Called once by config_init: the kernel's page, or `at_least` when that is a
// larger power of two up to kMaxOsPage (the option's check); the page size chosen.
size_t set_page_size(size_t at_least);
constexpr size_t kMaxOsPage = size_t{64} << 10;

// Anonymous private read/write mapping; nullptr on failure.
void* map(size_t bytes);
// A private mapping of `bytes` of a new memfd called `name`, which /proc/PID/maps
// shows ("/memfd:NAME (deleted)"): pages read as zero and cost nothing until
// written. The descriptor is closed before it returns. nullptr on failure (no
// memfd_create before Linux 3.17, or a seccomp filter).
void* map_named(const char* name, size_t bytes);
// A mapping for uslab's own metadata (descriptors, page-map leaves, CPU regions),
// advised MADV_NOHUGEPAGE: under the system's THP setting "always", a touched page
// of a mapping (or of neighbours the kernel merged it with) that spans an aligned
// 2 MiB made the whole 2 MiB resident.
void* map_metadata(size_t bytes);
// This object's zero-filled data (.bss and the 3.7 MiB of arrays in .lbss) advised
// MADV_NOHUGEPAGE, before the heap touches it: under THP "always" the first touch
// gave every process a 2 MiB huge page there (RSS 2 MiB above the heap it used).
void advise_bss_small_pages();
// Mapping of `bytes` whose start is aligned to `align` (a power of two ≥ page size).
void* map_aligned(size_t bytes, size_t align);
void unmap(void* p, size_t bytes);
// mremap: the mapping at p (old_bytes) resized to new_bytes where it is (true when the
// address space after it was free, or when it shrinks), or moved to `to`, a mapping
// of new_bytes it replaces (MREMAP_FIXED: pages move, nothing is copied).
bool remap_in_place(void* p, size_t old_bytes, size_t new_bytes);
bool remap_to(void* p, size_t old_bytes, size_t new_bytes, void* to);
// After a failed remap_to onto a range of ours: Linux may have unmapped the
// destination before failing, and another thread may have mapped there since. Unmaps
// the range only if nothing is mapped there now (claimed first with
// MAP_FIXED_NOREPLACE); a range still ours but partly mapped is left (address space
// only, never touched).
void unmap_if_unclaimed(void* p, size_t bytes);
// Gives the pages of [p, p + bytes) back to the OS (madvise MADV_DONTNEED): they read
// as zero when next touched. False when the kernel refused: locked pages (mlock,
// mlockall with MCL_FUTURE: EINVAL), a seccomp filter; they keep their contents then.
bool purge(void* p, size_t bytes);
// purge, and where the kernel refuses, zeros written instead: for memory whose users
// count on reading zeros after a purge (the page heap's clean spans, the page map,
// per-CPU slots, descriptor pages). False when the pages stay resident.
bool purge_zeroing(void* p, size_t bytes);
// Bytes of purges the kernel refused since start (the statistics).
size_t purge_refused_bytes();
// Backs the pages overlapping [p, p + bytes) with writable memory now
// (MADV_POPULATE_WRITE, Linux 5.14; nothing where the kernel lacks it), without
// changing their contents. For metadata that would otherwise be read before it is
// written: see core/alloc/first_touch.h for what that costs.
void populate(const void* p, size_t bytes);
// mprotect: read/write, or no access at all (guard pages); false when refused (the
// kernel's limit on mappings, vm.max_map_count, counts every split).
bool protect(void* p, size_t bytes, bool accessible);
// Replaces the whole OS pages inside [p, p + bytes), which must hold zeros that no
// one writes meanwhile, with read-only zero pages (a new private mapping over them):
// strict overcommit charges a writable private page whether it is touched or not, a
// read-only one not at all. Readers still read zeros.
bool uncharge_zero(void* p, size_t bytes);
// Makes [p, p + bytes), whole OS pages that uncharge_zero left and no one wrote since,
// writable, and charged. False when the kernel refused for want of memory (ENOMEM:
// the commit limit, or vm.max_map_count); the pages stay read-only then. mprotect,
// which fails without changing anything: a new mapping over the pages would leave a
// hole where it fails at the limit (Linux before 6.12 unmaps first); a mapping only
// where mprotect is refused otherwise (a filter).
bool charge_zero(void* p, size_t bytes);
// Guard regions (madvise MADV_GUARD_INSTALL / MADV_GUARD_REMOVE, Linux 6.13): pages
// of a private anonymous mapping marked in its page tables so that any access faults
// (SIGSEGV), with no mapping split; installing drops what the pages held, removing
// leaves them reading as zero. False where the kernel lacks them (EINVAL).
bool guard_region(void* p, size_t bytes, bool install);
// 64 random bits (getrandom, not blocking; a mix of the clock otherwise), never 0.
uint64_t random_u64();
// Transparent huge pages: the system's setting (/sys/kernel/mm/transparent_hugepage/
// enabled, read once), and madvise(MADV_HUGEPAGE or MADV_NOHUGEPAGE) on a range.
enum class ThpMode : uint8_t { kNever, kMadvise, kAlways };
ThpMode thp_mode();
const char* thp_mode_name(ThpMode m);  // "never", "madvise", "always"
bool advise_huge(void* p, size_t bytes, bool huge);
// madvise(MADV_COLLAPSE) on a range (Linux 6.1+): its resident pages copied into huge
// pages now, where khugepaged would take its time. 0, or the error: EINVAL on a kernel
// without it, EAGAIN or ENOMEM when no huge page could be had.
int collapse(void* p, size_t bytes);
// The transparent huge page: a page table's worth of pages (2 MiB with 4 KiB pages,
// 32 MiB with 16 KiB, 512 MiB with 64 KiB).
inline size_t huge_page_bytes() { return page_size() / sizeof(void*) * page_size(); }
// Bytes of this process's anonymous memory in transparent huge pages (AnonHugePages
// of /proc/self/smaps_rollup), or -1 where the file cannot be read. The kernel walks
// every mapping to answer: statistics call it when asked, never a hot path.
long thp_resident_bytes();
// How many bytes of [p, p + bytes) (page-aligned, at most 4 MiB) are resident
// (mincore; under a seccomp filter, /proc/self/pagemap: see os.cc); 0 when the
// kernel refuses.
size_t resident_bytes(const void* p, size_t bytes);
// The same from /proc/self/pagemap's present bits (readable without privileges: only
// the frame numbers are hidden); 0 when it cannot be read.
size_t resident_bytes_pagemap(const void* p, size_t bytes);
// Whether a seccomp filter is in force on the calling thread (the Seccomp line of
// its status); an unreadable status counts as filtered (a sandbox may refuse the open).
bool seccomp_filtered();

// Asks the kernel to place the pages of [p, p + bytes) on NUMA node `node`
// (mbind, MPOL_PREFERRED: another node when that one is full, never an OOM); false
// when the kernel refuses (no such node, no NUMA support).
bool bind_node(void* p, size_t bytes, unsigned node);
// Whether the process runs under a memory policy of its own (numactl --membind,
// --interleave, --preferred; set_mempolicy): get_mempolicy's mode is neither
// MPOL_DEFAULT nor MPOL_LOCAL. A range's policy (bind_node) overrides the process's,
// so uslab binds nothing then, and the kernel applies the policy the user chose.
bool task_memory_policy();
// Whether path exists (an O_PATH open).
bool path_exists(const char* path);
// NUMA nodes whose memory this process may use (get_mempolicy, MPOL_F_MEMS_ALLOWED:
// one system call, no file); 0 when the kernel does not say.
unsigned allowed_nodes();
// Set bits of w (a loop: libuslab.so links libc alone, no libgcc popcount).
inline unsigned bit_count(uint64_t w) {
  unsigned n = 0;
  for (; w; w &= w - 1) n++;
  return n;
}

void futex_wait(const uint32_t* addr, uint32_t expected);
// The same for at most timeout_ms (an interrupted or timed-out wait just returns).
void futex_wait_ms(const uint32_t* addr, uint32_t expected, uint64_t timeout_ms);
void futex_wake(const uint32_t* addr, int count);

uint64_t now_ms();
uint64_t now_ns();
// Sleeps about ns nanoseconds (an interrupted sleep just returns early).
void sleep_ns(uint64_t ns);

// Copies n bytes of this process's memory at `at` into out with process_vm_readv:
// false where any of it is not mapped readable, instead of a fault (addresses that
// only might be pointers: the heap profiler's call-site decoding, foreign blocks).
bool read_memory(uintptr_t at, void* out, size_t n);
// Read up to `cap` bytes of a file into `buf` with raw syscalls; returns length or -1.
long read_file(const char* path, char* buf, size_t cap);
// Whether the calling thread is the process's last live one (/proc/self/stat): alone,
// or beside the thread group's leader, exited and waiting as a zombie for the rest of
// the group. False where the file cannot be read.
bool last_live_thread();
// Whether every writable mapping counts against a limit, pages written or not: strict
// overcommit (vm.overcommit_memory=2, MAP_NORESERVE ignored) or an address-space
// rlimit (RLIMIT_AS). Read once, on the first call (a large allocation's).
bool mappings_counted();
// Calls fn(line, len, arg) for each line of a file (without its newline; lines
// longer than 1 KiB are cut there), read with raw syscalls through a small window, so
// files of any length (mountinfo) need no big buffer; stops early when fn returns
// false. False when the file cannot be opened.
bool for_each_line(const char* path, bool (*fn)(const char* line, size_t len, void* arg),
                   void* arg);

void write_fd(int fd, const char* s, size_t n);
void write_stderr(const char* s, size_t n);
// A close-on-exec duplicate of fd numbered 100 or above (-1 on failure).
int dup_high(int fd);

// Tiny allocation-free formatter: %s %d %u %zu %p %x (with optional 'l'/'z' width).
size_t format(char* out, size_t cap, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
size_t vformat(char* out, size_t cap, const char* fmt, __builtin_va_list ap);
void print_stderr(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// USLAB_DCHECK(cond): an invariant the headers state, checked in debug-check builds
// (meson -Ddebug_checks=true: the sanitizer and fuzz builds), which report the
// condition and abort; in release builds cond is not evaluated.
#if USLAB_DEBUG_CHECKS
#define USLAB_DCHECK(cond) \
  ((cond) ? (void)0        \
          : ::uslab::os::fatal("uslab: check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__))
#else
#define USLAB_DCHECK(cond) ((void)sizeof(!(cond)))
#endif

// Sets errno = ENOMEM and returns nullptr: how every allocation path fails.
void* fail_nomem();


// Bits of a user-space address: x86-64's 4-level page tables give 47; arm64's kernels
// map user space below 2^48 (mmap stays there on 52-bit kernels unless asked above),
// with mappings near its top, so tables indexed by address need all 48.
#if defined(__aarch64__)
constexpr unsigned kUserAddressBits = 48;
#else
constexpr unsigned kUserAddressBits = 47;
#endif

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

}  // namespace uslab::os
