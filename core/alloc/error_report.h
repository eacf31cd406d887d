// core/alloc/error_report.h — what uslab does when a program misuses the heap: an
// invalid or double free (found by the slabs, the sheaves, the thread caches, the
// facade), a guarded object's fault, a deferred free outside its rules. Each is
// reported on stderr with the pointer, counted, and the process aborted unless the
// abort_on_error option is off (then the call returns and the object is left alone).
//
// Owns: the count of reports. Lock-free: the count is an atomic; the report is one
// write(2) of a formatted line, safe from any path (no allocation, no lock), so the
// slow paths may call it while they hold their own locks.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/ds/ds.h"

namespace uslab {

// Report an invalid or double free of p (cls: its size class, 0 when p is not an
// object of uslab's), then abort_if_configured().
void report_bad_free(const void* p, const char* what, unsigned cls);
// After reporting a misuse: abort unless abort_on_error=false.
void abort_if_configured();
// How many bad frees were reported (they are not aborted on with abort_on_error=false).
extern std::atomic<uint64_t> g_bad_free_reports;

}  // namespace uslab
