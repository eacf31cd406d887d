// core/alloc/first_touch.h: a shard's and a CPU's metadata are pages of their own,
// never the zero page, before anything reads them (checked through
// /proc/self/pagemap); the tables of shards not in use (shard.h), and the page map's
// root, are pages strict overcommit does not charge (/proc/self/smaps).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include "core/alloc/depot.h"
#include "core/alloc/first_touch.h"
#include "core/alloc/percpu.h"
#include "core/core.h"
#include "test/unit/own_ticks.h"
#include "test/unit/vm_flags.h"

using namespace uslab;

namespace {

// What /proc/self/pagemap says of the page holding p: present, and mapped by this
// process alone (bit 56). The shared zero page, which a read of a never-written
// anonymous page maps, is present but not exclusive.
struct PageState {
  bool present, exclusive;
};
PageState page_state(const void* p) {
  static int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  uint64_t e = 0;
  off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / os::kernel_page_size() * sizeof e);
  REQUIRE(pread(fd, &e, sizeof e, at) == static_cast<ssize_t>(sizeof e));
  return PageState{(e >> 63 & 1) != 0, (e >> 56 & 1) != 0};
}

// The pages overlapping [p, p + bytes) that are present and exclusive / that read as
// the zero page.
struct PageCount {
  size_t own, zero;
};
PageCount count_pages(const void* p, size_t bytes) {
  PageCount n{0, 0};
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(os::kernel_page_size() - 1);
  for (; a < reinterpret_cast<uintptr_t>(p) + bytes; a += os::kernel_page_size()) {
    PageState s = page_state(reinterpret_cast<void*>(a));
    if (s.present && s.exclusive) n.own++;
    if (s.present && !s.exclusive) n.zero++;
  }
  return n;
}

size_t pages_overlapping(const void* p, size_t bytes) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(os::kernel_page_size() - 1);
  return (reinterpret_cast<uintptr_t>(p) + bytes - a + os::kernel_page_size() - 1) / os::kernel_page_size();
}

// Reads every page of the range (as the lists' searches do before anything is written).
void read_pages(const void* p, size_t bytes) {
  const volatile char* c = static_cast<const volatile char*>(p);
  for (size_t i = 0; i < bytes; i += os::kernel_page_size()) (void)c[i];
  (void)c[bytes - 1];
}

}  // namespace

TEST_CASE("os::populate gives pages read as the zero page their own memory, contents kept",
          "[kernel]") {
  const size_t bytes = 3 * os::kernel_page_size();
  char* p = static_cast<char*>(os::map(bytes));
  REQUIRE(p);
  p[os::kernel_page_size() + 5] = 42;
  read_pages(p, os::kernel_page_size());  // page 0 read only: the zero page; page 2 untouched
  PageState zero = page_state(p);
  REQUIRE(zero.present);
  REQUIRE_FALSE(zero.exclusive);
  REQUIRE_FALSE(page_state(p + 2 * os::kernel_page_size()).present);
  os::populate(p + 1, bytes - 2);  // rounded out to whole pages
  PageCount n = count_pages(p, bytes);
  CHECK(n.own == 3);
  CHECK(n.zero == 0);
  CHECK(p[os::kernel_page_size() + 5] == 42);
  for (size_t i = 0; i < bytes; i++)
    if (i != os::kernel_page_size() + 5) REQUIRE(p[i] == 0);
  os::unmap(p, bytes);
}

TEST_CASE(
    "a shard's tables are uncharged zero pages until the map commits them, then pages of "
    "their own at its first use") {
  const unsigned sh = kMaxShards - 1;  // past the shards a machine of this size uses
  if (shard_count() > sh) {
    WARN("every shard is in use on this machine");
    return;
  }
  REQUIRE_FALSE(shard_prepared(sh));
  struct Row {
    const void* p;
    size_t bytes;
  } rows[] = {{&g_page_heap[sh], sizeof g_page_heap[sh]},
              {g_central[sh], sizeof g_central[sh]},
              {g_depot[sh], sizeof g_depot[sh]}};
  // Strict overcommit would charge a writable page (VmFlags "ac"); a read-only one it
  // does not. A page in the middle of each row: the ends may share a page with
  // neighbours that stay writable.
  auto middle = [](const Row& r) { return static_cast<const char*>(r.p) + r.bytes / 2; };
  if (shard_tables_committed() <= sh) {
    for (const Row& r : rows) {
      std::string flags = vm_flags(middle(r));
      INFO(flags);
      CHECK_FALSE(has_flag(flags, "wr"));
      CHECK_FALSE(has_flag(flags, "ac"));
    }
  } else {
    WARN("an earlier test committed every shard's tables");
  }
  REQUIRE(shard_tables_commit(kMaxShards));
  for (const Row& r : rows) {
    std::string flags = vm_flags(middle(r));
    INFO(flags);
    CHECK(has_flag(flags, "wr"));
  }
  // Read first, as the lists are: without preparing, the pages are the zero page.
  size_t zero = 0;
  for (const Row& r : rows) {
    read_pages(r.p, r.bytes);
    zero += count_pages(r.p, r.bytes).zero;
  }
  REQUIRE(zero >=
          10);  // the rows span 13-15 pages; only those shared with neighbours may be written
  prepare_shard(sh);
  REQUIRE(shard_prepared(sh));
  for (const Row& r : rows) {
    if (r.p == g_depot[sh]) continue;  // written before read: not prepared (first_touch.h)
    PageCount n = count_pages(r.p, r.bytes);
    CHECK(n.zero == 0);
    CHECK(n.own == pages_overlapping(r.p, r.bytes));
  }
}

