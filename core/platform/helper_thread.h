// core/platform/helper_thread.h — starting the allocator's own thread from inside
// malloc and free, where a thread cannot always be started.
//
// Owns: the decision whether the current call may create a thread, and the creation
// (a detached thread with every signal blocked, a small stack and a name).
//
// Why a decision: pthread_create takes glibc's stack-cache lock, and glibc calls free
// while it holds that lock (ld.so's _dl_deallocate_tls frees a dead thread's TLS
// there; libpthread's stack cache does the same before glibc 2.34): a thread started
// from such a free waits for itself (it did, in ac4dc7f's per-thread cache_bound
// stress). So a thread is started only from a call whose first caller outside
// libuslab is not libc, libpthread or the dynamic linker. That caller is found by
// following libuslab's own frames (it is built with frame pointers) up to the first
// return address outside its text; no frame of the caller is ever read. In a static
// binary (libuslab.a), where libc, the program and uslab are one object, the test is
// the lock itself: no thread is started while glibc's stack-cache lock is held (by
// anyone), and none at all where the lock cannot be read (glibc before 2.34). A process
// under a seccomp filter starts no thread: a filter may kill the process on clone
// (OpenSSH's sandbox does), and the kernel does not say which calls a filter allows.
// Built under uslab's names alone (USLAB_NO_OVERRIDE: the Rust crate without its
// override feature), libc keeps its own malloc and never calls this heap, so no call
// can come from under its locks: there is no test. Linked into the program's own
// executable and owning malloc (the crate's override feature), uslab's frames cannot
// be told from the program's, which may have no frame pointers: no call may start the
// thread, and `auto` starts it in the constructor instead (background.h).
//
// Locking: none. helper_thread_init reads the loaded objects once (dl_iterate_phdr),
// from the library's constructor; until then every call is refused. Unlike os.h,
// the creation goes through libc (pthread_create): there is no other way to make a
// thread that may call into libc.
#pragma once

#include <cstdint>

namespace uslab::os {

// Records the text of this library and of libc, libpthread and the dynamic linker.
void helper_thread_init();

// Why a thread may not be created from this call (kNone: it may).
enum class ThreadVeto : uint8_t {
  kNone,
  kNotReady,    // before helper_thread_init (the library's constructor)
  kLibcCaller,  // called from inside libc, libpthread or ld.so (or the frames are unreadable)
  kSeccomp,     // a seccomp filter is in force on this thread
};
ThreadVeto helper_thread_veto();
// Whether every call is refused for want of a caller test (uslab owns malloc inside
// the program's executable; see above).
bool helper_thread_caller_untestable();
const char* thread_veto_name(ThreadVeto v);

// Whether a return address lies in the text of libc, libpthread or ld.so (tests).
bool in_libc_text(uintptr_t addr);

// Creates a detached thread running fn(nullptr), named `name` (at most 15 characters),
// with every signal blocked and a 64 KiB stack. Returns 0, or pthread_create's error.
int helper_thread_start(void* (*fn)(void*), const char* name);

}  // namespace uslab::os
