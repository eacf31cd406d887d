// Unit tests for core/alloc/error_report.cc: a misuse is reported with its pointer and
// class, counted, and ends the process unless abort_on_error is off.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/alloc/error_report.h"

using namespace uslab;

namespace {
// What fn writes to stderr (fd 2), through a temporary file.
template <class Fn>
std::string stderr_of(Fn fn) {
  FILE* tmp = std::tmpfile();
  REQUIRE(tmp != nullptr);
  fflush(stderr);
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  fn();
  dup2(saved, 2);
  close(saved);
  std::string out;
  rewind(tmp);
  char buf[256];
  while (size_t n = fread(buf, 1, sizeof buf, tmp)) out.append(buf, n);
  fclose(tmp);
  return out;
}
}  // namespace

TEST_CASE("a bad free is reported with its pointer and class, and counted") {
  config_init();
  g_config.abort_on_error = false;
  const unsigned cls = size_to_class(100);
  const uint64_t before = g_bad_free_reports.load();
  std::string out = stderr_of([&] { report_bad_free(reinterpret_cast<void*>(0x1234), "double free", cls); });
  char want[128];
  snprintf(want, sizeof want, "uslab: double free of 0x1234 (size class %u, %u bytes)\n", cls,
           (unsigned)class_size(cls));
  CHECK(out == want);
  out = stderr_of([] { report_bad_free(reinterpret_cast<void*>(0x5678), "free of invalid pointer", 0); });
  CHECK(out == "uslab: free of invalid pointer of 0x5678 (not allocated by uslab)\n");
  CHECK(g_bad_free_reports.load() == before + 2);
  // With abort_on_error off, the misuse's caller carries on.
  CHECK(stderr_of([] { abort_if_configured(); }).empty());
  g_config.abort_on_error = true;
}

TEST_CASE("abort_on_error ends the process after the report, with SIGABRT") {
  config_init();
  REQUIRE(g_config.abort_on_error);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGABRT, SIG_DFL);  // not Catch2's handler, which reports a failure here
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);  // the report and the abort's line are not the test's output
    report_bad_free(reinterpret_cast<void*>(0x1234), "double free", 0);
    _exit(0);  // not reached when it aborts
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("wait status " << status);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
}
