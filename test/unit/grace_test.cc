// core/deferred/grace.h: read-side sections nest; a grace period waits for the readers that
// were inside when it began, and not for those that came later.
#include <catch2/catch.hpp>

#include "core/core.h"
#include "test/unit/held_section.h"

using namespace uslab;

TEST_CASE("read-side sections nest; the outermost unlock ends the section") {
  CHECK_FALSE(grace_in_section());
  heap::read_lock();
  uint64_t epoch = grace_oldest();
  CHECK(epoch != UINT64_MAX);
  heap::read_lock();
  heap::read_unlock();
  CHECK(grace_in_section());
  CHECK(grace_oldest() == epoch);  // an inner section keeps the outer epoch
  heap::read_unlock();
  CHECK_FALSE(grace_in_section());
}

TEST_CASE("a grace period waits for a reader that was inside, not for later ones") {
  HeldSection reader;
  uint64_t stamp = grace_stamp();
  grace_start();
  CHECK(grace_oldest() <= stamp);  // the reader was inside before the stamp
  heap::read_lock();               // a section opened now is newer than the stamp
  CHECK(grace_oldest() <= stamp);
  heap::read_unlock();
  reader.release();
  grace_wait(stamp);
  CHECK(reader.left());
}
