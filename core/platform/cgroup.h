// core/platform/cgroup.h — the memory limit of the process's control group.
//
// Owns: finding the memory controller's directory of this process (its line in
// /proc/self/cgroup, the mount point and mount root in /proc/self/mountinfo: under a
// cgroup namespace or a hybrid v1/v2 layout the path differs from
// /sys/fs/cgroup/<path>) and reading the limit there and in every ancestor up to the
// mount's root (a parent's limit binds its children): cgroup v2 memory.max and
// memory.high ("max": none), v1 memory.limit_in_bytes (its "none" is a huge number).
// The lowest one wins.
//
// Rules: raw system calls only (os.h), no allocation; read once, by the memory limit
// (core/alloc/memory_limit.h). The file names can be pointed at fixtures (tests).
#pragma once

#include <cstddef>
#include <cstdint>

namespace uslab::os {

struct CgroupFiles {
  const char* proc_cgroup = "/proc/self/cgroup";
  const char* mountinfo = "/proc/self/mountinfo";
  const char* prefix = "";  // put before every path under a mount point (fixtures)
};

struct CgroupLimit {
  uint64_t bytes;  // the lowest limit found (0: none)
  int version;     // 1 or 2 (0: no memory controller found)
  char file[256];  // the file that set it (with the prefix)
};

// The limit of this process's memory controller; false when none can be found (no
// controller mounted, files unreadable). out->bytes is 0 when no level sets one.
bool cgroup_memory_limit(const CgroupFiles& files, CgroupLimit* out);

}  // namespace uslab::os
