#!/usr/bin/env bash
# test/conformance/guarded.sh LIB GUARDED_EXE — guarded sampling (USLAB_CONF
# guard_sample=1: every allocation is guarded while slots last) catches each kind of
# memory error on a guarded object at once or at its free, and reports it: the kind,
# the offset from the object, its size, the stack of the allocation (alloc_site) and,
# once freed, of the free (free_site); then aborts, or with guard_recover=true goes
# on. Without guarded sampling (guard_sample=0) the same overflow goes unnoticed. A
# USLAB_CONF in the environment (the fast-path mode under test) is kept in front.
set -u
lib=$1 exe=$2
# live_stats=false: no background thread started by the program's age in the middle
# of a count of guarded objects (slow under emulation): its start allocates, and with
# guard_sample=1 every allocation is guarded.
mode=${USLAB_CONF:+$USLAB_CONF,}live_stats=false,
# The OS page uslab works with (the kernel's, or a larger one os_page asks for).
page=$(getconf PAGESIZE)
if [[ $mode =~ os_page=([0-9]+) ]] && (( BASH_REMATCH[1] > page )); then page=${BASH_REMATCH[1]}; fi
fail=0; total=0
check() { total=$((total+1)); if ! eval "$1"; then fail=$((fail+1)); echo "FAILED: $2"; fi; }

# case : what the report's first line must say : the stacks after the allocation's
# (a free's, a deferred free's, none, or either: one-byte errors fault at once or are
# found at free, as the object lies at the end or the start of its pages)
cases=(
  "overflow-1:overflow*0 bytes past the end of the 64-byte object:any"
  "overflow-page:overflow*$((page == 4096 ? 4096 : page / 2)) bytes past the end of the 64-byte object:any"
  "underflow:underflow*1 byte before the 64-byte object:any"
  "uaf-read:use after free (read)*8 bytes inside the 64-byte object:free"
  "uaf-write:use after free (write)*8 bytes inside the 64-byte object:free"
  "double-free:double free*0 bytes inside the 64-byte object:free"
  "interior-free:invalid free*16 bytes inside the 64-byte object:alloc"
  "realloc-freed:realloc of a freed pointer*0 bytes inside the 64-byte object:free"
  "deferred:use after free (read)*3 bytes inside the 64-byte object:deferred"
  "fork-uaf:use after free (read)*8 bytes inside the 64-byte object:free"
  "sized-uaf:use after free (write)*8 bytes inside the 64-byte object:sized"
  "bulk-uaf:use after free (write)*8 bytes inside the 64-byte object:bulk"
  "cache-uaf:use after free (write)*8 bytes inside the 64-byte object:cache"
  "cache-double-free:double free*0 bytes inside the 64-byte object:cache"
  "large-uaf:use after free (write)*8 bytes inside the 40000-byte object:free"
  "large-overflow:overflow*0 bytes past the end of the 40000-byte object:any"
)
for c in "${cases[@]}"; do
  what=${c%%:*}; rest=${c#*:}; want=${rest%:*}; stacks=${rest##*:}
  out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=1 "$exe" "$what" 2>/tmp/uslab-guard.$$); rc=$?
  err=$(cat /tmp/uslab-guard.$$)
  obj=$(echo "$out" | head -1 | cut -d' ' -f1)
  first=$(echo "$err" | grep -m1 'uslab: guarded object:')
  check '[ $rc -ne 0 ] && [ $rc -ne 2 ]' "$what: must abort (rc=$rc)"
  check '[[ "$out" != *survived* ]]' "$what: must not continue"
  check '[[ "$first" == *$want* ]]' "$what: report must say '$want' (got: $first)"
  check '[[ "$first" == *"object at $obj "* ]]' "$what: report must name the object $obj (got: $first)"
  check '[[ "$err" == *"allocated by thread"*"alloc_site"*"main"* ]]' "$what: allocation stack (got: $err)"
  case $stacks in
    free) check '[[ "$err" == *"freed by thread"*"free_site"*"main"* ]]' "$what: free stack (got: $err)";;
    deferred) check '[[ "$err" == *"freed by thread"*"deferred_free_site"*"main"* ]]' "$what: free stack (got: $err)";;
    sized|bulk|cache)
      check '[[ "$err" == *"allocated by thread"*"${stacks}_alloc_site"*"freed by thread"* ]] ||
             [[ $stacks == sized ]]' "$what: allocation stack through the $stacks call (got: $err)"
      check '[[ "$err" == *"freed by thread"*"${stacks}_free_site"*"main"* ]]' \
        "$what: free stack through the $stacks call (got: $err)";;
    alloc) check '[[ "$err" != *"freed by thread"* ]]' "$what: no free stack for a live object";;
  esac
done

