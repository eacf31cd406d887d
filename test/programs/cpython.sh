#!/usr/bin/env bash
# test/programs/cpython.sh LIB [all] — CPython's own regression suite (Debian's
# libpython3.11-testsuite) with PYTHONMALLOC=malloc, so that every Python object is
# allocated by the preloaded library: run once under glibc and once under uslab, and
# each test case must end the same way in both (passed, failed, skipped), compared
# case by case from regrtest's JUnit XML. Without an argument, the modules below
# (containers, strings, codecs, json, pickle, re, threads, processes, mmap, gc, ...:
# a few minutes); with `all`, the whole suite (`tools/uslab test cpython-full`).
# test_tracemalloc and test_capi measure the allocator itself and are left out.
set -u
lib=$(realpath "$1")
scope=${2:-subset}
py=/usr/bin/python3
ver=$($py -c 'import sys; print("%d.%d" % sys.version_info[:2])')
testdir=$($py -c 'import os, test; print(os.path.dirname(test.__file__))' 2>/dev/null)
if [ -z "$testdir" ] || [ ! -e "$testdir/test_json" ]; then
  echo "FAIL: no CPython test suite for $py $ver (uslab test installs libpython$ver-testsuite)"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "$scope" = all ]; then
  tests=(-x test_tracemalloc test_capi)
  jobs=(-j2)
else
  tests=(test_list test_dict test_set test_tuple test_deque test_collections test_bytes
         test_str test_unicode_identifiers test_codecs test_json test_pickle test_re
         test_array test_memoryview test_struct test_itertools test_functools test_sort
         test_heapq test_bisect test_weakref test_gc test_threading test_queue
         test_subprocess test_mmap test_zlib test_io test_fstring test_decimal)
  jobs=(-j2)
fi

# run TAG ENV...: the suite, its JUnit XML in $work/TAG.xml.
run() {
  local tag=$1; shift
  (cd "$work" && env "$@" PYTHONMALLOC=malloc HOME="$work" timeout 3000 \
    $py -m test "${jobs[@]}" --timeout 600 --junit-xml "$work/$tag.xml" "${tests[@]}") \
    >"$work/$tag.log" 2>&1
}
start=$(date +%s)
run glibc LD_PRELOAD=
t_glibc=$(( $(date +%s) - start ))
start=$(date +%s)
run uslab LD_PRELOAD="$lib"
t_uslab=$(( $(date +%s) - start ))

# Case by case: name -> outcome, for each run.
$py - "$work/glibc.xml" "$work/uslab.xml" "$t_glibc" "$t_uslab" <<'EOF'
import sys
import xml.etree.ElementTree as ET

def outcomes(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"FAIL: no JUnit XML from the run ({path}: {e})")
        sys.exit(1)
    out = {}
    for case in root.iter("testcase"):
        name = f'{case.get("classname")}.{case.get("name")}'
        kind = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                kind = "failed"
            elif child.tag == "skipped" and kind == "passed":
                kind = "skipped"
        out[name] = kind
    return out

ref, got = outcomes(sys.argv[1]), outcomes(sys.argv[2])
count = lambda d, k: sum(1 for v in d.values() if v == k)
print(f"glibc: {len(ref)} cases, {count(ref, 'passed')} passed, {count(ref, 'failed')} failed, "
      f"{count(ref, 'skipped')} skipped in {sys.argv[3]} s")
print(f"uslab: {len(got)} cases, {count(got, 'passed')} passed, {count(got, 'failed')} failed, "
      f"{count(got, 'skipped')} skipped in {sys.argv[4]} s")
differ = sorted(n for n in set(ref) | set(got) if ref.get(n) != got.get(n))
for n in differ[:30]:
    print(f"  {n}: glibc {ref.get(n, 'absent')}, uslab {got.get(n, 'absent')}")
if len(ref) < 100 or count(ref, "passed") < 100:
    print("FAIL: the reference run under glibc ran too few cases")
    sys.exit(1)
if differ:
    print(f"FAIL: {len(differ)} cases end differently under uslab")
    sys.exit(1)
print("cpython: every case ends as it does under glibc")
EOF
rc=$?
if [ $rc -ne 0 ]; then tail -20 "$work/uslab.log"; fi
# The same interpreter and environment served by uslab (USLAB_STATS stays off in the
# suite's runs: regrtest reads its workers' output, which the report would join).
served=$(cd "$work" && LD_PRELOAD="$lib" USLAB_STATS=1 PYTHONMALLOC=malloc \
  $py -c 'import test.support, json; json.dumps(list(range(10000)))' 2>&1 | awk '/^small: /{print $2; exit}')
[ "${served:-0}" -gt 0 ] || { echo "FAIL: uslab served no allocations of $py (not preloaded?)"; rc=1; }
exit $rc
