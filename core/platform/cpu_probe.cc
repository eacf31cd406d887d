// core/platform/cpu_probe.cc — sysfs and affinity probes; see cpu_probe.h.
#include "core/platform/cpu_probe.h"

#include <sys/syscall.h>

#include "core/platform/os.h"

namespace uslab {

uint32_t cpulist_span(const char* s) {
  uint32_t span = 0;
  while (*s && *s != '\n') {
    if (*s < '0' || *s > '9') return 0;
    uint32_t a = 0;
    while (*s >= '0' && *s <= '9') a = a * 10 + static_cast<uint32_t>(*s++ - '0');
    uint32_t b = a;
    if (*s == '-') {
      s++;
      if (*s < '0' || *s > '9') return 0;
      b = 0;
      while (*s >= '0' && *s <= '9') b = b * 10 + static_cast<uint32_t>(*s++ - '0');
    }
    if (b < a || b >= (1u << 20)) return 0;
    if (b + 1 > span) span = b + 1;
    if (*s == ',') s++;
  }
  return span;
}

uint32_t possible_cpus() {
  char buf[256];
  long n = os::read_file("/sys/devices/system/cpu/possible", buf, sizeof buf - 1);
  if (n > 0) {
    buf[n] = 0;
    if (uint32_t span = cpulist_span(buf)) return span;
  }
  // No sysfs: the affinity mask (the kernel returns the mask size it used).
  uint64_t mask[128] = {};
  long r = os::syscall6(SYS_sched_getaffinity, 0, sizeof mask, reinterpret_cast<long>(mask));
  uint32_t span = 1;
  for (long w = 0; r > 0 && w < r / 8; w++)
    if (mask[w]) span = static_cast<uint32_t>(w * 64 + 64 - __builtin_clzll(mask[w]));
  return span;
}

size_t l2_cache_bytes() {
  char path[96], buf[64];
  for (int i = 0; i < 8; i++) {
    os::format(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    long n = os::read_file(path, buf, sizeof buf - 1);
    if (n <= 0) break;
    if (buf[0] != '2') continue;
    os::format(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    n = os::read_file(path, buf, sizeof buf - 1);
    if (n <= 0) return 0;
    buf[n] = 0;
    size_t v = 0;
    const char* s = buf;
    while (*s >= '0' && *s <= '9') v = v * 10 + static_cast<size_t>(*s++ - '0');
    if (*s == 'K') v <<= 10;
    else if (*s == 'M') v <<= 20;
    return v;
  }
  return 0;
}

}  // namespace uslab