# guard_recover=true: reported once, and the program goes on.
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=1,guard_recover=true "$exe" uaf-write 2>/tmp/uslab-guard.$$); rc=$?
err=$(cat /tmp/uslab-guard.$$)
check '[ $rc -eq 0 ] && [[ "$out" == *survived* ]]' "uaf-write with guard_recover=true: must go on (rc=$rc)"
check '[ $(echo "$err" | grep -c "uslab: guarded object:") -eq 1 ]' "uaf-write with guard_recover=true: one report (got: $err)"

# The program's own SIGSEGV handler, installed later, still gets the faults outside
# the pool; fork with a guarded object live, the child execs.
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=1 "$exe" chain 2>&1); rc=$?
check '[ $rc -eq 3 ] && [[ "$out" == *"program handler"* ]] && [[ "$out" != *"uslab:"* ]]' "chain: the program's handler must run (rc=$rc, got: $out)"
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=1 "$exe" wild 2>&1); rc=$?
check '[ $rc -eq 139 ] && [[ "$out" != *"uslab:"* ]]' "wild: a fault outside the pool must get the default action (rc=$rc, got: $out)"
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=1 "$exe" fork 2>&1); rc=$?
check '[ $rc -eq 0 ] && [[ "$out" != *"uslab:"* ]]' "fork: child and parent free cleanly (rc=$rc, got: $out)"
# Every entry point takes part (aligned, sized delete of the wrong size, realloc,
# bulk, object caches), with nothing reported but the destroyed cache's live object.
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=1 "$exe" paths 2>&1); rc=$?
check '[ $rc -eq 0 ] && [ $(echo "$out" | grep -c "uslab:") -eq 1 ] &&
       [[ "$out" == *"cache '"'"'guarded-ctor'"'"' destroyed with 1 live objects"* ]]' \
  "paths: served and freed guarded (rc=$rc, got: $out)"
# The same with the heap profiler sampling too (turned on first, at another mean):
# all but one sample point in a million are still the guard's, from the first allocation.
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}prof=true,prof_sample=1m,prof_final=false,guard_sample=1 \
  "$exe" paths 2>&1); rc=$?
check '[ $rc -eq 0 ] && [[ "$out" == *"guarded paths:"*" 0 failed"* ]]' \
  "paths with the profiler on: served and freed guarded (rc=$rc, got: $out)"
# A one-byte overflow of each size, as the program asked for it (not its class's
# size): caught every time, at once or at free, one report an object.
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=1,guard_recover=true,abort_on_error=false,guard_slots=1024 \
  "$exe" off-by-one 2>/tmp/uslab-guard.$$); rc=$?
n=$(echo "$out" | sed -n 's/^\([0-9]*\) overflows$/\1/p')
got=$(grep -c "uslab: guarded object: overflow" /tmp/uslab-guard.$$)
all=$(grep -c "uslab: guarded object:" /tmp/uslab-guard.$$)
check '[ $rc -eq 0 ] && [[ "$out" == *"0 failed"* ]] && [ -n "$n" ] && [ "$got" -eq "$n" ] &&
       [ "$all" -eq "$n" ]' \
  "off-by-one: every one-byte overflow reported, nothing else (rc=$rc, $got of ${n:-?}, $all in all: $out)"
# No error: nothing reported.
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=1 "$exe" ok 2>&1); rc=$?
check '[ $rc -eq 0 ] && [[ "$out" != *"uslab:"* ]]' "ok: no report (rc=$rc, got: $out)"
# Off: the same one-byte overflow goes unnoticed.
out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard_sample=0 "$exe" overflow-1 2>&1); rc=$?
check '[ $rc -eq 0 ] && [[ "$out" == *survived* ]]' "overflow-1 with guard_sample=0: unnoticed (rc=$rc)"
# The default rate: N use-after-frees of 32 KiB, each guarded with probability
# p = 1 - exp(-32768 / guard_sample) (1 GiB: 1 in 32,800); the reports (guard_recover)
# must count N p within four standard deviations.
n=10000000
LD_PRELOAD=$lib USLAB_CONF=${mode}guard_recover=true "$exe" rate $n 32768 >/dev/null 2>/tmp/uslab-guard.$$
got=$(grep -c "uslab: guarded object: use after free (write)" /tmp/uslab-guard.$$)
read lo hi < <(python3 -c "import math; p=1-math.exp(-32768/(1<<30)); m=$n*p; s=math.sqrt(m*(1-p)); print(int(m-4*s), int(m+4*s)+1)")
check '[ $got -ge $lo ] && [ $got -le $hi ]' "default rate: $got of $n use-after-frees caught, want $lo-$hi"
echo "default rate: $got of $n use-after-frees of 32 KiB caught (expected $lo-$hi)"
rm -f /tmp/uslab-guard.$$
echo "guarded: $total checks, $fail failed"
[ $fail -eq 0 ]
