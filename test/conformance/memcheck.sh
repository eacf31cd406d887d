#!/usr/bin/env bash
# test/conformance/memcheck.sh LIB EXE — Valgrind's Memcheck sees uslab's objects when
# the library is built with -Dvalgrind=true (core/platform/track.h): EXE
# (test/conformance/memcheck.c) under Memcheck, LIB preloaded, case by case. A correct
# program gets no error; a read after free of every kind of object is an invalid read
# inside a freed block; a branch on fresh malloc memory is an uninitialised value; a
# block never freed is definitely lost. Memcheck replaces any malloc it finds, uslab's
# too, unless told not to (--soname-synonyms=somalloc=nouserintercepts): with it, the
# whole heap is uslab's; without it, the objects of uslab's own API still are.
set -u
lib=$1 exe=$2
fail=0
own=--soname-synonyms=somalloc=nouserintercepts
vg() {  # vg CASE: Memcheck's report of EXE CASE in $out, its exit status in $rc
  out=$(LD_PRELOAD=$lib valgrind -q --tool=memcheck --error-exitcode=9 --leak-check=full \
        --show-leak-kinds=definite --errors-for-leak-kinds=definite $own "$exe" "$1" 2>&1)
  rc=$?
}
expect() {  # expect CASE RC PATTERN...: exit status RC and every pattern in the report
  local what=$1 want=$2 pat; shift 2
  vg "$what"
  local bad=0
  [ "$rc" -eq "$want" ] || { echo "FAILED: $what: exit $rc, expected $want"; bad=1; }
  for pat in "$@"; do
    grep -qE -- "$pat" <<<"$out" || { echo "FAILED: $what: no '$pat' in the report"; bad=1; }
  done
  if [ $bad -eq 1 ]; then fail=1; echo "$out" | head -40; else echo "ok: $what"; fi
}
expect clean 0
[ -z "$out" ] || { echo "FAILED: clean: Memcheck said something:"; echo "$out" | head -40; fail=1; }
expect uaf-small 9 'Invalid read of size 1' 'inside a block of size 1[0-9][0-9] free.d'
expect uaf-large 9 'Invalid read of size 1' 'inside a block of size 10[0-9,]+ free.d'
expect uaf-huge 9 'Invalid read of size 1' 'inside a block of size [0-9,]+ free.d'
expect uaf-cache 9 'Invalid read of size 1' 'inside a block of size [0-9]+ free.d'
# (Memcheck names the nearest freed block: a neighbour's end, or this one.)
expect uaf-bulk 9 'Invalid read of size 1' '(inside|after) a block of size 32 free.d'
expect uninit 9 'depends on uninitialised value'
expect leak 9 '1,[0-9]{3} bytes in 1 blocks are definitely lost'
# The stacks are uslab's: its heap was checked, not Memcheck's replacement.
expect uaf-small 9 'by 0x[0-9A-F]+: (uslab::heap::|free)' 'track_alloc'
own=
expect uaf-cache 9 'Invalid read of size 1' 'inside a block of size [0-9]+ free.d'
exit $fail
