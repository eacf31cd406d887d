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
#include "test/unit/filtered_child.h"

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
  // membarrier answered ENOSYS and mbind EPERM, as gVisor and Docker's profile answer
  // them; getppid, not in the list, refused too. 2: no filter could be installed here.
  CHECK(in_filtered_child({{SYS_membarrier, ENOSYS}, {SYS_mbind, EPERM}, {SYS_getppid, EPERM}}, [] {
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
          return ok && eperm && enosys && (after.eperm & ~before.eperm) == eperm &&
                 (after.enosys & ~before.enosys) == enosys;
        }) == 0);
}

TEST_CASE("a purge the kernel refuses leaves the contents, or zeros them when asked", "[kernel]") {
  // madvise refused (as on locked pages): purge reports it and counts it;
  // purge_zeroing writes the zeros the callers count on.
  CHECK(in_filtered_child({{SYS_madvise, EINVAL}}, [] {
          const size_t page = os::page_size();
          char* p = static_cast<char*>(os::map(2 * page));
          if (!p) return false;
          memset(p, 0x5a, 2 * page);
          const size_t before = os::purge_refused_bytes();
          bool ok = !os::purge(p, page) && p[0] == 0x5a && p[page - 1] == 0x5a;
          ok = ok && !os::purge_zeroing(p + page, page) && p[page] == 0 && p[2 * page - 1] == 0;
          return ok && os::purge_refused_bytes() - before == 2 * page;
        }) == 0);
}
