#!/usr/bin/env bash
# test/vm/kernel_deb.sh — downloads the kernel image package a Debian release's kernel
# metapackage names, from the mirror's package index (this machine's apt knows its own
# release alone), for the guests that boot other releases' kernels (image.sh, arm64.sh).
#
# usage: kernel_deb.sh SUITE ARCH METAPACKAGE OUT.deb
#   e.g. kernel_deb.sh bullseye amd64 linux-image-amd64 /tmp/k.deb
# USLAB_DEBIAN_MIRROR is the mirror (default deb.debian.org). Exit 0 with OUT.deb
# written, 1 with the reason on stderr.
set -u
[ $# -eq 4 ] || { echo "usage: kernel_deb.sh SUITE ARCH METAPACKAGE OUT.deb" >&2; exit 2; }
suite=$1 arch=$2 meta=$3 out=$4
mirror=${USLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v curl >/dev/null || { echo "kernel_deb.sh: no curl" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
curl -fsS -o "$tmp/Packages.xz" "$mirror/dists/$suite/main/binary-$arch/Packages.xz" ||
  { echo "kernel_deb.sh: could not download $suite's $arch package index" >&2; exit 1; }
# The metapackage names the image; the image's stanza its file. (awk reads to the end:
# an early exit would stop xz with SIGPIPE.)
index() { xz -dc "$tmp/Packages.xz" | awk -v p="$1" -v f="$2" '
  $0 == "Package: " p {s = 1}
  s && !done && index($0, f ": ") == 1 {sub(f ": ", ""); print; done = 1}
  s && $0 == "" {s = 0}'; }
pkg=$(index "$meta" Depends | sed 's/[ ,].*//')
file=$([ -n "$pkg" ] && index "$pkg" Filename)
[ -n "$file" ] || { echo "kernel_deb.sh: $suite's index names no $meta" >&2; exit 1; }
curl -fsS -o "$out" "$mirror/$file" || { echo "kernel_deb.sh: could not download $file" >&2; exit 1; }
