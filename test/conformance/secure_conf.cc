// test/conformance/secure_conf.cc — the configuration as a setuid program sees it
// (test/conformance/secure_conf.sh makes a setuid copy): prints whether the process
// runs with AT_SECURE and the options the environment and the linked-in string set.
// Linked with the core itself: ld.so ignores LD_PRELOAD paths and $ORIGIN run paths
// in a setuid program, so this is how uslab's configuration code runs in one.
#include <sys/auxv.h>

#include <cstdio>

#include "core/platform/config.h"

extern "C" {
// The linked-in string applies whatever the environment says.
const char* uslab_malloc_conf = "prof_sample=64k";
}

int main() {
  uslab::config_init();
  const uslab::Config& c = uslab::g_config;
  std::printf("secure=%d prof=%d stats=%d prof_sample=%llu prefix=%s\n",
              getauxval(AT_SECURE) ? 1 : 0, c.prof ? 1 : 0, c.stats_at_exit ? 1 : 0,
              static_cast<unsigned long long>(c.prof_sample), c.prof_prefix);
  return 0;
}
