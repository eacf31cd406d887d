#!/usr/bin/env bash
# test/programs/install.sh BUILD — `meson install` splits libuslab.so's debug info:
# the installed library keeps its symbol table (perf names functions) and a
# .gnu_debuglink, and <prefix>/lib/debug/.build-id/xx/yyyy.debug holds the DWARF.
set -u
build=$1
dest=$(mktemp -d); trap 'rm -rf "$dest"' EXIT
fail=0; total=0
check() { total=$((total+1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail+1)); fi; }
DESTDIR="$dest" meson install -C "$build" --quiet >/dev/null 2>&1
lib=$(find "$dest" -name 'libuslab.so.*.*' -type f | head -1)
dbg=$(find "$dest" -path '*/lib/debug/.build-id/*.debug' -type f | head -1)
check "library installed" '[ -n "$lib" ]'
check "debug file installed" '[ -n "$dbg" ]'
if [ -n "$lib" ] && [ -n "$dbg" ]; then
  id=$(readelf -n "$lib" | awk '/Build ID/ {print $3}')
  check "debug file named by the build id" '[ "$dbg" = "${dbg%/lib/debug/*}/lib/debug/.build-id/${id:0:2}/${id:2}.debug" ]'
  check "library has no DWARF left" '! readelf -S "$lib" | grep -q "\.debug_info"'
  check "library keeps its symbol table" 'readelf -S "$lib" | grep -q "\.symtab"'
  check "library links to its debug file" 'readelf -p .gnu_debuglink "$lib" | grep -q "${id:2}.debug"'
  check "debug file has the DWARF" 'readelf -S "$dbg" | grep -q "\.debug_info"'
  check "symbols still name the fast path" 'nm "$lib" | grep -q " uslab_free_deferred$"'
fi
echo "install: $total checks, $fail failed"
[ $fail -eq 0 ]
