// core/platform/libc_calls.cc — glibc calls at their oldest versions; see
// libc_calls.h. Locking: none.
#include "core/platform/libc_calls.h"

#include <dlfcn.h>
#include <errno.h>

#include "core/platform/os.h"

#if USLAB_OLDEST_GLIBC_VERSIONS
// The versions each function first had (glibc 2.34+ keeps them as compatibility
// symbols of libc.so.6): x86-64's first glibc was 2.2.5, aarch64's 2.17.
#if defined(__x86_64__)
#define USLAB_GLIBC_FIRST "GLIBC_2.2.5"
#define USLAB_GLIBC_SETNAME "GLIBC_2.12"
#elif defined(__aarch64__)
#define USLAB_GLIBC_FIRST "GLIBC_2.17"
#define USLAB_GLIBC_SETNAME "GLIBC_2.17"
#else
#error "the first glibc version of this architecture"
#endif
__asm__(".symver pthread_create, pthread_create@" USLAB_GLIBC_FIRST);
__asm__(".symver pthread_attr_setstacksize, pthread_attr_setstacksize@" USLAB_GLIBC_FIRST);
__asm__(".symver pthread_setname_np, pthread_setname_np@" USLAB_GLIBC_SETNAME);
__asm__(".symver pthread_sigmask, pthread_sigmask@" USLAB_GLIBC_FIRST);
__asm__(".symver pthread_key_create, pthread_key_create@" USLAB_GLIBC_FIRST);
__asm__(".symver pthread_setspecific, pthread_setspecific@" USLAB_GLIBC_FIRST);
__asm__(".symver dlopen, dlopen@" USLAB_GLIBC_FIRST);
__asm__(".symver dlsym, dlsym@" USLAB_GLIBC_FIRST);
// In libpthread.so.0 and libdl.so.2 before glibc 2.34 (pthread_sigmask before 2.32):
// absent, not an error, where the program did not load them.
#pragma weak pthread_create
#pragma weak pthread_sigmask
#pragma weak pthread_attr_setstacksize
#pragma weak pthread_setname_np
#pragma weak pthread_key_create
#pragma weak pthread_setspecific
#pragma weak dlopen
#pragma weak dlsym
#define USLAB_PRESENT(fn) (&fn != nullptr)
#else
#define USLAB_PRESENT(fn) true
#endif

#if USLAB_STATIC_ARCHIVE
// glibc's lll_lock word: 0 when free. Weak: linked where pthread_create is (always,
// with libuslab.a), absent before glibc 2.34, whose lock was libpthread's own.
extern "C" int _dl_stack_cache_lock __attribute__((weak));
#endif

namespace uslab::libc {

int thread_create(pthread_t* t, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  if (!USLAB_PRESENT(pthread_create)) return EAGAIN;
  return pthread_create(t, attr, fn, arg);
}

void attr_set_stack_size(pthread_attr_t* attr, size_t bytes) {
  if (USLAB_PRESENT(pthread_attr_setstacksize)) pthread_attr_setstacksize(attr, bytes);
}

void set_thread_name(pthread_t t, const char* name) {
  if (USLAB_PRESENT(pthread_setname_np)) pthread_setname_np(t, name);
}

int signal_mask(int how, const sigset_t* set, sigset_t* old) {
  // Without libpthread the process has one thread, whose mask sigprocmask sets.
  if (!USLAB_PRESENT(pthread_sigmask)) return sigprocmask(how, set, old) == 0 ? 0 : errno;
  return pthread_sigmask(how, set, old);
}

int key_create(pthread_key_t* key, void (*destructor)(void*)) {
  if (!USLAB_PRESENT(pthread_key_create)) {
    *key = kNoKey;
    return 0;
  }
  return pthread_key_create(key, destructor);
}

void set_specific(pthread_key_t key, const void* value) {
  if (key != kNoKey && USLAB_PRESENT(pthread_setspecific)) pthread_setspecific(key, value);
}

#if USLAB_STATIC_ARCHIVE
// A static binary has no dynamic loader of its own: glibc's static dlopen would load
// a second, shared libc under the program (hwloc's), so nothing is loaded at all.
void* dl_open(const char*, int) { return nullptr; }

USLAB_STARTUP_TEXT void* dl_sym(void*, const char*) { return nullptr; }

bool static_binary() { return true; }

bool stack_cache_lock_free() {
  return &_dl_stack_cache_lock != nullptr &&
         __atomic_load_n(&_dl_stack_cache_lock, __ATOMIC_RELAXED) == 0;
}
#else
bool static_binary() { return false; }

bool stack_cache_lock_free() { return false; }

void* dl_open(const char* file, int mode) {
  return USLAB_PRESENT(dlopen) ? dlopen(file, mode) : nullptr;
}

USLAB_STARTUP_TEXT void* dl_sym(void* handle, const char* name) {
  return USLAB_PRESENT(dlsym) ? dlsym(handle, name) : nullptr;
}
#endif

}  // namespace uslab::libc
