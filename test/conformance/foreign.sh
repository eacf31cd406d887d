#!/usr/bin/env bash
# test/conformance/foreign.sh LIB FOREIGN FOREIGN_LIB — foreign pointers: a
# RTLD_DEEPBIND library's glibc blocks freed, realloc'd and measured through uslab
# work by default (foreign_free=forward; the statistics count the forwarded frees);
# with foreign_free=report one such free is reported and the program goes on; with
# foreign_free=abort it is reported with the pointer and aborts. A pointer inside
# uslab's own memory still aborts (bad_free.sh: interior, double frees).
set -u
lib=$1 exe=$2 flib=$3
mode=${USLAB_CONF:+$USLAB_CONF,}
fail=0
bad() { echo "FAIL: $*"; fail=1; }

out=$(LD_PRELOAD=$lib USLAB_CONF=${mode%,} USLAB_STATS=1 "$exe" "$flib" forward 2>"$$.err"); rc=$?
err=$(cat "$$.err"); rm -f "$$.err"
[ $rc -eq 0 ] && [[ "$out" == *survived* ]] || { echo "$err" | tail -5; bad "forward: the program did not get through (rc=$rc)"; }
n=$(echo "$err" | sed -n 's/^foreign: \([0-9]*\) frees.*/\1/p')
[ "${n:-0}" -ge 300 ] || bad "forward: $n frees forwarded, expected 300 (150 frees, 150 reallocs)"
echo "forward: $n frees of glibc blocks forwarded"

out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}foreign_free=report "$exe" "$flib" one 2>"$$.err"); rc=$?
err=$(cat "$$.err"); rm -f "$$.err"
ptr=$(echo "$out" | head -1)
[ $rc -eq 0 ] && [[ "$out" == *survived* ]] || bad "report: the program must go on (rc=$rc)"
[[ "$err" == *"uslab: free of $ptr, not allocated by uslab"* ]] || bad "report: no report naming $ptr ($err)"

out=$(LD_PRELOAD=$lib USLAB_CONF=${mode}foreign_free=abort "$exe" "$flib" one 2>"$$.err"); rc=$?
err=$(cat "$$.err"); rm -f "$$.err"
ptr=$(echo "$out" | head -1)
[ $rc -ne 0 ] && [[ "$out" != *survived* ]] || bad "abort: the program must abort (rc=$rc)"
[[ "$err" == *"free of invalid pointer of $ptr (not allocated by uslab)"* ]] || bad "abort: no report naming $ptr ($err)"
[ $fail -eq 0 ] && echo "foreign: ok"
exit $fail
