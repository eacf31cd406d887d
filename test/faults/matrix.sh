#!/usr/bin/env bash
# test/faults/matrix.sh LIB VERIFY API STRESS — the fault-injection build's suite
# (meson -Dfault_injection=true, core/platform/fault.h): every system call uslab makes
# fails with each error the kernel answers there, on its Nth call, from then on, or
# at random from a seed, and the programs run preloaded:
#   VERIFY (test/faults/verify.c) always: content-verified churn over every entry
#     point, threads, cross-thread and deferred frees, trims; an allocation may fail,
#     only cleanly, and nothing else may change;
#   API (the C API conformance program) and STRESS (threads migrating under a signal
#     storm, contents verified) where the failure is one uslab must absorb: they
#     count every allocation on succeeding, as a program does.
# Each case's rule is printed, with uslab's seed, so that a failure can be repeated
# (USLAB_FAULT=RULE with the printed seed, LD_PRELOAD=LIB). Exit 0 when every case
# passed; the failing cases' output otherwise.
set -u
lib=$1 verify=$2 api=$3 stress=$4
slow=${USLAB_TEST_SLOWDOWN:-1}
pass=0 fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT  # the profiles the profiler writes

# The environment of the cases that follow (set_env VAR=value...): what makes uslab
# make the call at all (two NUMA nodes for mbind, its own rseq registration...).
with_env=()
set_env() { with_env=("$@"); }

# run RULE PROGRAM ARGS...: one run under the rule, which must pass; fired=1 when
# the fault fired in it.
fired=0
run() {
  local rule=$1; shift
  local out rc
  out=$(cd "$tmp" && timeout $((60 * slow)) env "${with_env[@]}" USLAB_FAULT="$rule" \
        LD_PRELOAD="$lib" "$@" 2>&1); rc=$?
  grep -q "uslab: fault injection: .* fails with" <<<"$out" && fired=1
  [ $rc -eq 0 ] && return 0
  echo "FAIL: USLAB_FAULT='$rule' $(basename "$1") (exit $rc)"
  grep -v "fails with" <<<"$out" | tail -8 | sed 's/^/    /'
  return 1
}

# case RULE PROGRAM...: the rule over each program (a command line of its own); the
# case passes when each does, and counts as skipped when uslab made no such call in
# any of them here (a call of a kernel or machine this one is not: mbind on real
# nodes, mprotect where guard regions stand in for it).
skipped=()
case_of() {
  local rule=$1 ok=0; shift
  fired=0
  for cmd in "$@"; do
    # shellcheck disable=SC2086
    run "$rule" $cmd || ok=1
  done
  if [ $ok -ne 0 ]; then fail=$((fail + 1))
  elif [ $fired -eq 0 ]; then skipped+=("$rule")
  else pass=$((pass + 1)); fi
}
# absorbed RULE...: failures a program never sees (nothing it asked for fails): all
# three programs. allocating RULE...: failures that may fail an allocation: the churn
# that expects it.
absorbed() {
  for rule in "$@"; do
    case_of "$rule" "$verify 2 1" "$api" "$stress 4 3 4 migrate signals"
  done
}
allocating() {
  for rule in "$@"; do case_of "$rule" "$verify 4 2"; done
}

# Mapping memory: ENOMEM (commit limit, RLIMIT_AS, mappings table), EAGAIN (locked
# memory limit), EPERM (a filter installed after start).
allocating mmap:ENOMEM:p20@1 mmap:ENOMEM:p300@2 mmap:ENOMEM:40+ mmap:EAGAIN:p100@3 mmap:EPERM:60+
allocating mremap:ENOMEM:p300@4 mremap:EAGAIN:p300@5 mremap:EFAULT:1+
allocating memfd_create:EMFILE:1+ ftruncate:EPERM:1+
# Giving back and protecting: ENOMEM (a split past vm.max_map_count), EINVAL (locked
# pages), EAGAIN, EPERM, EACCES; mprotect with guarded sampling often, mincore with
# the statistics at exit.
absorbed munmap:ENOMEM:p300@6 madvise:EINVAL:1+ madvise:ENOMEM:p300@7 madvise:EAGAIN:p300@8 \
  madvise:EPERM:20+
set_env USLAB_CONF=guard_sample=16k
absorbed mprotect:ENOMEM:p300@9 mprotect:EACCES:1+
# Shards' tables are made writable as the map gives shards CPUs (a shard a CPU here),
# the page map's root a page at a time: refused (the commit limit), the map makes do
# with fewer shards, and an allocation whose root page is refused fails.
set_env USLAB_CONF=shard_cpus=1
allocating mprotect:ENOMEM:1 mprotect:ENOMEM:2
set_env USLAB_STATS=1
absorbed mincore:ENOMEM:1+
set_env
# The CPU set, randomness, fences, files.
absorbed sched_getaffinity:EINVAL:1+ getrandom:EAGAIN:1+ getrandom:ENOSYS:1+ \
  membarrier:ENOMEM:p300@11 membarrier:EPERM:1+ membarrier:ENOSYS:1+ membarrier:EPERM:20+ \
  membarrier:EPERM:p100@18 "membarrier:EPERM:p100@19;sched_getaffinity:EPERM:1+" openat:EMFILE:1+ \
  openat:ENFILE:p300@12 openat:EACCES:1+
# On two NUMA nodes (hwloc's synthetic ones): binding segments, the task's policy.
set_env USLAB_CONF=topology=hwloc "HWLOC_SYNTHETIC=numa:2 pu:1"
absorbed mbind:EIO:p300@10 mbind:ENOMEM:1+ get_mempolicy:EINVAL:1+
# uslab's own rseq registration (glibc's off).
set_env GLIBC_TUNABLES=glibc.pthread.rseq=0
absorbed rseq:EPERM:1+ rseq:ENOSYS:1+ rseq:EINVAL:1+
# The profiler's writes at exit, which read the program's call stubs.
set_env USLAB_CONF=prof=true,prof_sample=64k,prof_final=true
absorbed process_vm_readv:EPERM:1+
set_env
# Everything at once, at random.
allocating any:ENOMEM:p50@13 any:ENOMEM:p50@14 any:EPERM:p100@15 any:EAGAIN:p100@16
[ ${#skipped[@]} -eq 0 ] || echo "not made here (skipped): ${skipped[*]}"
echo "fault injection: $pass passed, $fail failed, ${#skipped[@]} skipped"
[ $fail -eq 0 ]
