#!/usr/bin/env bash
# test/vm/image.sh — the guest image for the virtual-machine suite, built once and kept
# outside the clone: a Debian 12 (bookworm, the glibc this project builds against, so the
# host's build runs in it unchanged) root made with debootstrap, with a kernel, NUMA and
# cgroup tools, the peer allocators and python3, written into an ext4 image with
# mkfs.ext4 -d. Its kernel and initramfs are copied out for QEMU's -kernel/-initrd.
#
# usage: image.sh        prints the image directory (holds root.ext4, vmlinuz, initrd.img)
#        image.sh arm64  the arm64 guest's root instead (test/vm/arm64.sh), the same
#                        userland less the kernel, as an initramfs archive (root.cpio.gz)
#                        the guest runs from memory: it boots the arm64 kernels alone,
#                        whose 9p and block drivers are modules. debootstrap's second
#                        stage runs the arm64 binaries under qemu-user-static, through
#                        binfmt_misc (registered here when it is not).
# The directory is USLAB_VM_CACHE (default /var/cache/uslab/vm) plus the recipe's hash:
# a change to this file makes a new image. Exit 77 with the reason where it cannot be
# built (not root, no mirror, debootstrap failed): the suite then skips, never passes.
set -u
skip() { echo "SKIP: $*" >&2; exit 77; }
arch=${1:-amd64}
case $arch in amd64|arm64) ;; *) echo "image.sh: ARCH is amd64 or arm64" >&2; exit 2 ;; esac
mirror=${USLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The guest's packages: NUMA tools and hwloc (what uslab topology is compared with), the
# peers the footprint table measures, python3; on amd64 also the kernel, its initramfs
# and module loading; on arm64 also the real programs the host runs on x86-64 (g++ and
# git for run_programs.sh, redis-server for redis_purge.sh, iproute2 for its loopback).
packages=procps,numactl,hwloc-nox,libhwloc15,python3,libjemalloc2,libmimalloc2.0,libtcmalloc-minimal4,libunwind8,util-linux
[ "$arch" = amd64 ] && packages=linux-image-amd64,initramfs-tools,kmod,$packages
[ "$arch" = arm64 ] && packages=$packages,g++,git,redis-server,redis-tools,iproute2
recipe_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
dir=${USLAB_VM_CACHE:-/var/cache/uslab/vm}/$recipe_hash
[ "$arch" = arm64 ] && dir=${USLAB_VM_CACHE:-/var/cache/uslab/vm}/arm64/root-$recipe_hash
if [ -e "$dir/.ready" ]; then echo "$dir"; exit 0; fi

[ "$(id -u)" -eq 0 ] || skip "building the guest image needs root (debootstrap)"
tools="debootstrap mkfs.ext4"
[ "$arch" = arm64 ] && tools="debootstrap cpio"
for tool in $tools; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
curl -sfI --max-time 20 "$mirror/dists/bookworm/Release" >/dev/null 2>&1 ||
  skip "the Debian mirror $mirror cannot be reached"
if [ "$arch" = arm64 ]; then
  binfmt=/proc/sys/fs/binfmt_misc
  conf=/usr/lib/binfmt.d/qemu-aarch64.conf
  [ -f "$conf" ] || skip "no $conf (Debian: qemu-user-static)"
  [ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null ||
    skip "binfmt_misc cannot be mounted: arm64 programs cannot run in the root being made"
  [ -e "$binfmt/qemu-aarch64" ] || cat "$conf" >"$binfmt/register" 2>/dev/null ||
    skip "qemu-aarch64 could not be registered with binfmt_misc"
fi

rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
root=$dir.tmp/root
echo "vm image: debootstrap bookworm ($arch) into $root (a few minutes, once)" >&2
if ! debootstrap --arch="$arch" --variant=minbase --include="$packages" bookworm "$root" "$mirror" \
    >"$dir.tmp/debootstrap.log" 2>&1; then
  tail -5 "$dir.tmp/debootstrap.log" >&2
  skip "debootstrap bookworm ($arch) failed (log: $dir.tmp/debootstrap.log)"
fi
if [ "$arch" = arm64 ]; then
  echo uslab-guest >"$root/etc/hostname"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$dir.tmp/root.cpio.gz" ||
    skip "the arm64 root could not be archived"
  rm -rf "$root"
  touch "$dir.tmp/.ready"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
  for old in "$(dirname "$dir")"/root-*; do
    [ "$old" = "$dir" ] || [ ! -e "$old/.ready" ] || rm -rf "$old"
  done
  echo "$dir"
  exit 0
fi

# The guest's first process: mounts what the checks need, then the host's tree (9p,
# read-only, at the path it has on the host) and the results folder (9p, writable),
# and runs the suite's guest script from the host's tree, so a change to the checks
# needs no new image. It powers the guest off whatever happens.
cat >"$root/sbin/uslab-init" <<'INIT'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null; mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts; mount -t tmpfs tmp /dev/shm; mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo 1 >/proc/sys/kernel/sysrq
modprobe 9pnet_virtio; modprobe 9p
src=$(sed -n 's/.*uslab.src=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p "$src" /results
mount -t 9p -o trans=virtio,version=9p2000.L,ro src "$src"
mount -t 9p -o trans=virtio,version=9p2000.L results /results
build=$(sed -n 's/.*uslab.build=\([^ ]*\).*/\1/p' /proc/cmdline)
if [ -n "$build" ] && [ "$build" != "$src/build" ] && ! mountpoint -q "$build"; then
  mkdir -p "$build"; mount -t 9p -o trans=virtio,version=9p2000.L,ro build "$build"
fi
sh "$src/test/vm/guest.sh" >/results/guest.log 2>&1
sync
echo o >/proc/sysrq-trigger
sleep 60
INIT
chmod +x "$root/sbin/uslab-init"
echo uslab-guest >"$root/etc/hostname"

kernel=$(ls "$root"/boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
initrd=$(ls "$root"/boot/initrd.img-* 2>/dev/null | sort -V | tail -1)
[ -n "$kernel" ] && [ -n "$initrd" ] || skip "the guest root has no kernel or initramfs"
cp "$kernel" "$dir.tmp/vmlinuz"; cp "$initrd" "$dir.tmp/initrd.img"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
size_mib=$(( $(du -smx "$root" | cut -f1) + 512 ))
if ! mkfs.ext4 -q -L uslabroot -d "$root" "$dir.tmp/root.ext4" "${size_mib}M" >"$dir.tmp/mkfs.log" 2>&1; then
  cat "$dir.tmp/mkfs.log" >&2; skip "mkfs.ext4 -d failed"
fi
rm -rf "$root"
touch "$dir.tmp/.ready"
rm -rf "$dir"; mv "$dir.tmp" "$dir"
# Images of earlier recipes (1.2 GB each) go.
for old in "$(dirname "$dir")"/*; do
  [ "$old" = "$dir" ] || [ ! -e "$old/.ready" ] || rm -rf "$old"
done
echo "$dir"
