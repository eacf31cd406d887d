#!/bin/sh
# tools/split-debug.sh LIB [OBJCOPY] — meson install script: moves the DWARF of the
# installed LIB (a path under the install prefix) into <prefix>/lib/debug/.build-id/xx/yyyy.debug
# (Debian's layout, found by gdb and perf through the build id), leaving the symbol
# table (perf report names functions without the debug file) and a .gnu_debuglink.
# OBJCOPY: the binutils of LIB's architecture (a cross build's), objcopy by default.
set -eu
lib="$MESON_INSTALL_DESTDIR_PREFIX/$1"
objcopy=${2:-objcopy}
id=$(readelf -n "$lib" | awk '/Build ID/ {print $3}')
[ -n "$id" ] || { echo "split-debug: no build id in $lib" >&2; exit 1; }
rest=${id#??}
dir="$MESON_INSTALL_DESTDIR_PREFIX/lib/debug/.build-id/${id%"$rest"}"
mkdir -p "$dir"
$objcopy --only-keep-debug --compress-debug-sections "$lib" "$dir/$rest.debug"
$objcopy --strip-debug --add-gnu-debuglink="$dir/$rest.debug" "$lib"
echo "split-debug: $lib -> $dir/$rest.debug"
