// core/platform/topology_probe.cc — the cheap provider of the topology (sysfs,
// sched_getaffinity, cpuid), the record's helpers, and the CPU's vendor; see
// topology.h. The vendor is kept in one relaxed atomic byte: any thread may read it
// first, and all of them read the same answer from cpuid.
#include <sys/syscall.h>

#include <atomic>

#include "core/platform/os.h"
#include "core/platform/topology.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace uslab {

namespace {

// The vendor, once cpuid named it: 0 not yet, 1 Intel, 2 another. In a VM each
// cpuid traps (topology.h), and the cache probe reads the vendor anyway.
std::atomic<uint8_t> vendor_seen{0};

bool note_vendor(unsigned b, unsigned c, unsigned d) {
#if defined(__x86_64__) || defined(__i386__)
  bool intel = b == signature_INTEL_ebx && c == signature_INTEL_ecx && d == signature_INTEL_edx;
#else
  (void)b, (void)c, (void)d;
  bool intel = false;
#endif
  vendor_seen.store(intel ? 1 : 2, std::memory_order_relaxed);
  return intel;
}

}  // namespace

bool cpu_is_intel() {
  if (uint8_t v = vendor_seen.load(std::memory_order_relaxed)) return v == 1;
  unsigned a = 0, b = 0, c = 0, d = 0;
#if defined(__x86_64__) || defined(__i386__)
  __get_cpuid(0, &a, &b, &c, &d);
#endif
  (void)a;
  return note_vendor(b, c, d);
}

uint32_t cpulist_parse(const char* s, uint32_t limit, void (*fn)(uint32_t, void*), void* arg) {
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
    if (fn)
      for (uint32_t i = a; i <= b && i < limit; i++) fn(i, arg);
    if (*s == ',') s++;
  }
  return span;
}

uint32_t cpulist_span(const char* s) { return cpulist_parse(s, 0, nullptr, nullptr); }

uint32_t Topology::cpus_of_node(uint32_t n) const {
  uint32_t k = 0;
  for (uint32_t c = 0; c < cpus_possible && c < kTopoMaxCpus; c++) k += cpu_node[c] == n;
  return k;
}

namespace {

// A sysfs file as a NUL-terminated string; false when it cannot be read.
bool read_text(const char* path, char* buf, size_t cap) {
  long n = os::read_file(path, buf, cap - 1);
  if (n <= 0) return false;
  buf[n] = 0;
  return true;
}

uint32_t count_list(const char* text) {
  uint32_t n = 0;
  cpulist_parse(
      text, ~0u, [](uint32_t, void* arg) { ++*static_cast<uint32_t*>(arg); }, &n);
  return n;
}

// "32K", "1024K", "36608K", "2M" → bytes.
uint64_t parse_size(const char* s) {
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + static_cast<uint64_t>(*s++ - '0');
  if (*s == 'K')
    v <<= 10;
  else if (*s == 'M')
    v <<= 20;
  else if (*s == 'G')
    v <<= 30;
  return v;
}

CacheInfo* cache_slot(Topology* t, unsigned level, bool data_or_unified) {
  if (!data_or_unified) return nullptr;
  return level == 1 ? &t->l1d : level == 2 ? &t->l2 : level == 3 ? &t->l3 : nullptr;
}

// Cache sizes from cpuid's deterministic cache parameters (Intel leaf 4, AMD/Hygon
// 0x8000001D): the numbers the kernel's sysfs cacheinfo is built from, without a
// file read. False when the CPU has neither leaf.
bool cpuid_caches(Topology* t) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  unsigned max = a, leaf = 0;
  if (note_vendor(b, c, d) && max >= 4) {
    leaf = 4;
  } else if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x8000001D &&
             __get_cpuid(0x80000001, &a, &b, &c, &d) && (c >> 22 & 1)) {  // TOPOEXT
    leaf = 0x8000001D;
  }
  if (!leaf) return false;
  bool any = false;
  for (unsigned sub = 0; sub < 16; sub++) {
    __cpuid_count(leaf, sub, a, b, c, d);
    unsigned type = a & 31;  // 1 data, 2 instruction, 3 unified
    if (type == 0) break;
    CacheInfo* slot = cache_slot(t, a >> 5 & 7, type != 2);
    if (!slot) continue;
    slot->bytes = uint64_t{(b >> 22) + 1} * ((b >> 12 & 0x3ff) + 1) * ((b & 0xfff) + 1) * (c + 1);
    any = true;
  }
  return any;
