// core/platform/topology.h — what the machine looks like: CPUs, NUMA nodes, caches.
//
// Owns: the Topology record and its two providers, which must give the same answer
// (test/unit/topology_test.cc checks that they do on the machine it runs on):
//  - the probe (topology_probe.cc): sysfs read with raw syscalls, sched_getaffinity
//    and cpuid; no malloc, no libc wrapper, safe before constructors. Its basic form
//    (possible CPUs, the NUMA nodes and CPU → node map) is what start-up pays: two
//    small sysfs reads on a machine with one node. Cache sizes come separately, from
//    cpuid, when the first allocation sizes the per-CPU caches (in a VM each cpuid
//    traps: a cost a process that never allocates, /bin/true, does not pay). The full form adds the cache sizes, the online and allowed CPUs
//    and how many CPUs share each cache, for `uslab topology`, the stats and the
//    agreement test.
//  - hwloc (topology_hwloc.cc), loaded with dlopen only when asked for, so that
//    libuslab.so never needs it to load. hwloc costs milliseconds and allocates
//    through the process's malloc, so the allocator runs it only from its
//    constructor, never from inside an allocation. HWLOC_SYNTHETIC makes it describe
//    a made-up machine ("pack:2 numa:2 core:8 pu:2"): how the tests exercise the
//    multi-node logic on a machine with one node.
//
// Locking: none; each provider fills the record its caller owns.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uslab {

constexpr uint32_t kTopoMaxCpus = 4096;  // CPU ids at or above are given node 0
constexpr uint32_t kTopoMaxNodes = 64;   // node ids at or above fold onto these

struct CacheInfo {
  uint64_t bytes;        // 0: unknown
  uint32_t shared_cpus;  // CPUs sharing one instance; 0: unknown (basic probe)
};

struct Topology {
  uint32_t cpus_possible;          // highest possible CPU id + 1 (at least 1)
  uint32_t cpus_online;            // 0: unknown (basic probe)
  uint32_t cpus_allowed;           // in this process's affinity mask; 0: unknown
  uint32_t nodes;                  // highest NUMA node id + 1 (at least 1)
  CacheInfo l1d, l2, l3;           // of the lowest online CPU
  bool synthetic;                  // hwloc's HWLOC_SYNTHETIC: the nodes do not exist (no mbind)
  char source[24];                 // "probe", "probe (full)", "hwloc", "hwloc synthetic"
  uint8_t cpu_node[kTopoMaxCpus];  // node of each CPU id below cpus_possible

  uint32_t node_of(uint32_t cpu) const { return cpu < kTopoMaxCpus ? cpu_node[cpu] : 0; }
  // CPUs (ids below cpus_possible) of node n.
  uint32_t cpus_of_node(uint32_t n) const;
};

// Whether cpuid names the vendor GenuineIntel (the per-CPU fast paths' addressing
// depends on it: percpu_rseq.h).
bool cpu_is_intel();

// The probe: `full` adds the caches, online/allowed CPUs and cache sharing.
void topology_probe(Topology* t, bool full);
// Fills t's cache sizes as CPU `cpu` sees them (cpuid, else sysfs) and, with
// `sharing`, how many CPUs share each (sysfs).
void topology_probe_caches(Topology* t, uint32_t cpu, bool sharing);

// hwloc, loaded with dlopen (never from inside an allocation): false with the reason
// in `why` when the library is missing, of another major version, or fails to load.
bool topology_hwloc(Topology* t, char* why, size_t cap);

// Describes where a and b differ (fields one of them does not know are skipped);
// returns the length written, 0 when they agree.
size_t topology_diff(const Topology& a, const Topology& b, char* out, size_t cap);

// One paragraph (several lines) describing t, for `uslab topology` and the stats.
size_t topology_format(const Topology& t, char* out, size_t cap);

// Parses a sysfs CPU or node list ("0-3,8,10-11"): calls fn(id) for each id below
// `limit`; returns the highest id + 1, or 0 on bad input.
uint32_t cpulist_parse(const char* text, uint32_t limit, void (*fn)(uint32_t id, void* arg),
                       void* arg);
// The same without a callback: the highest id + 1, or 0 on bad input.
uint32_t cpulist_span(const char* text);

// The kernel's possible CPU ids (/sys/devices/system/cpu/possible): the highest + 1,
// 0 when unknown. It counts CPUs that are not present yet (hot-pluggable), which hwloc
// does not see.
uint32_t kernel_possible_cpus();

}  // namespace uslab
