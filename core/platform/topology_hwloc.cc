// core/platform/topology_hwloc.cc — the hwloc provider of the topology; see
// topology.h.
//
// hwloc is opened with dlopen (libhwloc.so.15, hwloc 2.x) and its entry points are
// looked up by name, so libuslab.so has no link-time dependency on it; hwloc.h is
// used at build time only, for the object layout, and the library's major API
// version is checked against it before anything is read. hwloc.h's inline helpers
// are not used (they would reference the library's symbols directly): the walks
// below use the exported functions only. The library stays loaded afterwards
// (unloading it would run its destructors while the process may still use its
// plugins' memory).
//
// Built with USLAB_NO_HWLOC (the Rust crate's default: no hwloc header needed), the
// provider says so and the probe's topology is used.
//
// Locking: none; called only from the allocator's constructor and from tools.
#include "core/platform/os.h"
#include "core/platform/topology.h"

#if USLAB_NO_HWLOC
namespace uslab {
bool topology_hwloc(Topology* t, char* why, size_t cap) {
  *t = Topology{};
  os::format(why, cap, "uslab was built without hwloc");
  return false;
}
}  // namespace uslab
#else
#include <dlfcn.h>
#include <hwloc.h>

#include <cstring>

#include "core/platform/libc_calls.h"