#else
  (void)t;
  return false;
#endif
}

// The caches of CPU `cpu` from sysfs: sizes when `sizes`, sharing when `sharing`.
void sysfs_caches(Topology* t, uint32_t cpu, bool sizes, bool sharing) {
  char path[112], buf[4096];
  for (int i = 0; i < 16; i++) {
    os::format(path, sizeof path, "/sys/devices/system/cpu/cpu%u/cache/index%d/level", cpu, i);
    if (!read_text(path, buf, 16)) break;
    unsigned level = static_cast<unsigned>(buf[0] - '0');
    os::format(path, sizeof path, "/sys/devices/system/cpu/cpu%u/cache/index%d/type", cpu, i);
    if (!read_text(path, buf, 32)) continue;
    CacheInfo* slot = cache_slot(t, level, buf[0] != 'I');  // Data, Unified, Instruction
    if (!slot) continue;
    if (sizes) {
      os::format(path, sizeof path, "/sys/devices/system/cpu/cpu%u/cache/index%d/size", cpu, i);
      if (read_text(path, buf, 32)) slot->bytes = parse_size(buf);
    }
    if (sharing) {
      os::format(path, sizeof path, "/sys/devices/system/cpu/cpu%u/cache/index%d/shared_cpu_list",
                 cpu, i);
      if (read_text(path, buf, sizeof buf)) slot->shared_cpus = count_list(buf);
    }
  }
}

// The affinity mask: CPUs allowed, and the highest id + 1 (0 on failure).
uint32_t affinity(uint32_t* allowed) {
  uint64_t mask[kTopoMaxCpus / 64] = {};
  long r = os::syscall6(SYS_sched_getaffinity, 0, sizeof mask, reinterpret_cast<long>(mask));
  uint32_t span = 0, n = 0;
  for (long w = 0; r > 0 && w < r / 8; w++)
    if (mask[w]) {
      span = static_cast<uint32_t>(w * 64 + 64 - __builtin_clzll(mask[w]));
      n += os::bit_count(mask[w]);
    }
  *allowed = n;
  return span;
}

struct NodeFill {
  Topology* t;
  uint32_t node;
};

}  // namespace

uint32_t kernel_possible_cpus() {
  char buf[4096];
  return read_text("/sys/devices/system/cpu/possible", buf, sizeof buf) ? cpulist_span(buf) : 0;
}

void topology_probe(Topology* t, bool full) {
  *t = Topology{};
  os::format(t->source, sizeof t->source, "%s", full ? "probe (full)" : "probe");
  char buf[4096];
  uint32_t allowed = 0;
  t->cpus_possible = kernel_possible_cpus();
  if (!t->cpus_possible) t->cpus_possible = affinity(&allowed);  // no sysfs
  if (!t->cpus_possible) t->cpus_possible = 1;
  // Nodes: one read on a machine with one node ("0"), then one per node.
  t->nodes = 1;
  if (read_text("/sys/devices/system/node/online", buf, sizeof buf)) {
    uint32_t span = cpulist_span(buf);
    if (span > 1) {
      t->nodes = span;
      cpulist_parse(
          buf, ~0u,
          [](uint32_t node, void* arg) {
            char path[64], list[4096];
            os::format(path, sizeof path, "/sys/devices/system/node/node%u/cpulist", node);
            if (!read_text(path, list, sizeof list)) return;
            NodeFill f{static_cast<Topology*>(arg), node % kTopoMaxNodes};
            cpulist_parse(
                list, kTopoMaxCpus,
                [](uint32_t cpu, void* fa) {
                  auto* nf = static_cast<NodeFill*>(fa);
                  nf->t->cpu_node[cpu] = static_cast<uint8_t>(nf->node);
                },
                &f);
          },
          t);
    }
  }
  if (t->nodes > kTopoMaxNodes) t->nodes = kTopoMaxNodes;
  uint32_t first = 0;
  if (full) {
    if (read_text("/sys/devices/system/cpu/online", buf, sizeof buf)) {
      t->cpus_online = count_list(buf);
      for (const char* s = buf; *s >= '0' && *s <= '9'; s++)  // the lowest online CPU
        first = first * 10 + static_cast<uint32_t>(*s - '0');
    }
    affinity(&allowed);
    t->cpus_allowed = allowed;
  }
  if (full) topology_probe_caches(t, first, true);
}

