// core/platform/kernel_features.h — what the running kernel offers of the calls uslab
// uses or could use, found by asking it (never from its version number, which
// distribution kernels backport around): for `uslab topology` and the guests' kernel
// matrix, where each kernel's answers are checked against the release that added
// the call.
//
// Rules: raw system calls only (os.h), no allocation, nothing cached: the probes are
// cheap and run when asked, never on an allocation path. A probe the sandbox
// refuses counts in the refused calls' statistics, as any refused call does.
#pragma once

#include <cstdint>

namespace uslab::os {

// A probe's answer: the kernel has it, lacks it (EINVAL or ENOSYS from a call that
// exists, or the call itself missing), or a seccomp filter refused the probe (EPERM:
// what the kernel has is unknown then).
enum class Offered : uint8_t { kNo, kYes, kRefused };

struct KernelFeatures {
  char release[65];          // uname's release
  Offered rseq;              // the rseq system call (Linux 4.18)
  uint32_t rseq_feature_size;  // AT_RSEQ_FEATURE_SIZE (Linux 6.3; 0 before: 20 bytes)
  bool rseq_mm_cid;          // the area has mm_cid (feature size 28 or more, Linux 6.3)
  Offered madv_free;         // MADV_FREE (Linux 4.5)
  Offered madv_populate;     // MADV_POPULATE_WRITE (Linux 5.14)
  Offered madv_collapse;     // MADV_COLLAPSE (Linux 6.1)
  Offered madv_guard;        // MADV_GUARD_INSTALL, guard regions (Linux 6.13)
  Offered membarrier_rseq;   // membarrier's PRIVATE_EXPEDITED_RSEQ (Linux 5.10)
  int cgroup_version;        // of the memory controller: 1, 2, or 0 when none is mounted
  bool seccomp;              // a seccomp filter is in force on the calling thread
};

void kernel_features(KernelFeatures* out);
const char* offered_name(Offered o);  // "yes", "no", "refused"

}  // namespace uslab::os
