// test/unit/vm_flags.h — the kernel's flags of a mapping, for the unit tests that
// check what uslab advised (madvise) on its memory.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// The VmFlags line of the mapping holding p in /proc/self/smaps ("hg": advised
// MADV_HUGEPAGE, "nh": MADV_NOHUGEPAGE); "" when no mapping holds it.
inline std::string vm_flags(const void* p) {
  FILE* f = fopen("/proc/self/smaps", "r");
  REQUIRE(f != nullptr);
  char line[512];
  bool inside = false;
  std::string flags;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      inside = lo <= a && a < hi;
    } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      flags = line + 8;
      flags.resize(flags.find('\n') == std::string::npos ? flags.size() : flags.find('\n'));
      break;
    }
  }
  fclose(f);
  return flags;
}

// A "Name:  N kB" field of the mapping holding p in /proc/self/smaps (e.g.
// "AnonHugePages"), in KiB; -1 when no mapping holds it.
inline long smaps_kib(const void* p, const char* name) {
  FILE* f = fopen("/proc/self/smaps", "r");
  REQUIRE(f != nullptr);
  char line[512];
  bool inside = false;
  long kib = -1;
  const size_t len = strlen(name);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      inside = lo <= a && a < hi;
    } else if (inside && strncmp(line, name, len) == 0 && line[len] == ':') {
      kib = strtol(line + len + 1, nullptr, 10);
      break;
    }
  }
  fclose(f);
  return kib;
}

inline bool has_flag(const std::string& flags, const char* f) {
  return (" " + flags + " ").find(std::string(" ") + f + " ") != std::string::npos;
}
