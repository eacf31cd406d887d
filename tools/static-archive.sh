#!/bin/sh
# tools/static-archive.sh OUT.a INPUT... — libuslab.a for static binaries: every
# object of libuslab.so (the inputs: archives and object files) linked into one
# relocatable object, its hidden symbols made local, in an archive of that one member.
# One member: a static link takes all of uslab or none of it, never part of it beside
# part of libc.a's malloc (whose members would then define the same symbols twice).
# Local hidden symbols: the core's internals cannot clash with the program's.
set -eu
out=$1
shift
tmp=$(dirname "$out")/uslab-static.o
${LD:-ld} -r -o "$tmp" --whole-archive "$@" --no-whole-archive
${OBJCOPY:-objcopy} --localize-hidden --compress-debug-sections "$tmp"
rm -f "$out"
${AR:-ar} rcD "$out" "$tmp"
rm -f "$tmp"
