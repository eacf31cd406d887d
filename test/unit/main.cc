// Catch2 main for the core's unit tests (the core linked statically, not preloaded:
// the test process itself runs on glibc's malloc).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
