#!/usr/bin/env bash
# test/conformance/bad_free.sh LIB BAD_FREE_EXE — invalid and double frees are
# reported on stderr with the pointer and abort by default; with
# USLAB_CONF=abort_on_error=false they are reported and the program goes on. A bad
# USLAB_CONF entry gets a one-line warning and the default. A USLAB_CONF in the
# environment (the fast-path mode under test) is kept in front of the keys set here.
set -u
lib=$1 exe=$2
mode=${USLAB_CONF:+$USLAB_CONF,}
fail=0; total=0
check() { total=$((total+1)); if ! eval "$1"; then fail=$((fail+1)); echo "FAILED: $2"; fi; }

for what in invalid interior double-small double-flushed double-large realloc-invalid; do
  out=$(LD_PRELOAD=$lib "$exe" "$what" 2>/tmp/uslab-bad.$$); rc=$?
  ptr=$(echo "$out" | head -1)
  err=$(cat /tmp/uslab-bad.$$)
  check '[ $rc -ne 0 ] && [ $rc -ne 2 ]' "$what: must abort (rc=$rc)"
  check '[[ "$err" == *"$ptr"* ]]' "$what: report must name the pointer $ptr (got: $err)"
  check '[[ "$err" == *"uslab:"* ]]' "$what: report must come from uslab"
  check '[[ "$out" != *survived* ]]' "$what: must not continue"

  out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}abort_on_error=false "$exe" "$what" 2>/tmp/uslab-bad.$$); rc=$?
  err=$(cat /tmp/uslab-bad.$$)
  check '[ $rc -eq 0 ]' "$what with abort_on_error=false: must continue (rc=$rc)"
  check '[[ "$out" == *survived* ]]' "$what with abort_on_error=false: must survive"
  check '[[ "$err" == *"uslab:"* ]]' "$what with abort_on_error=false: must still report"
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
