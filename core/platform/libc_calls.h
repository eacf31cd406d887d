// core/platform/libc_calls.h — the glibc functions that moved from libpthread and
// libdl into libc in glibc 2.34, called at their oldest versions.
//
// Owns: the bindings of pthread_create, pthread_attr_setstacksize,
// pthread_setname_np, pthread_sigmask, pthread_key_create, pthread_setspecific,
// dlopen and dlsym, and what uslab does where one is missing; in libuslab.a, whether
// the process is a static binary and whether glibc's stack-cache lock is free.
//
// Why: linked on a glibc of 2.34 or later, a call to these binds to the version
// that moved them (GLIBC_2.34, pthread_sigmask GLIBC_2.32), and an older glibc
// refuses to load the library at all: every program started with it preloaded
// exits, and with it in /etc/ld.so.preload no program starts. Bound here to their
// first versions (x86-64: GLIBC_2.2.5, pthread_setname_np GLIBC_2.12), which glibc
// 2.34+ still exports from libc.so.6, the library needs nothing newer than
// GLIBC_2.17 (test/conformance/symbols.sh checks the whole library). Before 2.34
// they live in libpthread.so.0 and libdl.so.2 (pthread_sigmask until 2.32), which
// a program may not load: the references are weak, so the library loads without
// them, and each wrapper says what happens then (no helper thread, no optional
// library, no thread-exit hook: without libpthread a process has one thread).
//
// Sanitizer builds (unit_only) call the functions as declared: the sanitizers'
// interceptors of pthread_create are unversioned definitions, which a versioned
// reference would pass by.
//
// libuslab.a (USLAB_STATIC_ARCHIVE, for static binaries) calls the pthread functions
// as declared too: a static link resolves no versioned name, and leaves a weak
// reference null unless the program happens to link the function itself (which
// would leave uslab without its background thread and thread-exit hook). Its dl_open
// and dl_sym find nothing.
//
// Locking: none; each call is the libc function's.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace uslab::libc {

// pthread_create; EAGAIN where libpthread is not loaded.
int thread_create(pthread_t* t, const pthread_attr_t* attr, void* (*fn)(void*), void* arg);
// pthread_attr_setstacksize and pthread_setname_np; nothing where missing.
void attr_set_stack_size(pthread_attr_t* attr, size_t bytes);
void set_thread_name(pthread_t t, const char* name);
// pthread_sigmask; sigprocmask where libpthread is not loaded (before glibc 2.32).
int signal_mask(int how, const sigset_t* set, sigset_t* old);
// pthread_key_create / pthread_setspecific. Where libpthread is not loaded the key
// is made (kNoKey) but no destructor will ever run: no thread can exit but the
// last one.
constexpr pthread_key_t kNoKey = ~pthread_key_t{0};
int key_create(pthread_key_t* key, void (*destructor)(void*));
void set_specific(pthread_key_t key, const void* value);
// dlopen / dlsym; nullptr where libdl is not loaded (before glibc 2.34), and in a
// static binary.
void* dl_open(const char* file, int mode);
void* dl_sym(void* handle, const char* name);

// Whether this is libuslab.a, linked into a static binary, where libc's code and the
// program's are one object and helper_thread.h cannot tell callers apart by object.
bool static_binary();
// In a static binary: whether glibc's stack-cache lock (_dl_stack_cache_lock, a
// global there from glibc 2.34) is free now; false where the binary has none.
bool stack_cache_lock_free();

}  // namespace uslab::libc
