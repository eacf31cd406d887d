// preload/init.cc — process-level hooks of libuslab.so: fork handlers and the
// stats report at exit.
//
// Initialisation itself is lazy (the first malloc can come from ld.so before any
// constructor runs); this constructor only does what must wait for libc: register
// pthread_atfork handlers. Forks that run no handlers (_Fork, vfork, posix_spawn)
// must not touch the heap in the child before exec (see README).
// Locking: none of its own; the fork handlers take and release every heap lock.
#include <pthread.h>

#include "core/heap.h"

namespace {

__attribute__((constructor(101))) void uslab_process_init() {
  uslab::heap::init();
  pthread_atfork(uslab::heap::fork_prepare, uslab::heap::fork_parent, uslab::heap::fork_child);
}

__attribute__((destructor(101))) void uslab_process_fini() {
  uslab::prof::at_exit();
  if (uslab::heap::stats_at_exit()) uslab::heap::stats_print_stderr();
}

}  // namespace
