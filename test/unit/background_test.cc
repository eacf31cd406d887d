// core/alloc/background.h: the background_thread option, and the caller test that
// decides where the background thread may be started (platform/helper_thread.h).
// The thread itself and the caller test are tested through the preloaded library
// (conformance/background.c, stress/idle_return.c).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "core/core.h"

using namespace uslab;

TEST_CASE("background_thread takes auto, true and false, and is auto by default") {
  Config cfg;
  REQUIRE(cfg.background_thread == Config::Background::kAuto);
  config_parse(cfg, "background_thread=false", "test");
  REQUIRE(cfg.background_thread == Config::Background::kOff);
  config_parse(cfg, "background_thread=true", "test");
  REQUIRE(cfg.background_thread == Config::Background::kOn);
  config_parse(cfg, "background_thread=auto", "test");
  REQUIRE(cfg.background_thread == Config::Background::kAuto);
  config_parse(cfg, "background_thread=off", "test");
  REQUIRE(cfg.background_thread == Config::Background::kOff);
  config_parse(cfg, "background_thread=sometimes", "test");  // warned, left as it was
  REQUIRE(cfg.background_thread == Config::Background::kOff);
}

TEST_CASE("a wanted background thread is not started before the library's constructor") {
  // The unit tests never run the constructor (background_init): here the caller test
  // could not be trusted (this binary mixes the core with code built without frame
  // pointers), so the thread must stay unstarted, whatever is freed.
  config_init();
  if (g_config.background_thread == Config::Background::kOff) return;
  background_want();
  REQUIRE(background_state() == BackgroundState::kWanted);
  REQUIRE((g_background_poke.load() & kPokeStart) != 0);
  background_poke();
  REQUIRE(background_state() == BackgroundState::kWanted);
  REQUIRE(background_stats().veto == os::ThreadVeto::kNotReady);
  char line[256];
  background_describe(background_stats(), line, sizeof line);
  REQUIRE(strstr(line, "before the library's constructor") != nullptr);
}
