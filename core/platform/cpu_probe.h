// core/platform/cpu_probe.h — the cheap start-up probe of the machine's CPUs.
//
// Owns: the number of possible CPU ids and the per-CPU cache size, read from sysfs
// with raw syscalls (no stdio, no malloc; safe before constructors). The hwloc
// provider of the topology work must agree with these numbers.
//
// Locking: none; results are computed on each call (slow paths call them once).
#pragma once

#include <cstddef>
#include <cstdint>

namespace uslab {

// Highest possible CPU id + 1 (/sys/devices/system/cpu/possible, else the affinity
// mask's highest set bit + 1); at least 1.
uint32_t possible_cpus();

// Bytes of CPU 0's level-2 cache (sysfs cache/index*/ with level 2); 0 when unknown.
size_t l2_cache_bytes();

// Parses a sysfs CPU list ("0-3,8,10-11"): the highest id + 1, or 0 on bad input.
uint32_t cpulist_span(const char* text);

}  // namespace uslab
