// core/platform/config.h: USLAB_CONF's parser. Every key takes its documented values;
// a bad value or an unknown key warns on stderr and leaves the setting as it was; the
// last of repeated keys wins.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "core/core.h"

using namespace uslab;

namespace {

// config_parse(text) into a fresh Config; *err receives what it wrote on stderr.
Config parsed(const char* text, std::string* err = nullptr) {
  Config c;
  char path[] = "/tmp/uslab-config-test.XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  unlink(path);
  int saved = dup(2);
  dup2(fd, 2);
  config_parse(c, text, "test");
  dup2(saved, 2);
  close(saved);
  if (err) {
    char buf[1024];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    err->assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }
  close(fd);
  return c;
}

}  // namespace

TEST_CASE("numbers take k, m, g and t suffixes; booleans true and false") {
  Config c = parsed("decay_ms=250,cpu_cache_bytes=512k,memory_limit=3g,shard_cpus=4");
  CHECK(c.decay_ms == 250);
  CHECK(c.cpu_cache_bytes == 512u << 10);
  CHECK(c.memory_limit == uint64_t{3} << 30);
  CHECK(c.shard_cpus == 4);
  c = parsed("abort_on_error=false,percpu=false,tcache=false,thp=false,stats=true");
  CHECK_FALSE(c.abort_on_error);
  CHECK_FALSE(c.percpu);
  CHECK_FALSE(c.tcache);
  CHECK_FALSE(c.thp);
  CHECK(c.stats_at_exit);
  CHECK(parsed("memory_limit=none").memory_limit == kMemoryLimitNone);
  CHECK(parsed("memory_limit=1t").memory_limit == uint64_t{1} << 40);
}

TEST_CASE("enumerated keys take their names") {
  CHECK(parsed("topology=probe").topology == TopologySource::kProbe);
  CHECK(parsed("topology=hwloc").topology == TopologySource::kHwloc);
  CHECK(parsed("background_thread=true").background_thread == Config::Background::kOn);
  CHECK(parsed("foreign_free=abort").foreign_free == Config::ForeignFree::kAbort);
  CHECK(parsed("foreign_free=report").foreign_free == Config::ForeignFree::kReport);
  CHECK(parsed("sheaf_addressing=base").sheaf_addressing == Config::SheafAddressing::kBase);
  CHECK(parsed("sheaf_addressing=index").sheaf_addressing == Config::SheafAddressing::kIndex);
  CHECK(parsed("sheaf_addressing=auto").sheaf_addressing == Config::SheafAddressing::kAuto);
}

TEST_CASE("a bad value or an unknown key warns once and keeps the default") {
  const Config d;
  std::string err;
  Config c = parsed("decay_ms=soon", &err);
  CHECK(c.decay_ms == d.decay_ms);
  CHECK(err.find("decay_ms") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  c = parsed("percpu=maybe,topology=magic,memory_limit=-5,sheaf_addressing=fast", &err);
  CHECK(c.percpu == d.percpu);
  CHECK(c.topology == d.topology);
  CHECK(c.sheaf_addressing == d.sheaf_addressing);
  CHECK(c.memory_limit == d.memory_limit);
  CHECK(std::count(err.begin(), err.end(), '\n') == 4);
  c = parsed("no_such_key=1,decay_ms=7", &err);
  CHECK(err.find("no_such_key") != std::string::npos);
  CHECK(c.decay_ms == 7);  // the entries after a bad one still apply
  c = parsed("", &err);
  CHECK(err.empty());
}

TEST_CASE("the last of repeated keys wins") {
  CHECK(parsed("decay_ms=1,decay_ms=2").decay_ms == 2);
}