namespace uslab {

namespace {

struct Hwloc {
  unsigned (*get_api_version)();
  int (*topology_init)(hwloc_topology_t*);
  int (*topology_set_flags)(hwloc_topology_t, unsigned long);
  int (*topology_load)(hwloc_topology_t);
  void (*topology_destroy)(hwloc_topology_t);
  int (*get_type_depth)(hwloc_topology_t, hwloc_obj_type_t);
  unsigned (*get_nbobjs_by_depth)(hwloc_topology_t, int);
  hwloc_obj_t (*get_obj_by_depth)(hwloc_topology_t, int, unsigned);
  hwloc_const_cpuset_t (*topology_get_complete_cpuset)(hwloc_topology_t);
  int (*get_cpubind)(hwloc_topology_t, hwloc_cpuset_t, int);
  hwloc_bitmap_t (*bitmap_alloc)();
  void (*bitmap_free)(hwloc_bitmap_t);
  int (*bitmap_first)(hwloc_const_bitmap_t);
  int (*bitmap_next)(hwloc_const_bitmap_t, int);
  int (*bitmap_last)(hwloc_const_bitmap_t);
  int (*bitmap_weight)(hwloc_const_bitmap_t);
};

template <typename F>
bool resolve(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(libc::dl_sym(lib, name));
  return *fn != nullptr;
}

bool open_hwloc(Hwloc* h, char* why, size_t cap) {
  if (libc::static_binary()) {
    os::format(why, cap, "a static binary loads no libhwloc.so.15");
    return false;
  }
  void* lib = libc::dl_open("libhwloc.so.15", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    os::format(why, cap, "libhwloc.so.15 not found (Debian package libhwloc15)");
    return false;
  }
  bool ok = resolve(lib, "hwloc_get_api_version", &h->get_api_version) &&
            resolve(lib, "hwloc_topology_init", &h->topology_init) &&
            resolve(lib, "hwloc_topology_set_flags", &h->topology_set_flags) &&
            resolve(lib, "hwloc_topology_load", &h->topology_load) &&
            resolve(lib, "hwloc_topology_destroy", &h->topology_destroy) &&
            resolve(lib, "hwloc_get_type_depth", &h->get_type_depth) &&
            resolve(lib, "hwloc_get_nbobjs_by_depth", &h->get_nbobjs_by_depth) &&
            resolve(lib, "hwloc_get_obj_by_depth", &h->get_obj_by_depth) &&
            resolve(lib, "hwloc_topology_get_complete_cpuset", &h->topology_get_complete_cpuset) &&
            resolve(lib, "hwloc_get_cpubind", &h->get_cpubind) &&
            resolve(lib, "hwloc_bitmap_alloc", &h->bitmap_alloc) &&
            resolve(lib, "hwloc_bitmap_free", &h->bitmap_free) &&
            resolve(lib, "hwloc_bitmap_first", &h->bitmap_first) &&
            resolve(lib, "hwloc_bitmap_next", &h->bitmap_next) &&
            resolve(lib, "hwloc_bitmap_last", &h->bitmap_last) &&
            resolve(lib, "hwloc_bitmap_weight", &h->bitmap_weight);
  if (!ok) {
    os::format(why, cap, "libhwloc.so.15 lacks a function uslab needs");
    return false;
  }
  unsigned v = h->get_api_version();
  if (v >> 16 != HWLOC_API_VERSION >> 16) {
    os::format(why, cap, "hwloc API version %x, uslab was built for %x", v,
               static_cast<unsigned>(HWLOC_API_VERSION));
    return false;
  }
  return true;
}

// The caches above PU `pu` (its ancestors), as the probe reports the lowest CPU's.
void fill_caches(const Hwloc& h, hwloc_obj_t pu, Topology* t) {
  for (hwloc_obj_t o = pu ? pu->parent : nullptr; o; o = o->parent) {
    CacheInfo* slot = o->type == HWLOC_OBJ_L1CACHE   ? &t->l1d
                      : o->type == HWLOC_OBJ_L2CACHE ? &t->l2
                      : o->type == HWLOC_OBJ_L3CACHE ? &t->l3
                                                     : nullptr;
    if (!slot || slot->bytes || o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION) continue;
    slot->bytes = o->attr->cache.size;
    slot->shared_cpus = static_cast<uint32_t>(h.bitmap_weight(o->cpuset));
  }
}

}  // namespace

bool topology_hwloc(Topology* t, char* why, size_t cap) {
  *t = Topology{};
  Hwloc h;
  if (!open_hwloc(&h, why, cap)) return false;
  hwloc_topology_t topo;
  if (h.topology_init(&topo) != 0) {
    os::format(why, cap, "hwloc_topology_init failed");
    return false;
  }
  // Disallowed PUs too: the probe reports possible CPUs and the affinity separately.
  h.topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (h.topology_load(topo) != 0) {
    h.topology_destroy(topo);
    os::format(why, cap, "hwloc_topology_load failed");
    return false;
  }
  hwloc_obj_t root = h.get_obj_by_depth(topo, 0, 0);
  for (unsigned i = 0; root && i < root->infos_count; i++)
    if (!strcmp(root->infos[i].name, "Backend") && !strcmp(root->infos[i].value, "Synthetic"))
      t->synthetic = true;
  os::format(t->source, sizeof t->source, "%s", t->synthetic ? "hwloc synthetic" : "hwloc");

  int last = h.bitmap_last(h.topology_get_complete_cpuset(topo));
  t->cpus_possible = last >= 0 ? static_cast<uint32_t>(last) + 1 : 1;
  // hwloc knows the present CPUs only; the kernel's possible ids include those that
  // may be plugged in later, which the tables indexed by CPU must cover (they stay
  // on node 0 until then, as the probe has them). Not for a synthetic machine.
  if (uint32_t possible = t->synthetic ? 0 : kernel_possible_cpus(); possible > t->cpus_possible)
    t->cpus_possible = possible;
  int pu_depth = h.get_type_depth(topo, HWLOC_OBJ_PU);
  unsigned npu = h.get_nbobjs_by_depth(topo, pu_depth);
  t->cpus_online = npu;
  // The process's binding (a synthetic topology has none: all its PUs).
  hwloc_bitmap_t bind = h.bitmap_alloc();
  if (bind && !t->synthetic && h.get_cpubind(topo, bind, HWLOC_CPUBIND_PROCESS) == 0)
    t->cpus_allowed = static_cast<uint32_t>(h.bitmap_weight(bind));
  else
    t->cpus_allowed = npu;
  if (bind) h.bitmap_free(bind);

  t->nodes = 1;
  unsigned nnodes = h.get_nbobjs_by_depth(topo, HWLOC_TYPE_DEPTH_NUMANODE);
  for (unsigned i = 0; i < nnodes; i++) {
    hwloc_obj_t node = h.get_obj_by_depth(topo, HWLOC_TYPE_DEPTH_NUMANODE, i);
    if (node->os_index + 1 > t->nodes) t->nodes = node->os_index + 1;
    for (int c = h.bitmap_first(node->cpuset); c >= 0; c = h.bitmap_next(node->cpuset, c))
      if (static_cast<uint32_t>(c) < kTopoMaxCpus)
        t->cpu_node[c] = static_cast<uint8_t>(node->os_index % kTopoMaxNodes);
  }
  if (t->nodes > kTopoMaxNodes) t->nodes = kTopoMaxNodes;

  hwloc_obj_t lowest = nullptr;
  for (unsigned i = 0; i < npu; i++) {
    hwloc_obj_t pu = h.get_obj_by_depth(topo, pu_depth, i);
    if (!lowest || pu->os_index < lowest->os_index) lowest = pu;
  }
  fill_caches(h, lowest, t);
  h.topology_destroy(topo);
  return true;
}

}  // namespace uslab
#endif  // USLAB_NO_HWLOC
