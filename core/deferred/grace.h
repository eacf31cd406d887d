// core/deferred/grace.h — grace periods: read-side sections and the counter that tells
// when every reader that might still see a retired object has left (RCU-style,
// liburcu's membarrier flavour).
//
// Owns: the reader records (one per thread that entered a read-side section; carved
// from the metadata arena, linked once into a list that is never unlinked, reused
// after their thread exits), the grace-period counter g_grace_seq, the calling
// thread's record pointer (initial-exec TLS, 8 bytes) and the pthread key that
// releases a record at thread exit.
//
// Reader side: a record's `ctr` is (epoch << 16) | nesting, 0 outside any section.
// The outermost grace_read_lock stores the counter's current value as its epoch,
// inner locks and unlocks add or subtract one: each is one plain store of a word
// only its thread writes, so a signal handler that opens a section inside another
// puts the word back before it returns. No atomic read-modify-write and no fence:
// writers pay with membarrier(PRIVATE_EXPEDITED), which runs a full barrier on every
// CPU running a thread of this process. Where membarrier is missing, readers fence
// after the store instead (g_grace_reader_fence, decided before the first record is
// handed out).
//
// Writer side, and why it is safe: objects retired (unlinked by the program, then
// queued) before grace_stamp() returned t can only be reached by readers whose
// epoch is ≤ t (epochs are counter values read on entry, the counter only grows,
// and the stamp is a read-modify-write, so a reader that read a later value reads
// after the retirement). grace_start() advances the counter and issues the
// membarrier; a reader whose store of its epoch was not visible to the scan that
// follows runs its next loads after that barrier and so no longer sees the retired
// objects. Hence: a stamp t taken before a grace_start() is complete when a scan
// after it finds no active reader with epoch ≤ t (grace_oldest() > t). A reader's
// exit is a release store and the scan reads with acquire, so its loads are done
// before the objects are freed.
//
// Locking: readers take no lock. Registration claims a free record with one
// compare-and-swap or links a new one with another; scans walk the list without a
// lock (records are never unlinked or freed). grace_synchronize waits without
// holding any lock, so a fork or another writer never waits on it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/platform/platform.h"

namespace uslab {

struct alignas(64) ReaderRecord {
  std::atomic<uint64_t> ctr;     // (epoch << 16) | nesting; written by its thread only
  std::atomic<uint32_t> in_use;  // claimed by a live thread
  uint32_t tid;                  // that thread (for fork: records of others are freed)
  ReaderRecord* next;            // in the list of every record
};

constexpr unsigned kNestBits = 16;
constexpr uint64_t kNestMask = (uint64_t{1} << kNestBits) - 1;

extern std::atomic<uint64_t> g_grace_seq USLAB_HIDDEN;
extern bool g_grace_reader_fence USLAB_HIDDEN;
extern __thread ReaderRecord* t_reader __attribute__((tls_model("initial-exec")));

// Slow paths: the first section of a thread (claims a record), and misuse.
ReaderRecord* grace_register_reader();
[[noreturn]] void grace_misuse(const char* what);

inline void grace_read_lock() {
  ReaderRecord* r = t_reader;
  if (__builtin_expect(r == nullptr, 0)) r = grace_register_reader();
  uint64_t v = r->ctr.load(std::memory_order_relaxed);
  if (__builtin_expect((v & kNestMask) == 0, 1)) {
    r->ctr.store((g_grace_seq.load(std::memory_order_acquire) << kNestBits) | 1,
                 std::memory_order_relaxed);
    // The section's loads must not move above the store (membarrier orders them
    // against the writers; without it this thread fences).
    if (__builtin_expect(g_grace_reader_fence, 0))
      std::atomic_thread_fence(std::memory_order_seq_cst);
    else
      std::atomic_signal_fence(std::memory_order_seq_cst);
    return;
  }
  if (__builtin_expect((v & kNestMask) == kNestMask, 0))
    grace_misuse("read-side sections nested too deep");
  r->ctr.store(v + 1, std::memory_order_relaxed);
}

inline void grace_read_unlock() {
  ReaderRecord* r = t_reader;
  uint64_t v = r ? r->ctr.load(std::memory_order_relaxed) : 0;
  if (__builtin_expect((v & kNestMask) == 0, 0))
    grace_misuse("uslab_read_unlock without a matching uslab_read_lock");
  if ((v & kNestMask) == 1)
    r->ctr.store(0, std::memory_order_release);  // the section's loads are done
  else
    r->ctr.store(v - 1, std::memory_order_relaxed);
}

// True when the calling thread is inside a read-side section.
inline bool grace_in_section() {
  ReaderRecord* r = t_reader;
  return r && (r->ctr.load(std::memory_order_relaxed) & kNestMask) != 0;
}

// The stamp of objects retired before this call (see the top comment).
uint64_t grace_stamp();
// Starts a grace period: advances the counter and fences every running thread.
// Stamps taken before this call are complete once grace_oldest() exceeds them.
void grace_start();
// The smallest epoch of an active reader (UINT64_MAX when none is inside a section).
uint64_t grace_oldest();
// grace_start, then waits until every reader that was in a section has left it.
// Must not be called inside a section (reported, aborts).
void grace_synchronize();
// Waits (sleeping with backoff) until grace_oldest() > stamp; a grace_start() must
// have happened after the stamp was taken.
void grace_wait(uint64_t stamp);

// Grace periods seen complete (stats), and whether membarrier is in use.
uint64_t grace_completed();
bool grace_uses_membarrier();

// fork (its set-up lock is in the lock table): the child's only thread keeps its
// record, the others' are freed.
void grace_fork_child();

}  // namespace uslab
