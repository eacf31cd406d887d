#!/usr/bin/env bash
# test/programs/run_programs.sh LIB — real programs under LD_PRELOAD=libuslab.so:
# python3, g++ (compiling and running a C++ file), git, sort/awk/sed and perl. Each
# program's stdout must equal its stdout without uslab, and its USLAB_STATS=1 report
# must show that uslab served allocations (slabs > 0), so a run that silently fell
# back to glibc's malloc fails. With --available (the emulated guest, test/vm, which
# has no compiler or git), a program that is not installed is skipped with a line
# saying so; without it, a missing program fails.
set -u
available=0
[ "${1-}" = --available ] && { available=1; shift; }
lib=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0; total=0 skipped=0 needs=

. "$here/compare.sh"

# run NAME CMD...: compares CMD's stdout with and without uslab.
# needs= before it names the programs it runs (the first word of CMD when empty).
run() {
  local name=$1; shift
  local p
  for p in ${needs:-$1}; do
    if [ $available -eq 1 ] && ! command -v "$p" >/dev/null; then
      echo "skipped $name: $p is not installed"; skipped=$((skipped+1)); return
    fi
  done
  total=$((total+1))
  compare_run "$name" "$@"
  if [ -n "$why" ]; then
    fail=$((fail+1))
    echo "FAILED $name: ${why#; }"
    diff "$work/$name.ref" "$work/$name.out" | head -5
    grep 'uslab:' "$work/$name.err" | head -5
  else
    echo "ok $name ($(wc -c <"$work/$name.out") bytes of identical output, $slab_bytes bytes in slabs)"
  fi
}

seq 1 300000 | awk '{print ($1 * 7919) % 100003, "w" $1 % 977}' >"$work/data.txt"
cp "$here/workload.py" "$here/workload.cc" "$work/"

run python3 python3 workload.py
needs=g++ run gxx sh -c 'g++ -O1 -o prog workload.cc && ./prog'
needs=git run git sh -c '
  export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b
  export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
  export HOME=$PWD GIT_CONFIG_NOSYSTEM=1
  rm -rf repo && git init -q -b main repo && cd repo &&
  for i in 1 2 3; do seq $i 5000 >f$i.txt; git add f$i.txt; git commit -q -m "commit $i"; done &&
  git log --format="%H %s" && git diff HEAD~2 --stat'
run sort sort -n -k1,1 -k2 data.txt
run awk awk '{n[$2]++; s[$2]+=$1} END {for (k in n) print k, n[k], s[k]}' data.txt
run sed sed -e 's/w\([0-9]*\)/<\1>/' -e '/^1/d' data.txt
run perl perl -e 'my %h; my @a; while (<>) { my ($x, $w) = split; $h{$w} .= $x; push @a, [$x, $w]; }
  @a = sort { $a->[0] <=> $b->[0] or $a->[1] cmp $b->[1] } @a;
  print scalar(keys %h), " ", length(join("", values %h)), " $a[0][0] $a[-1][0]\n";' data.txt

echo "programs: $total checks, $fail failed$([ $skipped -gt 0 ] && echo ", $skipped skipped")"
[ $fail -eq 0 ]
