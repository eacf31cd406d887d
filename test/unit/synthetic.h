// test/unit/synthetic.h — machines the tests make up: hwloc's synthetic topologies
// adopted as the allocator's map, and the map put back to this machine's after.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include "core/core.h"

// hwloc's view of a synthetic machine (HWLOC_SYNTHETIC is read when hwloc loads).
inline bool hwloc_synthetic(const char* description, uslab::Topology* t) {
  setenv("HWLOC_SYNTHETIC", description, 1);
  char why[160];
  bool ok = uslab::topology_hwloc(t, why, sizeof why);
  unsetenv("HWLOC_SYNTHETIC");
  INFO(why);
  return ok;
}

// Puts the map back to this machine's (the map's shard count stays: it only grows).
struct RestoreTopology {
  ~RestoreTopology() {
    static uslab::Topology here;  // 4 KiB: not on the stack
    uslab::topology_probe(&here, false);
    uslab::topology_adopt(here);
    uslab::percpu_nodes_changed();
  }
};

// At least two shards, for the tests that route objects between them: on a machine
// with one shard's CPUs, a synthetic machine of two shards' CPUs is adopted for a moment (the shard count
// only grows, so the second shard stays when the map goes back).
inline void ensure_two_shards() {
  if (uslab::shard_count() >= 2) return;
  static uslab::Topology two;
  char description[32];
  snprintf(description, sizeof description, "pu:%u", 2 * uslab::shard_cpus());
  REQUIRE(hwloc_synthetic(description, &two));
  {
    RestoreTopology restore;
    uslab::topology_adopt(two);
  }
  REQUIRE(uslab::shard_count() >= 2);
}

// Adopts a synthetic machine of k more shards than the map has, for a test that
// holds a RestoreTopology; false, with a warning, when kMaxShards leaves no room.
inline bool adopt_more_shards(unsigned k) {
  const unsigned before = uslab::shard_count();
  if (before + k > uslab::kMaxShards) {
    WARN("no room for more shards");
    return false;
  }
  static uslab::Topology more;  // 4 KiB: not on the stack
  char description[32];
  snprintf(description, sizeof description, "pu:%u", (before + k) * uslab::shard_cpus());
  REQUIRE(hwloc_synthetic(description, &more));
  uslab::topology_adopt(more);
  REQUIRE(uslab::shard_count() >= before + k);
  return true;
}