void topology_probe_caches(Topology* t, uint32_t cpu, bool sharing) {
  if (!cpuid_caches(t)) sysfs_caches(t, cpu, true, false);
  if (sharing) sysfs_caches(t, cpu, false, true);
}

size_t topology_diff(const Topology& a, const Topology& b, char* out, size_t cap) {
  size_t len = 0;
  auto add = [&](const char* what, uint64_t x, uint64_t y) {
    if (x == y || len + 1 >= cap) return;
    len += os::format(out + len, cap - len, "%s%s: %lu vs %lu", len ? "; " : "", what,
                      static_cast<unsigned long>(x), static_cast<unsigned long>(y));
  };
  auto known = [&](const char* what, uint64_t x, uint64_t y) {
    if (x && y) add(what, x, y);
  };
  if (cap) out[0] = 0;
  add("possible CPUs", a.cpus_possible, b.cpus_possible);
  known("online CPUs", a.cpus_online, b.cpus_online);
  known("allowed CPUs", a.cpus_allowed, b.cpus_allowed);
  add("nodes", a.nodes, b.nodes);
  for (uint32_t c = 0; c < a.cpus_possible && c < kTopoMaxCpus; c++)
    if (a.cpu_node[c] != b.cpu_node[c]) {
      char what[32];
      os::format(what, sizeof what, "node of CPU %u", c);
      add(what, a.cpu_node[c], b.cpu_node[c]);
      break;
    }
  known("L1d bytes", a.l1d.bytes, b.l1d.bytes);
  known("L2 bytes", a.l2.bytes, b.l2.bytes);
  known("L3 bytes", a.l3.bytes, b.l3.bytes);
  known("CPUs sharing L1d", a.l1d.shared_cpus, b.l1d.shared_cpus);
  known("CPUs sharing L2", a.l2.shared_cpus, b.l2.shared_cpus);
  known("CPUs sharing L3", a.l3.shared_cpus, b.l3.shared_cpus);
  return len;
}

size_t topology_format(const Topology& t, char* out, size_t cap) {
  size_t len = os::format(out, cap, "  source: %s\n  CPUs: %u possible", t.source, t.cpus_possible);
  if (t.cpus_online) len += os::format(out + len, cap - len, ", %u online", t.cpus_online);
  if (t.cpus_allowed) len += os::format(out + len, cap - len, ", %u allowed", t.cpus_allowed);
  len += os::format(out + len, cap - len, "\n  NUMA nodes: %u%s\n", t.nodes,
                    t.synthetic ? " (synthetic)" : "");
  for (uint32_t n = 0; n < t.nodes && len + 1 < cap; n++) {
    // The node's CPUs as a list of ranges.
    len += os::format(out + len, cap - len, "    node %u: %u CPUs", n, t.cpus_of_node(n));
    const char* sep = " (";
    for (uint32_t c = 0; c < t.cpus_possible && c < kTopoMaxCpus && len + 1 < cap; c++) {
      if (t.cpu_node[c] != n || (c > 0 && t.cpu_node[c - 1] == n)) continue;
      uint32_t e = c;
      while (e + 1 < t.cpus_possible && e + 1 < kTopoMaxCpus && t.cpu_node[e + 1] == n) e++;
      len += e > c ? os::format(out + len, cap - len, "%s%u-%u", sep, c, e)
                   : os::format(out + len, cap - len, "%s%u", sep, c);
      sep = ",";
    }
    len += os::format(out + len, cap - len, "%s\n", sep[0] == ',' ? ")" : "");
  }
  const CacheInfo* caches[3] = {&t.l1d, &t.l2, &t.l3};
  const char* names[3] = {"L1d", "L2", "L3"};
  for (int i = 0; i < 3 && len + 1 < cap; i++) {
    len += os::format(out + len, cap - len, "  %s: ", names[i]);
    len += caches[i]->bytes ? os::format(out + len, cap - len, "%lu KiB",
                                         static_cast<unsigned long>(caches[i]->bytes >> 10))
                            : os::format(out + len, cap - len, "unknown");
    if (caches[i]->shared_cpus)
      len += os::format(out + len, cap - len, ", shared by %u CPU%s", caches[i]->shared_cpus,
                        caches[i]->shared_cpus == 1 ? "" : "s");
    len += os::format(out + len, cap - len, "\n");
  }
  return len < cap ? len : cap - 1;
}

}  // namespace uslab
