// core/platform/thread_annotations.h — Clang's thread-safety attributes, by name.
//
// Owns: the USLAB_* macros that tell Clang's -Wthread-safety analysis which Mutex
// guards which data (USLAB_GUARDED_BY), which functions need a lock held
// (USLAB_REQUIRES: the *_locked functions) and which take or release one. Clang
// builds (the fuzz build, in CI) compile the core with -Wthread-safety as an error,
// so a guarded field touched without its lock, or a *_locked function called
// without it, fails the build; GCC ignores them (the macros expand to nothing).
// The run-time side of the same rules is the debug checks (mutex.h: rank order,
// held()).
//
// Locking: none (declarations only).
#pragma once

#if defined(__clang__)
#define USLAB_TSA(x) __attribute__((x))
#else
#define USLAB_TSA(x)
#endif

#define USLAB_CAPABILITY(name) USLAB_TSA(capability(name))
#define USLAB_SCOPED_CAPABILITY USLAB_TSA(scoped_lockable)
#define USLAB_GUARDED_BY(m) USLAB_TSA(guarded_by(m))
#define USLAB_PT_GUARDED_BY(m) USLAB_TSA(pt_guarded_by(m))
#define USLAB_REQUIRES(...) USLAB_TSA(requires_capability(__VA_ARGS__))
#define USLAB_EXCLUDES(...) USLAB_TSA(locks_excluded(__VA_ARGS__))
#define USLAB_ACQUIRE(...) USLAB_TSA(acquire_capability(__VA_ARGS__))
#define USLAB_RELEASE(...) USLAB_TSA(release_capability(__VA_ARGS__))
#define USLAB_TRY_ACQUIRE(...) USLAB_TSA(try_acquire_capability(__VA_ARGS__))
#define USLAB_RETURN_CAPABILITY(m) USLAB_TSA(lock_returned(m))
// A function whose locking the analysis cannot follow (fork's walk over every
// registered lock, a lock taken in one function and released in another); its
// comment says why it is right.
#define USLAB_NO_THREAD_SAFETY_ANALYSIS USLAB_TSA(no_thread_safety_analysis)
