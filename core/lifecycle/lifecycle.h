// core/lifecycle/lifecycle.h — the process's life as the heap sees it: the library's
// start (init) and fork (the pthread_atfork handlers).
//
// Owns: the order in which the floors below start (configuration, topology, the
// report descriptor, the live region, the background thread, the profiler, the
// guarded pool) and the fork protocol over every lock of the lock table.
//
// Locking: every registered lock, in rank order (core/platform/lock_table.h), across
// a fork; init runs once, in the library's constructor, before threads exist.
#pragma once

namespace uslab::heap {

// Reads the configuration and starts what the configuration asks for (called once
// from the library's constructor).
void init();

// pthread_atfork handlers.
void fork_prepare();
void fork_parent();
void fork_child();

}  // namespace uslab::heap
