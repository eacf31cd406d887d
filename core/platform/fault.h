// core/platform/fault.h — injected system-call failures, in the test build that asks
// for them (meson -Dfault_injection=true) alone: os::syscall6 asks inject() before
// each call, and a call chosen by USLAB_FAULT fails with the chosen errno instead of
// reaching the kernel, as a kernel short of memory, a full mapping table or a
// sandbox would answer.
//
// USLAB_FAULT=RULE[;RULE...] (up to 4), each CALL:ERRNO:WHEN
//   CALL   mmap, munmap, mremap, madvise, mprotect, memfd_create, ftruncate, mbind,
//          get_mempolicy, getrandom, membarrier, rseq, openat, mincore,
//          sched_getaffinity, process_vm_readv, or any (every one of them); not futex,
//          whose wake never fails and whose wait returns early on every signal anyway
//   ERRNO  ENOMEM, EAGAIN, EINVAL, EPERM, ENOSYS, EFAULT, EINTR, EMFILE, ENFILE,
//          EACCES, EBUSY, EIO
//   WHEN   N: the call's Nth time only (1 is the first), counted from the start;
//          N+: the Nth time and every later one; pK or pK@SEED: each time with
//          probability K/1000, from SEED's sequence (a seed from the clock without it)
// The rules are printed with the seed at the first injection, so that a failing run
// can be repeated, and the first five injections as they happen: on stderr, or
// appended to the file USLAB_FAULT_LOG names (for programs whose stderr is compared).
//
// Rules: no allocation, no lock (the environment is read once; calls made meanwhile
// are not injected); the counters are atomics. Not compiled into any other build.
#pragma once

#include <cstdint>

namespace uslab::os::fault {

// The negative errno the call nr is to fail with now, or 0 to make it.
long inject(long nr);

// For the fuzz harness, whose input picks the failure: the rules become one, `call`
// (a CALL name above) failing with `error` at `permille` of its calls from SEED's
// sequence, or none (call nullptr); USLAB_FAULT is not read then. Not while other
// threads make system calls.
void set_rule(const char* call, long error, uint32_t permille, uint64_t seed);

}  // namespace uslab::os::fault