TEST_CASE("the page map's root is writable only where its entries were set") {
  void* p = heap::alloc(200);
  REQUIRE(p);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  // The root entry of an address 512 GiB away, on a page of the root no entry of this
  // process is on: read-only, uncharged.
  const void* far = nullptr;
  for (uintptr_t delta = uintptr_t{512} << 30; delta < (uintptr_t{1} << 46); delta <<= 1) {
    uintptr_t b = a ^ delta;
    (void)PageMap::entry(reinterpret_cast<void*>(b));  // reads the root: zero, never a fault
    std::string flags = vm_flags(PageMap::root_slot(reinterpret_cast<void*>(b)));
    if (!has_flag(flags, "wr")) {
      far = PageMap::root_slot(reinterpret_cast<void*>(b));
      CHECK_FALSE(has_flag(flags, "ac"));
      break;
    }
  }
  CHECK(far != nullptr);
  CHECK(has_flag(vm_flags(PageMap::root_slot(p)), "wr"));
  heap::free(p);
}

TEST_CASE("the shard an allocation used is prepared") {
  void* p = heap::alloc(200);
  REQUIRE(p);
  heap::free(p);
  CHECK(shard_prepared(current_shard()));
  CHECK(shard_prepared(PageMap::get(p)->shard));
}

TEST_CASE("a CPU's sheaf slots get pages of their own before its capacity reaches them") {
  if (!percpu_decide()) return;  // per-thread caches: no sheaves
  // No tick of its own: one due on the miss below would drain the class just grown,
  // idle, and give its slot pages back before they are counted.
  OwnTicks ticks;
  // Pinned, so that the class grown is the one on this CPU.
  cpu_set_t old, one;
  REQUIRE(sched_getaffinity(0, sizeof old, &old) == 0);
  uint32_t c = rseq_cpu_id();
  REQUIRE(c < g_cpu_count);
  CPU_ZERO(&one);
  CPU_SET(c, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  // A size class never used on this CPU whose first slots lie on a page nobody touched.
  void** slots = reinterpret_cast<void**>(g_cpu_region + (size_t{c} << kCpuRegionShift));
  unsigned cls = 0;
  for (unsigned k = kNumClasses - 1; k > 0 && !cls; k--) {
    void** first = slots + kSheafLayout.begin[k];
    size_t bytes = (batch_size(k) + 1) * sizeof(void*);
    if (count_pages(first, bytes).own == 0 && count_pages(first, bytes).zero == 0) cls = k;
  }
  if (!cls) {
    WARN("every size class's first slots are already touched on CPU " << c);
  } else {
    void* obj = nullptr;
    REQUIRE(g_central[shard_of_cpu(c)][cls].alloc_batch(cls, &obj, 1) == 1);
    // A free that finds no capacity: the miss grows the sheaf and moves nothing.
    REQUIRE(percpu_put(cls, &obj, 1) == 0);
    void** first = slots + kSheafLayout.begin[cls];
    size_t bytes = (batch_size(cls) + 1) * sizeof(void*);
    PageCount n = count_pages(first, bytes);
    CHECK(n.zero == 0);
    CHECK(n.own == pages_overlapping(first, bytes));
    heap::free(obj);
  }
  REQUIRE(sched_setaffinity(0, sizeof old, &old) == 0);
}

TEST_CASE("the statistics' metadata counts the shards' prepared arrays and the CPUs' headers") {
  heap::free(heap::alloc(64));  // this CPU's shard is prepared by now
  size_t shards = prepared_shard_bytes(), headers = percpu_header_bytes();
  CHECK(shards >= sizeof g_page_heap[0] + sizeof g_central[0]);
  CHECK(shards % os::kernel_page_size() == 0);
  if (percpu_decided() && percpu_stats().cpus_used > 0) CHECK(headers >= os::kernel_page_size());
  CHECK(heap::stats().metadata >= shards + headers);
}
