#!/bin/bash
# test/conformance/mode.sh LIB PROG — the fast-path mode each environment gets, read
# from the first line of the USLAB_STATS report of PROG (any program that allocates):
#  - by default on this machine: per-CPU sheaves through glibc's rseq registration
#    (fails on a kernel or glibc without rseq, which is what it is meant to show);
#  - GLIBC_TUNABLES=glibc.pthread.rseq=0: per-CPU through uslab's own registration;
#  - the fast paths' addressing form: auto's choice (base on Intel CPUs, index on
#    others), and each one as sheaf_addressing asks (on aarch64, index whatever it asks);
#  - USLAB_CONF=percpu=false: per-thread caches, forced;
#  - under valgrind (no rseq there), when installed: per-thread caches.
set -u
lib=$1 prog=$2
fail=0
expect() {  # expect NAME PATTERN CMD...
  local name=$1 pattern=$2
  shift 2
  local line
  line=$(USLAB_STATS=1 "$@" 2>&1 >/dev/null | grep -m1 '^uslab stats')
  if [[ $line == *"$pattern"* ]]; then
    echo "ok: $name: $line"
  else
    echo "FAIL: $name: expected '$pattern', got '$line'"
    fail=1
  fi
}
expect "default" "mode: percpu (rseq, glibc's registration)" env LD_PRELOAD="$lib" "$prog"
expect "glibc rseq off" "mode: percpu (rseq, uslab's registration)" \
  env GLIBC_TUNABLES=glibc.pthread.rseq=0 LD_PRELOAD="$lib" "$prog"
# The fast paths' addressing form (sheaf_addressing): auto takes base on Intel CPUs.
# aarch64 has one form, index (core/alloc/percpu_rseq_aarch64.h): the option has no
# effect there.
auto_form=index base_form=base
grep -q -m1 GenuineIntel /proc/cpuinfo && auto_form=base
[ "$(uname -m)" = aarch64 ] && base_form=index
expect "addressing auto" "registration), $auto_form addressing;" env LD_PRELOAD="$lib" "$prog"
expect "sheaf_addressing=base" "registration), $base_form addressing;" \
  env USLAB_CONF=sheaf_addressing=base LD_PRELOAD="$lib" "$prog"
expect "sheaf_addressing=index" "registration), index addressing;" \
  env USLAB_CONF=sheaf_addressing=index LD_PRELOAD="$lib" "$prog"
expect "percpu=false" "mode: per-thread caches (forced by percpu=false)" \
  env USLAB_CONF=percpu=false LD_PRELOAD="$lib" "$prog"
if command -v valgrind >/dev/null; then
  expect "valgrind" "mode: per-thread caches (rseq unavailable)" \
    env LD_PRELOAD="$lib" valgrind -q --tool=none "$prog"
else
  echo "note: valgrind not installed; its per-thread fallback is not checked"
fi
exit $fail
