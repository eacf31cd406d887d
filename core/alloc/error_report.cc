// core/alloc/error_report.cc — the report of a heap misuse; see error_report.h.
#include "core/alloc/error_report.h"

namespace uslab {

constinit std::atomic<uint64_t> g_bad_free_reports{0};

void abort_if_configured() {
  config_init();
  if (g_config.abort_on_error)
    os::fatal("uslab: aborting (set USLAB_CONF=abort_on_error=false to continue)\n");
}

void report_bad_free(const void* p, const char* what, unsigned cls) {
  config_init();
  g_bad_free_reports.fetch_add(1, std::memory_order_relaxed);
  if (cls)
    os::print_stderr("uslab: %s of %p (size class %u, %u bytes)\n", what, p, cls,
                     (unsigned)class_size(cls));
  else
    os::print_stderr("uslab: %s of %p (not allocated by uslab)\n", what, p);
  abort_if_configured();
}

}  // namespace uslab
