// test/unit/vm_flags.h — the kernel's flags of a mapping, for the unit tests that
// check what uslab advised (madvise) on its memory.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// The rest of the line that starts with `key` in the entry of the mapping holding p
// in /proc/self/smaps, without its newline; "" when no mapping holds p.
inline std::string smaps_line(const void* p, const char* key) {
  FILE* f = fopen("/proc/self/smaps", "r");
  REQUIRE(f != nullptr);
  char line[512];
  bool inside = false;
  std::string rest;
  const size_t len = strlen(key);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      inside = lo <= a && a < hi;
    } else if (inside && strncmp(line, key, len) == 0) {
      rest = line + len;
      rest.resize(rest.find('\n') == std::string::npos ? rest.size() : rest.find('\n'));
      break;
    }
  }
  fclose(f);
  return rest;
}

// The VmFlags line of the mapping holding p ("hg": advised MADV_HUGEPAGE, "nh":
// MADV_NOHUGEPAGE); "" when no mapping holds it.
inline std::string vm_flags(const void* p) { return smaps_line(p, "VmFlags:"); }

// A "Name:  N kB" field of the mapping holding p (e.g. "AnonHugePages"), in KiB; -1
// when no mapping holds it.
inline long smaps_kib(const void* p, const char* name) {
  std::string rest = smaps_line(p, (std::string(name) + ":").c_str());
  return rest.empty() ? -1 : strtol(rest.c_str(), nullptr, 10);
}

inline bool has_flag(const std::string& flags, const char* f) {
  return (" " + flags + " ").find(std::string(" ") + f + " ") != std::string::npos;
}
