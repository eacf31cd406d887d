// test/unit/child.h — runs a test body in a forked child, with a deadline.
#pragma once

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

// fork_fn (fork, or a fork through the heap's handlers) makes the child, which runs
// body and exits with its result; SIGALRM ends it after deadline_s (a hang). Returns
// its exit status, or -signal.
template <class Body>
int in_child(pid_t (*fork_fn)(), Body body, unsigned deadline_s = 20) {
  pid_t pid = fork_fn();
  if (pid == 0) {
    alarm(deadline_s);
    _exit(body());
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}
