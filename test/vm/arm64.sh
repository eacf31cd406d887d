#!/bin/bash
# test/vm/arm64.sh BUILD [CPUS] [PAGE] [checks|rss] — the arm64 guest: Debian's arm64 kernel
# (PAGE 4k: bookworm's linux-image-arm64, 6.1; 16k: trixie's linux-image-arm64-16k,
# 6.12, 16 KiB pages) booted by qemu-system-aarch64 -M virt under TCG,
# from an initramfs that holds the cross build's unit tests, libuslab.so and test
# programs with the cross toolchain's libraries. Its /init (arm64_init.c) runs the
# unit suite in the three fast-path modes; preloaded in per-CPU mode, the conformance
# and stress programs that run alone, memory's return after a 1 GB peak with no call,
# a CPU going offline and back, guarded sampling's read and write faults, and churn
# under a signal storm (glibc's rseq registration and uslab's): the restartable
# sections of percpu_rseq_aarch64.h and the page-granular calls on a real arm64 kernel.
# With MODE rss, the guest runs bench/rss frag under uslab, glibc and Debian's arm64
# jemalloc and mimalloc instead, three alternated rounds (memory is real in a guest;
# its timings are not).
# BUILD is a cross build (tools/uslab build --arch arm64). Exit status 0 when every
# check passed, 77 when the guest cannot run here (printed), 1 otherwise.
set -euo pipefail
build=$(cd "$1" && pwd)
cpus=${2:-4}
page=${3:-4k}
case $page in 4k|16k) ;; *) echo "test/vm/arm64.sh: PAGE is 4k or 16k" >&2; exit 2 ;; esac
mode=${4:-checks}
case $mode in checks|rss) ;; *) echo "test/vm/arm64.sh: MODE is checks or rss" >&2; exit 2 ;; esac
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }

command -v qemu-system-aarch64 >/dev/null || skip "no qemu-system-aarch64 (Debian: qemu-system-arm)"
command -v cpio >/dev/null || skip "no cpio"
progs="unit_tests churn api new_delete stats bulk_cache jemalloc_api stress_threads idle_return
  vm_hotplug guarded"
[ -x "$build/bench/rss" ] || skip "$build holds no arm64 build of bench/rss"
for p in $progs; do
  [ -x "$build/test/$p" ] || skip "$build holds no arm64 build of test/$p"
done
[ -f "$build/libuslab.so" ] || skip "$build holds no libuslab.so"
file -L "$build/libuslab.so" | grep -q aarch64 || skip "$build is not an arm64 build"
sysroot=/usr/aarch64-linux-gnu/lib
[ -f "$sysroot/ld-linux-aarch64.so.1" ] || skip "no arm64 C library at $sysroot (g++-aarch64-linux-gnu)"

