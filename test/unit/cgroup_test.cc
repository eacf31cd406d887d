// core/platform/cgroup.h: the control group's memory limit, read from fixture files
// laid out as the kernel shows them (cgroup v2, v1 in a hybrid layout, none), and
// from this machine. The limit's use is memory_limit_test.cc's.
#include <catch2/catch.hpp>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/core.h"

using namespace uslab;

namespace {

// A fixture tree in a temporary directory: /proc files and cgroup files under it.
struct Fixture {
  std::string dir;
  Fixture() {
    char tmpl[] = "/tmp/uslab-cgroup-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  // Removed in this process (nftw, deepest first): a shell spawned for `rm -rf` failed
  // to start under QEMU's user mode at 64 KiB pages once the tests had mapped much.
  ~Fixture() {
    auto remove_one = [](const char* path, const struct stat*, int, struct FTW*) {
      return remove(path);
    };
    REQUIRE(nftw(dir.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0);
  }
  void write(const std::string& rel, const std::string& text) {
    std::string path = dir + rel;
    for (size_t i = dir.size() + 1; (i = path.find('/', i)) != std::string::npos; i++)
      mkdir(path.substr(0, i).c_str(), 0755);
    FILE* f = fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    fputs(text.c_str(), f);
    fclose(f);
  }
  os::CgroupLimit read(bool* ok) {
    std::string cg = dir + "/proc/cgroup", mi = dir + "/proc/mountinfo";
    os::CgroupFiles files;
    files.proc_cgroup = cg.c_str();
    files.mountinfo = mi.c_str();
    files.prefix = dir.c_str();
    os::CgroupLimit l;
    *ok = os::cgroup_memory_limit(files, &l);
    return l;
  }
};

const char* kMountsV2 =
    "25 1 0:23 / /sys rw,nosuid - sysfs sysfs rw\n"
    "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
const char* kMountsHybrid =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

bool ends_with(const char* s, const char* tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && strcmp(s + a - b, tail) == 0;
}

}  // namespace

TEST_CASE("cgroup v2: memory.max of the namespace's root cgroup") {
  Fixture f;
  f.write("/proc/cgroup", "0::/\n");
  f.write("/proc/mountinfo", kMountsV2);
  f.write("/sys/fs/cgroup/memory.max", "1073741824\n");
  f.write("/sys/fs/cgroup/memory.high", "max\n");
  bool ok;
  os::CgroupLimit l = f.read(&ok);
  REQUIRE(ok);
  REQUIRE(l.version == 2);
  REQUIRE(l.bytes == (uint64_t{1} << 30));
  REQUIRE(ends_with(l.file, "/sys/fs/cgroup/memory.max"));
}

TEST_CASE("cgroup v2: the lowest of memory.max and memory.high along a nested path") {
  Fixture f;
  f.write("/proc/cgroup", "0::/a/b/c\n");
  f.write("/proc/mountinfo", kMountsV2);
  f.write("/sys/fs/cgroup/a/b/c/memory.max", "max\n");
  f.write("/sys/fs/cgroup/a/b/c/memory.high", "max\n");
  f.write("/sys/fs/cgroup/a/b/memory.max", "max\n");
  f.write("/sys/fs/cgroup/a/b/memory.high", "536870912\n");
  f.write("/sys/fs/cgroup/a/memory.max", "1073741824\n");
  bool ok;
  os::CgroupLimit l = f.read(&ok);
  REQUIRE(ok);
  REQUIRE(l.bytes == (uint64_t{512} << 20));
  REQUIRE(ends_with(l.file, "/sys/fs/cgroup/a/b/memory.high"));
}

TEST_CASE("cgroup v2: \"max\" everywhere is no limit") {
  Fixture f;
  f.write("/proc/cgroup", "0::/user.slice/session-1.scope\n");
  f.write("/proc/mountinfo", kMountsV2);
  f.write("/sys/fs/cgroup/user.slice/session-1.scope/memory.max", "max\n");
  f.write("/sys/fs/cgroup/user.slice/memory.max", "max\n");
  bool ok;
  os::CgroupLimit l = f.read(&ok);
  REQUIRE(ok);
  REQUIRE(l.version == 2);
  REQUIRE(l.bytes == 0);
}

TEST_CASE("cgroup v1 in a hybrid layout: memory.limit_in_bytes, its huge 'none' skipped") {
  Fixture f;
  f.write("/proc/cgroup", "9:name=systemd:/\n5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n");
  f.write("/proc/mountinfo", kMountsHybrid);
  f.write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "268435456\n");
  f.write("/sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "9223372036854771712\n");
  f.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  bool ok;
  os::CgroupLimit l = f.read(&ok);
  REQUIRE(ok);
  REQUIRE(l.version == 1);
  REQUIRE(l.bytes == (uint64_t{256} << 20));
  REQUIRE(ends_with(l.file, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes"));
}

TEST_CASE("cgroup v1: a mount of the process's own cgroup (its root is the cgroup's path)") {
  Fixture f;
  f.write("/proc/cgroup", "7:cpuset:/\n3:blkio,memory:/docker/abc\n");
  f.write("/proc/mountinfo",
          "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,blkio,memory\n");
  f.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "104857600\n");
  bool ok;
  os::CgroupLimit l = f.read(&ok);
  REQUIRE(ok);
  REQUIRE(l.bytes == (uint64_t{100} << 20));
}

TEST_CASE("no memory controller mounted: no limit found") {
  Fixture f;
  f.write("/proc/cgroup", "1:cpu:/\n");
  f.write("/proc/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
  bool ok;
  f.read(&ok);
  REQUIRE_FALSE(ok);
}

TEST_CASE("this machine's cgroup is read without error") {
  os::CgroupLimit l;
  if (os::cgroup_memory_limit(os::CgroupFiles{}, &l)) REQUIRE((l.version == 1 || l.version == 2));
}
