// test/unit/filtered_child.h — a check run in a forked child under a seccomp filter
// that answers chosen system calls with an error, as a sandbox does (a filter cannot
// be lifted, so never in the test process itself).
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <initializer_list>

struct Refusal {
  long nr;    // the system call
  int error;  // what the filter answers (an errno)
};

// Forks; the child installs the filter, then exits 0 when check() returns true, 1
// when not, 2 when no filter could be installed here. Returns the child's exit
// status, or -1 when it did not exit.
template <typename Check>
int in_filtered_child(std::initializer_list<Refusal> refusals, Check check) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    sock_filter f[2 * 8 + 2];
    unsigned n = 0;
    f[n++] = BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
    for (const Refusal& r : refusals) {
      if (n + 3 > sizeof f / sizeof f[0]) _exit(2);
      f[n++] = BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(r.nr), 0, 1);
      f[n++] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | static_cast<unsigned>(r.error));
    }
    f[n++] = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    sock_fprog prog = {static_cast<unsigned short>(n), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      _exit(2);
    _exit(check() ? 0 : 1);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}
