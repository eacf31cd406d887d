// core/platform/kernel_features.cc — probes of the running kernel; see kernel_features.h.
#include "core/platform/kernel_features.h"

#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

#include <cerrno>
#include <cstring>

#include "core/platform/cgroup.h"
#include "core/platform/os.h"

#ifndef AT_RSEQ_FEATURE_SIZE
#define AT_RSEQ_FEATURE_SIZE 27
#endif

namespace uslab::os {

namespace {

// madvise over no bytes: the kernel checks the advice before the range, so an advice
// it knows returns 0 and one it does not know EINVAL, with nothing touched.
Offered advice_known(int advice) {
  long r = syscall6(SYS_madvise, 0, 0, advice);
  return r == 0 ? Offered::kYes : r == -EPERM ? Offered::kRefused : Offered::kNo;
}

}  // namespace

const char* offered_name(Offered o) {
  return o == Offered::kYes ? "yes" : o == Offered::kRefused ? "refused" : "no";
}

void kernel_features(KernelFeatures* out) {
  memset(out, 0, sizeof *out);
  struct utsname u;
  if (syscall6(SYS_uname, (long)&u) == 0) {
    size_t n = strnlen(u.release, sizeof out->release - 1);
    memcpy(out->release, u.release, n);
  }
  // An unknown flag: EINVAL from every kernel that has the call (before it looks at
  // the area), ENOSYS from one that does not.
  long r = syscall6(SYS_rseq, 0, 0, 1L << 30, 0);
  out->rseq = r == -ENOSYS ? Offered::kNo : r == -EPERM ? Offered::kRefused : Offered::kYes;
  out->rseq_feature_size = static_cast<uint32_t>(getauxval(AT_RSEQ_FEATURE_SIZE));
  out->rseq_mm_cid = out->rseq_feature_size >= 28;
  out->madv_free = advice_known(MADV_FREE);
  out->madv_populate = advice_known(23);   // MADV_POPULATE_WRITE
  out->madv_collapse = advice_known(25);   // MADV_COLLAPSE
  out->madv_guard = advice_known(102);     // MADV_GUARD_INSTALL
  // MEMBARRIER_CMD_QUERY: the commands this kernel has, as a mask.
  r = syscall6(SYS_membarrier, 0, 0, 0);
  out->membarrier_rseq = r == -EPERM ? Offered::kRefused
                         : r > 0 && (r & (1 << 7)) ? Offered::kYes  // PRIVATE_EXPEDITED_RSEQ
                                                   : Offered::kNo;
  CgroupLimit limit;
  out->cgroup_version = cgroup_memory_limit(CgroupFiles{}, &limit) ? limit.version : 0;
  out->seccomp = seccomp_filtered();
}

}  // namespace uslab::os
