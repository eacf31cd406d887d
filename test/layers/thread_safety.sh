#!/usr/bin/env bash
# test/layers/thread_safety.sh — the lock annotations (core/platform/thread_annotations.h)
# reach Clang's -Wthread-safety: a field guarded by a Mutex, used without it, and a
# USLAB_REQUIRES function called without the lock, must each fail to compile; the
# same with the lock held must compile. Every Clang build of the core (the fuzz build
# in CI) compiles with -Werror=thread-safety (meson.build); this shows the check is
# real. Skips (77) where there is no clang++.
set -u
src=$1
cxx=$(command -v clang++ || command -v clang++-14) || { echo "SKIP: clang++ is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/t.cc" <<'CODE'
#include "core/platform/mutex.h"
struct Counter {
  uslab::Mutex lock;
  int n USLAB_GUARDED_BY(lock) = 0;
  void add_locked() USLAB_REQUIRES(lock) { n++; }
  void add() {
    uslab::LockGuard g(lock);
    n++;
    add_locked();
  }
  bool try_add() {
    if (!lock.try_lock()) return false;
    add_locked();
    lock.unlock();
    return true;
  }
#ifdef UNLOCKED_READ
  int read() { return n; }
#endif
#ifdef UNLOCKED_CALL
  void call() { add_locked(); }
#endif
#ifdef LEFT_HELD
  void leave() { lock.lock(); }
#endif
};
CODE
compile() { "$cxx" -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -I"$src" "$@" "$tmp/t.cc" 2>&1; }
rc=0
if ! out=$(compile); then
  echo "FAIL: correct locking refused:"; echo "$out"; rc=1
fi
for bad in UNLOCKED_READ UNLOCKED_CALL LEFT_HELD; do
  if out=$(compile -D$bad); then
    echo "FAIL: $bad compiled: the annotations do not reach Clang"; rc=1
  elif ! grep -q "thread-safety" <<<"$out"; then
    echo "FAIL: $bad refused for another reason:"; echo "$out"; rc=1
  else
    echo "ok: $bad refused ($(grep -o 'error: [^[]*' <<<"$out" | head -1))"
  fi
done
exit $rc
