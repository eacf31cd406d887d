// test/unit/held_section.h — a reader that stays inside a read-side section (grace.h)
// until the test lets it go.
#pragma once

#include <atomic>
#include <thread>

#include "core/core.h"

// A thread inside a read-side section from construction until release().
class HeldSection {
 public:
  HeldSection()
      : thread_([this] {
          uslab::heap::read_lock();
          state_ = 1;
          while (state_.load() != 2) std::this_thread::yield();
          uslab::heap::read_unlock();
          state_ = 3;
        }) {
    while (state_.load() != 1) std::this_thread::yield();
  }
  ~HeldSection() {
    release();
    thread_.join();
  }
  void release() {
    if (state_.load() == 1) state_ = 2;
  }
  bool left() const { return state_.load() == 3; }

 private:
  std::atomic<int> state_{0};
  std::thread thread_;
};
