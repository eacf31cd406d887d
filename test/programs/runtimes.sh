#!/usr/bin/env bash
# test/programs/runtimes.sh LIB SRCDIR — language runtimes that lean on malloc, under
# LD_PRELOAD=libuslab.so: the JVM (NativeChurn.java: 16 threads, direct buffers and
# zlib streams, a 48 MiB Java heap so the collector frees native memory as it runs)
# and Node.js (native_churn.js: worker threads, Buffers, zlib). Each program's output
# must equal its output without uslab, and USLAB_STATS=1 must show that uslab served
# allocations. At least one of the two runtimes must be present (`uslab test`
# installs a JDK); a missing one is said, not passed in silence.
set -u
lib=$(realpath "$1")
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0; total=0; ran=0

. "$(dirname "$0")/compare.sh"

run() {
  local name=$1; shift
  total=$((total+1)); ran=$((ran+1))
  compare_run "$name" timeout 600 "$@"
  [ $ref_rc -eq 0 ] || why="$why; fails without uslab too"
  [ -s "$work/$name.ref" ] || why="$why; printed nothing"
  if [ -n "$why" ]; then
    fail=$((fail+1))
    echo "FAILED $name: ${why#; }"
    diff "$work/$name.ref" "$work/$name.out" | head -5
    tail -n 5 "$work/$name.referr" "$work/$name.err"
  else
    echo "ok $name ($(wc -l <"$work/$name.out") lines of identical output, $slab_bytes bytes in slabs)"
  fi
}

if command -v javac >/dev/null && command -v java >/dev/null; then
  if javac -d "$work" "$src/test/programs/NativeChurn.java" 2>"$work/javac.err"; then
    run jvm java -Xmx48m -XX:MaxDirectMemorySize=64m -cp "$work" NativeChurn 1500
  else
    cat "$work/javac.err"; total=$((total+1)); fail=$((fail+1)); echo "FAILED javac"
  fi
else
  echo "no JDK (java and javac): the JVM is not tested"
fi
node=$(command -v node || command -v nodejs)
if [ -n "$node" ]; then
  run node "$node" "$src/test/programs/native_churn.js" 2000
else
  echo "no Node.js: it is not tested"
fi
if [ $ran -eq 0 ]; then
  total=$((total+1)); fail=$((fail+1))
  echo "FAILED: neither a JVM nor Node.js to run (uslab test installs openjdk-17-jdk-headless)"
fi
echo "runtimes: $total checks, $fail failed"
[ $fail -eq 0 ]
