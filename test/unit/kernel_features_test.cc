// core/platform/kernel_features.h: each probe against the release that added the call,
// and a probe a seccomp filter refuses.
#include <catch2/catch.hpp>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>

#include "core/core.h"
#include "test/unit/filtered_child.h"

using namespace uslab;

namespace {
// The release as major * 1000 + minor ("6.1.0-50-amd64": 6001).
int release_number(const char* release) {
  int major = 0, minor = 0;
  if (sscanf(release, "%d.%d", &major, &minor) != 2) return 0;
  return major * 1000 + minor;
}
}  // namespace

TEST_CASE("a kernel offers what its release added", "[kernel]") {
  os::KernelFeatures k;
  os::kernel_features(&k);
  const int v = release_number(k.release);
  INFO("kernel " << k.release);
  REQUIRE(v >= 4018);  // no older kernel runs the suites
  // A distribution may backport a call to an older release, never take one out of
  // the release that added it: "at or above: yes". The guests' kernel matrix checks
  // "below: no" on kernels whose backports are known (test/vm/guest.sh).
  if (!k.seccomp) {
    CHECK(k.rseq == os::Offered::kYes);
    CHECK(k.madv_free == os::Offered::kYes);
    if (v >= 5010) CHECK(k.membarrier_rseq == os::Offered::kYes);
    if (v >= 5014) CHECK(k.madv_populate == os::Offered::kYes);
    if (v >= 6001) CHECK(k.madv_collapse == os::Offered::kYes);
    if (v >= 6013) CHECK(k.madv_guard == os::Offered::kYes);
  }
  if (v >= 6003) CHECK(k.rseq_mm_cid);
  CHECK(k.rseq_mm_cid == (k.rseq_feature_size >= 28));
}

TEST_CASE("a probe a seccomp filter refuses says so, not no", "[kernel]") {
  CHECK(in_filtered_child({{SYS_madvise, EPERM}, {SYS_rseq, ENOSYS}}, [] {
          os::KernelFeatures k;
          os::kernel_features(&k);
          return k.seccomp && k.madv_free == os::Offered::kRefused &&
                 k.madv_collapse == os::Offered::kRefused && k.rseq == os::Offered::kNo;
        }) == 0);  // 2: no filter could be installed here
}
