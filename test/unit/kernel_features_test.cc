// core/platform/kernel_features.h: each probe against the release that added the call,
// and a probe a seccomp filter refuses.
#include <catch2/catch.hpp>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>

#include "core/core.h"

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
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_madvise, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rseq, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      _exit(2);
    os::KernelFeatures k;
    os::kernel_features(&k);
    bool ok = k.seccomp && k.madv_free == os::Offered::kRefused &&
              k.madv_collapse == os::Offered::kRefused && k.rseq == os::Offered::kNo;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 2: no filter could be installed here
}
