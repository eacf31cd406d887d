#!/usr/bin/env bash
# test/programs/static_link.sh SRC BUILD — static binaries linked with the installed
# libuslab.a, by the link lines docs/PLATFORMS.md gives: `pkg-config --static uslab`, and
# -Wl,--whole-archive -luslab -Wl,--no-whole-archive. Built from the project's own
# tests with USLAB_TEST_STATIC (test/common/check.h): the C API conformance test,
# the C++ operator test, the threads stress test under a signal storm, memory coming
# back after a peak with no further call (uslab's background thread, which needs
# pthread_create linked in), and a program that calls malloc only through libc
# (strdup, fopen, asprintf).
# Each binary must hold none of glibc's malloc (its _int_malloc), pass its checks,
# and print uslab's table at exit with USLAB_STATS=1.
set -u
src=$1 build=$2
dest=$(mktemp -d); [ -n "${KEEP:-}" ] || trap 'rm -rf "$dest"' EXIT
fail=0; total=0
check() { total=$((total+1)); if ! eval "$2"; then echo "FAIL: $1"; fail=$((fail+1)); fi; }
DESTDIR="$dest" meson install -C "$build" --quiet >/dev/null 2>&1
prefix=$(meson introspect --buildoptions "$build" |
         python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
pc=$(find "$dest" -name uslab.pc | head -1)
archive=$(find "$dest" -name libuslab.a | head -1)
check "libuslab.a installed" '[ -n "$archive" ]'
check "uslab.pc installed" '[ -n "$pc" ]'
[ -n "$pc" ] && [ -n "$archive" ] || { echo "static_link: $total checks, $fail failed"; exit 1; }
pkg() { PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --define-variable=prefix="$dest$prefix" "$@" uslab; }
flags=$(pkg --static --cflags --libs)
check "pkg-config --static names the archive and pulls it in whole" \
  '[[ "$flags" == *-luslab* && "$flags" == *-Wl,-u,malloc* ]]'

cat > "$dest/via_libc.c" <<'C'
/* Calls malloc only through libc: strdup, fopen's buffer, asprintf. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <string.h>
int main(void) {
  char *s = strdup("static"), *t = NULL;
  FILE *f = fopen("/proc/self/maps", "r");
  int lines = 0;
  char line[512];
  while (f && fgets(line, sizeof line, f)) lines++;
  if (f) fclose(f);
  if (asprintf(&t, "%s %d", s, lines > 0) < 0) return 1;
  puts(t);
  return strcmp(t, "static 1") != 0;
}
C
# As meson builds the preloaded tests: no builtin malloc (no call elided or fused).
cflags="-O1 -D_GNU_SOURCE -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc
        -fno-builtin-realloc -Wno-unused-result"
# name, compiler, source, extra flags, USLAB_CONF, arguments
progs=(
  "api|cc|test/conformance/api.c|||"
  "new_delete|c++|test/conformance/new_delete.cc|-fno-builtin||"
  "threads|cc|test/stress/threads.c|-pthread||4 2 10 signals"
  "idle_return|cc|test/stress/idle_return.c||decay_ms=400|400 none"
  "via_libc|cc|$dest/via_libc.c|||")
for p in "${progs[@]}"; do
  IFS='|' read -r name compiler file extra conf args <<<"$p"
  [[ $file == /* ]] || file=$src/$file
  bin=$dest/$name
  # shellcheck disable=SC2086
  check "$name links with pkg-config --static" \
    '$compiler -static $cflags -DUSLAB_TEST_STATIC -I"$src" $extra "$file" -o "$bin" $flags 2>"$bin.log" || { cat "$bin.log"; false; }'
  [ -x "$bin" ] || continue
  check "$name holds none of glibc's malloc" '! nm "$bin" | grep -qw _int_malloc'
  check "$name is static" '! readelf -d "$bin" 2>/dev/null | grep -q NEEDED'
  # shellcheck disable=SC2086
  check "$name passes" 'USLAB_CONF=$conf USLAB_STATS=1 "$bin" $args >"$bin.out" 2>"$bin.err" || { tail -n 5 "$bin.out" "$bin.err"; false; }'
  check "$name: uslab's table at exit" 'grep -q "^uslab stats" "$bin.err" || { tail -n 5 "$bin.err"; false; }'
done
check "topology=hwloc: the static binary says it loads no hwloc" \
  'USLAB_CONF=topology=hwloc "$dest/via_libc" 2>&1 | grep -q "a static binary loads no libhwloc"'
# The explicit line, without pkg-config.
libdir=$(dirname "$archive")
check "via_libc links with --whole-archive -luslab" \
  'cc -static -O2 "$dest/via_libc.c" -o "$dest/whole" -L"$libdir" -Wl,--whole-archive -luslab -Wl,--no-whole-archive -lpthread'
check "--whole-archive: uslab's table at exit" \
  'USLAB_STATS=1 "$dest/whole" 2>&1 >/dev/null | grep -q "^uslab stats"'
# Without either, a program that calls malloc only through libc gets glibc's: the
# reason for the flags (if this fails, the checks above prove less than they say).
check "control: -luslab alone leaves via_libc on glibc's malloc" \
  'cc -static -O2 "$dest/via_libc.c" -o "$dest/bare" -L"$libdir" -luslab && nm "$dest/bare" | grep -qw _int_malloc'
echo "static_link: $total checks, $fail failed"
[ $fail -eq 0 ]
