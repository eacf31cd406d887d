# test/programs/compare.sh — sourced by the real-program tests (run_programs.sh,
# runtimes.sh): compare_run NAME CMD... runs CMD in $work without uslab and with
# LD_PRELOAD=$lib USLAB_STATS=1, and leaves in $why what differs (exit status,
# output, no allocation served by uslab, a uslab error in its report; empty when the
# runs agree), with $ref_rc and $slab_bytes for the caller's own checks and message.
# Files: $work/NAME.{ref,referr,out,err}.
compare_run() {
  local name=$1; shift
  (cd "$work" && "$@") >"$work/$name.ref" 2>"$work/$name.referr"
  ref_rc=$?
  (cd "$work" && LD_PRELOAD=$lib USLAB_STATS=1 "$@") >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  why=""
  [ $rc -eq $ref_rc ] || why="exit status $rc, without uslab $ref_rc"
  cmp -s "$work/$name.ref" "$work/$name.out" || why="$why; output differs"
  grep -q "^uslab stats" "$work/$name.err" || why="$why; no uslab stats report (not preloaded?)"
  slab_bytes=$(awk '/^small: /{print $2; exit}' "$work/$name.err")
  [ "${slab_bytes:-0}" -gt 0 ] || why="$why; uslab served no allocations"
  grep -v -e '^uslab stats' -e '^ *[0-9]' -e '^ *class' -e '^small:' -e '^large:' -e '^pages:' \
    "$work/$name.err" | grep -q 'uslab:' && why="$why; uslab reported an error"
  return 0
}
