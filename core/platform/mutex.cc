// core/platform/mutex.cc — the Mutex's per-thread words: the caller's thread id (the
// owner a lock records) and the count of locks it holds or is taking (mutex.h).
// Locking: none; each word is its thread's own (initial-exec TLS).
#include "core/platform/mutex.h"

#include <sys/syscall.h>

namespace uslab {

__thread uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;
__thread uint32_t t_locks_held __attribute__((tls_model("initial-exec"))) = 0;

uint32_t current_tid_slow() { return t_tid = static_cast<uint32_t>(os::syscall6(SYS_gettid)); }

void forget_current_tid() { t_tid = 0; }

}  // namespace uslab
