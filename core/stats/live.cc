// core/stats/live.cc — the live statistics region: a running process's statistics
// (the table and the JSON document of uslab_stats_print and uslab_stats_json) and,
// with prof=true, its heap profile, for a reader outside the process (`uslab stats
// --pid`, `uslab top`, `uslab prof --pid`): no restart, no option, no code change.
//
// Owns: the region, a private mapping of a memfd called "uslab-live" (so that
// /proc/PID/maps names it), made when the background thread starts, by the thread
// that starts it, inside its allocator call (the descriptor, open for an instant,
// cannot shift the number that thread's next open() gets) or in the constructor:
// a process that never has the thread pays nothing (a memfd is a visible share of
// /bin/true's start under uslab). Nothing is written to it before a reader asks:
// its pages cost nothing in a process nobody watches. The layout below is the
// readers' contract (docs/LIVE.md); a change to it changes kMagic.
//
// Who writes: only the background thread (background.h, LiveHooks), never an
// allocation: once a reader's request is newer than the last one served (checked on
// each of its wake-ups: once a tick while memory waits to be returned), and before
// each sleep with no timeout (from then on nothing changes until something wakes it,
// and then it serves the request). With prof=true the idle thread looks for requests
// each tick (LiveHooks::polled): a heap profile is the thread's to write. A tick that
// sees a request while there is no thread wants one, as memory waiting to be
// returned would. The writer reads the
// statistics as the exit report does, without the smaps walk (the reader does it).
//
// Locking: one writer; the served counters, which a tick on any thread compares
// (requested), are stored and loaded atomically. The reader, in another process,
// reads the header and the documents through /proc/PID/mem in one copy and accepts
// them when the sequence count was even and unchanged across it (a seqlock: odd
// while the writer writes).
// A reader asks by adding one to a request counter through /proc/PID/mem; the
// writer compares it with what it served, so a lost or torn request only delays.
#include <sys/syscall.h>

#include <cstddef>
#include <cstring>

#include "core/prof/prof.h"
#include "core/stats/snapshot.h"
#include "core/stats/stats.h"
#include "include/uslab.h"  // USLAB_VERSION

namespace uslab::heap {

namespace {

constexpr char kMagic[8] = {'u', 's', 'l', 'a', 'b', 'L', 'V', '1'};
constexpr size_t kRegionBytes = size_t{1} << 20;  // address space; pages as written
constexpr size_t kDocOffset = 4096;               // the JSON document, then the table

// Written by readers.
struct Requests {
  uint32_t stats;    // one added: the statistics now
  uint32_t profile;  // one added: a heap profile now
};

// Written by the process (the background thread).
struct Header {
  char magic[8];
  uint32_t pid;              // the writer (a forked child starts with none)
  uint32_t flags;            // kFlag*
  uint64_t seq;              // odd while being written; 0: nothing written yet
  uint64_t written_ms;       // CLOCK_MONOTONIC_COARSE, in ms
  uint32_t stats_served;     // Requests::stats when it was written
  uint32_t profile_served;   // Requests::profile when the last profile was written
  uint32_t tick_ms;          // the decay tick: how long a reader waits for a request
  uint32_t json_bytes;       // at kDocOffset
  uint32_t table_bytes;      // after the JSON document
  int32_t profile_error;     // 0, or the errno of the last profile (EINVAL: prof=false)
  char version[32];          // USLAB_VERSION
  char profile_path[512];    // the last profile written on request
};

constexpr uint32_t kFlagAsleep = 1;     // written as the thread went to sleep (no timeout)
constexpr uint32_t kFlagTruncated = 2;  // the documents did not fit

struct Region {
  Requests requests;
  char pad[64 - sizeof(Requests)];
  Header header;
};
static_assert(offsetof(Region, header) == 64 && sizeof(Region) <= kDocOffset);
static_assert(offsetof(Header, seq) == 16 && offsetof(Header, version) == 56 &&
              offsetof(Header, profile_path) == 88);

Region* g_region = nullptr;

uint32_t load(const uint32_t* word) { return __atomic_load_n(word, __ATOMIC_RELAXED); }

void start() {
  if (!g_region) g_region = static_cast<Region*>(os::map_named("uslab-live", kRegionBytes));
}

bool requested() {
  const Region* r = g_region;
  return r && (load(&r->requests.stats) != load(&r->header.stats_served) ||
               load(&r->requests.profile) != load(&r->header.profile_served));
}

struct Writer {
  char* at;
  size_t left;
  bool cut;
};

void append(void* arg, const char* text) {
  auto* w = static_cast<Writer*>(arg);
  size_t n = strlen(text);
  if (n > w->left) {
    n = w->left;
    w->cut = true;
  }
  memcpy(w->at, text, n);
  w->at += n;
  w->left -= n;
}

void publish() {
  Region* r = g_region;
  if (!r) return;  // memfd_create refused
  Header& h = r->header;
  const uint32_t want_stats = load(&r->requests.stats);
  const uint32_t want_profile = load(&r->requests.profile);
  char path[sizeof h.profile_path] = "";
  int profile_error = h.profile_error;
  if (want_profile != h.profile_served) profile_error = prof::dump_named("live", path, sizeof path);
  const Snapshot snap(false);  // read before the sequence turns odd: readers wait less

  __atomic_store_n(&h.seq, h.seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);  // odd before any byte below changes
  memcpy(h.magic, kMagic, sizeof kMagic);
  h.pid = static_cast<uint32_t>(os::syscall6(SYS_getpid));
  os::format(h.version, sizeof h.version, "%s", USLAB_VERSION);
  h.tick_ms = static_cast<uint32_t>(decay_tick_ms());
  if (want_profile != h.profile_served) {
    memcpy(h.profile_path, path, sizeof path);
    h.profile_error = profile_error;
    __atomic_store_n(&h.profile_served, want_profile, __ATOMIC_RELAXED);
  }
  char* docs = reinterpret_cast<char*>(r) + kDocOffset;
  Writer w{docs, kRegionBytes - kDocOffset, false};
  print_json(snap, append, &w);  // both documents from one snapshot: they agree
  h.json_bytes = static_cast<uint32_t>(w.at - docs);
  print_table(snap, append, &w);
  h.table_bytes = static_cast<uint32_t>(w.at - docs) - h.json_bytes;
  h.flags = (snap.background.sleeping ? kFlagAsleep : 0) | (w.cut ? kFlagTruncated : 0);
  __atomic_store_n(&h.stats_served, want_stats, __ATOMIC_RELAXED);
  h.written_ms = os::now_ms();
  __atomic_store_n(&h.seq, h.seq + 1, __ATOMIC_RELEASE);
}

bool polled() { return __atomic_load_n(&g_config.prof, __ATOMIC_RELAXED); }

constexpr LiveHooks kHooks{start, requested, publish, polled};

}  // namespace

USLAB_STARTUP_TEXT void live_init() {
  if (g_config.live_stats) __atomic_store_n(&g_live_hooks, &kHooks, __ATOMIC_RELEASE);
}

void live_fork_child() {
  Region* r = g_region;
  if (!r || r->header.seq == 0) return;  // untouched: nothing of the parent's in it
  // The parent's figures are not the child's; its readers' requests were the parent's.
  Header& h = r->header;
  h.seq = 0;
  h.pid = 0;
  h.json_bytes = h.table_bytes = 0;
  h.stats_served = r->requests.stats;
  h.profile_served = r->requests.profile;
}

}  // namespace uslab::heap
