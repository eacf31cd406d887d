#!/usr/bin/env bash
# test/conformance/bad_free.sh LIB BAD_FREE_EXE — invalid and double frees are
# reported on stderr with the pointer and abort by default; with
# USLAB_CONF=abort_on_error=false they are reported and the program goes on; with
# poison=true a write after free is reported too, and with guard=true a write just
# outside a large object faults. A bad
# USLAB_CONF entry gets a one-line warning and the default. A USLAB_CONF in the
# environment (the fast-path mode under test) is kept in front of the keys set here.
set -u
lib=$1 exe=$2
# live_stats=false: no background thread started by the program's age between its two
# frees (slow under emulation), whose start allocates (glibc's pthread_create callocs
# the thread's TLS vector) and can be handed the block just freed, which the second
# free then frees as a live one, as in any program where a thread allocates between
# a double free's two calls.
mode=${USLAB_CONF:+$USLAB_CONF,}live_stats=false,
fail=0; total=0
check() { total=$((total+1)); if ! eval "$1"; then fail=$((fail+1)); echo "FAILED: $2"; fi; }

# Every case in the default mode; then, with poison=true (objects through their
# slabs, poisoned on free), those and the two only poison catches at once: a write
# after free and a double free with another free in between.
for run in default poison; do
  if [ $run = default ]; then
    cases="invalid interior double-small double-flushed double-large realloc-invalid"
    conf=$mode
  else
    cases="invalid interior double-small double-flushed double-large realloc-invalid write-after-free double-interleaved"
    conf=${mode}poison=true,
  fi
for what in $cases; do
  out=$(LD_PRELOAD=$lib USLAB_CONF=${conf%,} "$exe" "$what" 2>/tmp/uslab-bad.$$); rc=$?
  ptr=$(echo "$out" | head -1)
  err=$(cat /tmp/uslab-bad.$$)
  check '[ $rc -ne 0 ] && [ $rc -ne 2 ]' "$what: must abort (rc=$rc)"
  check '[[ "$err" == *"$ptr"* ]]' "$what: report must name the pointer $ptr (got: $err)"
  check '[[ "$err" == *"uslab:"* ]]' "$what: report must come from uslab"
  check '[[ "$out" != *survived* ]]' "$what: must not continue"

  out=$(LD_PRELOAD=$lib USLAB_CONF=${conf}abort_on_error=false "$exe" "$what" 2>/tmp/uslab-bad.$$); rc=$?
  err=$(cat /tmp/uslab-bad.$$)
  check '[ $rc -eq 0 ]' "$what with abort_on_error=false: must continue (rc=$rc)"
  check '[[ "$out" == *survived* ]]' "$what with abort_on_error=false: must survive"
  check '[[ "$err" == *"uslab:"* ]]' "$what with abort_on_error=false: must still report"
done
done
err=$(LD_PRELOAD=$lib USLAB_CONF=${mode}poison=true,abort_on_error=false "$exe" write-after-free 2>&1 >/dev/null)
check '[[ "$err" == *"write after free"*"byte 5 changed"* ]]' "write after free: must name the byte (got: $err)"

# guard=true: one byte past a large object's usable size, or one before it, faults
# (SIGSEGV: 139); without the guards the same write goes unnoticed.
for what in overflow-large underflow-large; do
  out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}guard=true "$exe" "$what" 2>/dev/null); rc=$?
  check '[ $rc -eq 139 ]' "$what with guard=true: must fault (rc=$rc)"
  check '[ -n "$out" ] && [[ "$out" != *survived* ]]' "$what with guard=true: must get as far as the write"
done

err=$(LD_PRELOAD=$lib USLAB_CONF=${mode}decay_ms=soon,bogus=1,tcache=0 "$exe" none 2>&1 >/dev/null)
check '[ $(echo "$err" | grep -c "uslab: USLAB_CONF: bad value for key .decay_ms.") -eq 1 ]' "bad value warning (got: $err)"
check '[ $(echo "$err" | grep -c "uslab: USLAB_CONF: unknown key .bogus.") -eq 1 ]' "unknown key warning (got: $err)"
err=$(LD_PRELOAD=$lib USLAB_CONF=${mode}shard_cpus=many,cpu_cache_bytes=12 "$exe" none 2>&1 >/dev/null)
check '[ $(echo "$err" | grep -c "uslab: USLAB_CONF: bad value for key .shard_cpus.") -eq 1 ]' "shard_cpus warning (got: $err)"
check '[ $(echo "$err" | grep -c "uslab: USLAB_CONF: bad value for key .cpu_cache_bytes.") -eq 1 ]' "cpu_cache_bytes warning (got: $err)"
rm -f /tmp/uslab-bad.$$
echo "bad_free: $total checks, $fail failed"
[ $fail -eq 0 ]
