// preload/init.cc — process-level hooks of libuslab.so: fork handlers, the stats
// report and the heap profile at exit, and `uslab run --no-children` (the preload
// taken out of the environment the program's children inherit).
//
// Initialisation itself is lazy (the first malloc can come from ld.so before any
// constructor runs); this constructor only does what must wait for libc: register
// pthread_atfork handlers. Forks that run no handlers (_Fork, vfork, posix_spawn)
// must not touch the heap in the child before exec (see README).
// Locking: none of its own; the fork handlers take and release every heap lock.
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "core/platform/libc_calls.h"
#include "preload/export.h"

#ifdef __GLIBC__

// What pthread_atfork is: glibc's libc_nonshared.a stub passes the calling object's
// __dso_handle to this (GLIBC_2.3.2, in libc.so.6 on every glibc). Called directly,
// as libuslab.so is linked without the C runtime's start files that define
// __dso_handle (meson.build). The handle only matters to __cxa_finalize when an
// object is unloaded, and libuslab.so never is (-z nodelete): none is passed.
extern "C" int __register_atfork(void (*prepare)(), void (*parent)(), void (*child)(), void* dso);
#endif

namespace {

// The strings every process's constructor reads (the variable's name, the symbols
// dlsym finds), in .data, not .rodata (os.h's USLAB_STARTUP_STRING).
USLAB_STARTUP_STRING(kNoChildren, "USLAB_NO_CHILDREN");

// With USLAB_NO_CHILDREN set (uslab run --no-children), the entries naming
// libuslab are cut out of LD_PRELOAD in place (the variable is removed when nothing
// is left), and USLAB_NO_CHILDREN too, before main: this process keeps uslab, the
// programs it starts do not. In place and with unsetenv, which allocate nothing,
// before any thread can read the environment.
void drop_preload_for_children() {
  if (!getenv(kNoChildren)) return;
  unsetenv(kNoChildren);
  char* list = getenv("LD_PRELOAD");
  if (!list) return;
  char* out = list;
  for (char* p = list; *p;) {
    while (*p == ':' || *p == ' ') p++;  // ld.so's separators
    char* end = p;
    while (*end && *end != ':' && *end != ' ') end++;
    if (end > p) {
      char saved = *end;
      *end = 0;
      bool ours = strstr(p, "libuslab") != nullptr;
      *end = saved;
      if (!ours) {
        if (out != list) *out++ = ':';
        memmove(out, p, static_cast<size_t>(end - p));
        out += end - p;
      }
    }
    p = end;
  }
  *out = 0;
  if (out == list) unsetenv("LD_PRELOAD");
}

#if defined(__GLIBC__) && !USLAB_NO_OVERRIDE
USLAB_STARTUP_STRING(kFree, "free");
USLAB_STARTUP_STRING(kUsableSize, "malloc_usable_size");

// glibc's free and malloc_usable_size, for blocks of glibc's malloc that reach
// uslab's (core/foreign/), and the program break before glibc's malloc could use it.
// musl has no such blocks: its loader's allocations are never freed, and the rest of
// musl calls the malloc that was interposed.
void find_glibc_malloc() {
  using FreeFn = void (*)(void*);
  using UsableFn = size_t (*)(void*);
  auto glibc_free = reinterpret_cast<FreeFn>(uslab::libc::dl_sym(RTLD_NEXT, kFree));
  auto glibc_usable = reinterpret_cast<UsableFn>(uslab::libc::dl_sym(RTLD_NEXT, kUsableSize));
  if (glibc_free == uslab_own_free || glibc_usable == uslab_own_usable_size)
    return;  // ours, linked in
  uslab::foreign::glibc_chunks_init(reinterpret_cast<const void*>(syscall(SYS_brk, 0)));
  uslab::foreign::set_hooks({glibc_free, glibc_usable, uslab::foreign::is_glibc_block});
}
#endif

__attribute__((constructor(101))) void uslab_process_init() {
  drop_preload_for_children();
#if defined(__GLIBC__) && !USLAB_NO_OVERRIDE
  find_glibc_malloc();  // a build under uslab's names alone is never given glibc's blocks
#endif
  uslab::heap::init();
#ifdef __GLIBC__
  __register_atfork(uslab::heap::fork_prepare, uslab::heap::fork_parent, uslab::heap::fork_child,
                    nullptr);
#else
  pthread_atfork(uslab::heap::fork_prepare, uslab::heap::fork_parent, uslab::heap::fork_child);
#endif
}

__attribute__((destructor(101))) void uslab_process_fini() {
  uslab::prof::at_exit();
  if (uslab::heap::stats_at_exit()) uslab::heap::stats_print_stderr();
}

}  // namespace