# The kernel: bookworm's arm64 image, downloaded once (needs the arm64 architecture
# in dpkg, which tools/uslab build --arch arm64 adds); for 16k, trixie's, found in
# trixie's package index (this machine's apt knows bookworm only).
cache=${USLAB_VM_CACHE:-/var/cache/uslab/vm}/arm64
mkdir -p "$cache" "$cache/16k"
kdir=$cache
[ "$page" = 16k ] && kdir=$cache/16k
kernel=$(ls "$kdir"/vmlinuz-* 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$kernel" ] && [ "$page" = 16k ]; then
  command -v curl >/dev/null || skip "no curl to download trixie's 16k kernel"
  mirror=${USLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  tmp=$(mktemp -d)
  curl -fsS -o "$tmp/Packages.xz" "$mirror/dists/trixie/main/binary-arm64/Packages.xz" ||
    { rm -rf "$tmp"; skip "could not download trixie's package index"; }
  # The metapackage names the image; the image's stanza its file. (awk reads to the
  # end: an early exit would stop xz with SIGPIPE, a failure under pipefail.)
  index() { xz -dc "$tmp/Packages.xz" | awk -v p="$1" -v f="$2" '
    $0 == "Package: " p {s = 1}
    s && !done && index($0, f ": ") == 1 {sub(f ": ", ""); print; done = 1}
    s && $0 == "" {s = 0}'; }
  pkg=$(index linux-image-arm64-16k Depends | sed 's/ .*//')
  file=$([ -n "$pkg" ] && index "$pkg" Filename)
  [ -n "$file" ] || { rm -rf "$tmp"; skip "trixie's index names no linux-image-arm64-16k"; }
  curl -fsS -o "$tmp/k.deb" "$mirror/$file" || { rm -rf "$tmp"; skip "could not download $file"; }
  dpkg-deb -x "$tmp/k.deb" "$tmp/x"
  cp "$tmp"/x/boot/vmlinuz-* "$kdir/"
  rm -rf "$tmp"
  kernel=$(ls "$kdir"/vmlinuz-* | sort -V | tail -1)
fi
if [ -z "$kernel" ]; then
  pkg=$(apt-cache depends linux-image-arm64:arm64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
  [ -n "$pkg" ] || skip "apt knows no linux-image-arm64:arm64 (dpkg --add-architecture arm64; apt-get update)"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) || { rm -rf "$tmp"; skip "could not download $pkg"; }
  dpkg-deb -x "$tmp"/*.deb "$tmp/x"
  cp "$tmp"/x/boot/vmlinuz-* "$cache/"
  rm -rf "$tmp"
  kernel=$(ls "$cache"/vmlinuz-* | sort -V | tail -1)
fi

# A shell and the usual commands for the tests that run them (busybox), downloaded once.
busybox=$cache/busybox
if [ ! -x "$busybox" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download busybox-static:arm64 >/dev/null 2>&1) || { rm -rf "$tmp"; skip "could not download busybox-static:arm64"; }
  dpkg-deb -x "$tmp"/*.deb "$tmp/x"
  cp "$tmp/x/bin/busybox" "$busybox"
  rm -rf "$tmp"
fi

# The peers of the memory benchmark: Debian's arm64 packages, downloaded once.
if [ "$mode" = rss ]; then
  for p in libjemalloc2:libjemalloc.so.2 libmimalloc2.0:libmimalloc.so.2; do
    [ -f "$cache/${p#*:}" ] && continue
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download "${p%%:*}:arm64" >/dev/null 2>&1) ||
      { rm -rf "$tmp"; skip "could not download ${p%%:*}:arm64"; }
    dpkg-deb -x "$tmp"/*.deb "$tmp/x"
    cp -L "$tmp"/x/usr/lib/aarch64-linux-gnu/"${p#*:}" "$cache/"
    rm -rf "$tmp"
  done
fi

work=$(mktemp -d /tmp/uslab-vm-arm64.XXXXXX)  # kept: console.log is the guest's output
root=$work/root
mkdir -p "$root"/{proc,sys,dev,tmp,lib}
aarch64-linux-gnu-gcc -O2 -static -o "$root/init" "$src/test/vm/arm64_init.c"
for p in $progs; do cp "$build/test/$p" "$root/"; done
cp -L "$build/libuslab.so" "$root/libuslab.so"
cp -L "$build/libuslab.so" "$root/lib/libuslab.so.0"  # the programs linked with it
cp "$build/bench/rss" "$root/"
[ "$mode" = rss ] && cp "$cache/libjemalloc.so.2" "$cache/libmimalloc.so.2" "$root/lib/"
for l in ld-linux-aarch64.so.1 libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1; do
  cp -L "$sysroot/$l" "$root/lib/"
done
# hwloc, which uslab opens when asked (the unit suite's topology tests): libhwloc15:arm64.
for l in libhwloc.so.15 libudev.so.1; do
  [ -f "/usr/lib/aarch64-linux-gnu/$l" ] && cp -L "/usr/lib/aarch64-linux-gnu/$l" "$root/lib/"
done
mkdir -p "$root/bin"
cp "$busybox" "$root/bin/busybox"
for c in sh rm mkdir rmdir cat ls cp mv true false echo sleep grep; do ln -s busybox "$root/bin/$c"; done
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"
rm -rf "$root"

bench_arg=""
[ "$mode" = rss ] && bench_arg=" uslab.rss"  # /init runs the benchmark instead
echo "arm64 guest: $cpus CPUs, $(basename "$kernel") ($page pages), tcg"
start=$(date +%s)
timeout "${USLAB_VM_TIMEOUT:-1500}" qemu-system-aarch64 -M virt -cpu max -smp "$cpus" -m 3072 \
  -accel tcg,thread=multi -nic none -nographic -no-reboot -monitor none -serial "file:$work/console.log" \
  -kernel "$kernel" -initrd "$work/initrd.gz" \
  -append "console=ttyAMA0 rdinit=/init quiet panic=-1${bench_arg}" \
  </dev/null >/dev/null 2>&1 || true
grep -a '^uslab-guest:' "$work/console.log" || true
echo "arm64 guest: $(( $(date +%s) - start )) s (console: $work/console.log)"
grep -aq '^uslab-guest: done, 0 failed' "$work/console.log" && exit 0
echo "arm64 guest: failed; the console's last lines:"
tail -n 40 "$work/console.log"
exit 1
