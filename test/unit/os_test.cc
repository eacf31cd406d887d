// core/platform/os.h: the raw mapping calls' contracts the segments rely on.
#include <catch2/catch.hpp>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/core.h"

using namespace uslab;

namespace {
// Whether the page at p is mapped (mincore fails with ENOMEM on an unmapped range).
bool mapped(void* p) {
  unsigned char v;
  return mincore(p, os::kernel_page_size(), &v) == 0;
}
}  // namespace

TEST_CASE("a failed move's destination is unmapped only when nobody mapped it since") {
  const size_t bytes = size_t{4} << 20;
  char* p = static_cast<char*>(os::map_aligned(bytes, bytes));
  REQUIRE(p != nullptr);
  // Unmapped already (as a failed MREMAP_FIXED leaves it) and free: claimed, released.
  os::unmap(p, bytes);
  os::unmap_if_unclaimed(p, bytes);
  CHECK_FALSE(mapped(p));
  // Mapped again by someone else meanwhile: left alone, contents kept.
  void* other = mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  REQUIRE(other == p);
  p[100] = 42;
  os::unmap_if_unclaimed(p, bytes);
  REQUIRE(mapped(p));
  CHECK(p[100] == 42);
  munmap(p, bytes);
}

TEST_CASE("resident bytes read from the page map agree with mincore's", "[kernel]") {
  // Under a seccomp filter the page map answers (mincore is outside systemd's
  // @system-service set): both must count the pages the program touched, no more.
  const size_t page = os::kernel_page_size();
  const size_t bytes = 256 * page;
  char* p = static_cast<char*>(os::map(bytes));
  REQUIRE(p != nullptr);
  for (size_t i = 0; i < 256; i += 3) p[i * page] = 1;  // 86 of 256 pages
  const size_t touched = 86 * page;
  CHECK(os::resident_bytes(p, bytes) == touched);
  CHECK(os::resident_bytes_pagemap(p, bytes) == touched);
  CHECK(os::resident_bytes_pagemap(p + 128 * page, 128 * page) == 43 * page);
  REQUIRE(madvise(p, bytes, MADV_DONTNEED) == 0);
  CHECK(os::resident_bytes_pagemap(p, bytes) == 0);
  os::unmap(p, bytes);
}

TEST_CASE("system calls a seccomp filter refuses are named for the statistics", "[kernel]") {
  // In a child (a filter cannot be lifted): membarrier answered ENOSYS and mbind EPERM,
  // as gVisor and Docker's profile answer them; getpid, not in the list, refused too.
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_membarrier, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mbind, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      _exit(2);
    const os::RefusedCalls before = os::refused_calls();
    bool ok = os::syscall6(SYS_membarrier, 0, 0, 0) == -ENOSYS &&
              os::syscall6(SYS_mbind, 0, 4096, 0, 0, 0, 0) == -EPERM &&
              os::syscall6(SYS_getppid) == -EPERM;
    const os::RefusedCalls after = os::refused_calls();
    uint32_t eperm = 0, enosys = 0;
    for (unsigned i = 0; const char* name = os::refused_call_name(i); i++) {
      if (!strcmp(name, "mbind")) eperm |= 1u << i;
      if (!strcmp(name, "membarrier")) enosys |= 1u << i;
    }
    ok = ok && eperm && enosys && (after.eperm & ~before.eperm) == eperm &&
         (after.enosys & ~before.enosys) == enosys;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 2: no filter could be installed here
}

TEST_CASE("a purge the kernel refuses leaves the contents, or zeros them when asked", "[kernel]") {
  // madvise refused (as on locked pages): purge reports it and counts it;
  // purge_zeroing writes the zeros the callers count on.
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const size_t page = os::page_size();
    char* p = static_cast<char*>(os::map(2 * page));
    if (!p) _exit(3);
    memset(p, 0x5a, 2 * page);
    sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      _exit(2);
    const size_t before = os::purge_refused_bytes();
    bool ok = !os::purge(p, page) && p[0] == 0x5a && p[page - 1] == 0x5a;
    ok = ok && !os::purge_zeroing(p + page, page) && p[page] == 0 && p[2 * page - 1] == 0;
    ok = ok && os::purge_refused_bytes() - before == 2 * page;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 2: no filter could be installed here
}
