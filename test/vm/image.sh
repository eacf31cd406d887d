#!/usr/bin/env bash
# test/vm/image.sh — the guest image for the virtual-machine suite, built once and kept
# outside the clone: a Debian 12 (bookworm, the glibc this project builds against, so the
# host's build runs in it unchanged) root made with debootstrap, with a kernel, NUMA and
# cgroup tools, the peer allocators and python3, written into an ext4 image with
# mkfs.ext4 -d. Its kernel and initramfs are copied out for QEMU's -kernel/-initrd.
#
# usage: image.sh        prints the image directory (holds root.ext4, vmlinuz, initrd.img)
# The directory is USLAB_VM_CACHE (default /var/cache/uslab/vm) plus the recipe's hash:
# a change to this file makes a new image. Exit 77 with the reason where it cannot be
# built (not root, no mirror, debootstrap failed): the suite then skips, never passes.
set -u
skip() { echo "SKIP: $*" >&2; exit 77; }
mirror=${USLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The guest's packages: kernel and initramfs, module loading, NUMA tools and hwloc (what
# uslab topology is compared with), the peers the footprint table measures, python3.
packages=linux-image-amd64,initramfs-tools,kmod,procps,numactl,hwloc-nox,libhwloc15,python3,libjemalloc2,libmimalloc2.0,libtcmalloc-minimal4,libunwind8,util-linux
recipe_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
dir=${USLAB_VM_CACHE:-/var/cache/uslab/vm}/$recipe_hash
if [ -e "$dir/.ready" ]; then echo "$dir"; exit 0; fi

[ "$(id -u)" -eq 0 ] || skip "building the guest image needs root (debootstrap)"
for tool in debootstrap mkfs.ext4; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
curl -sfI --max-time 20 "$mirror/dists/bookworm/Release" >/dev/null 2>&1 ||
  skip "the Debian mirror $mirror cannot be reached"

rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
root=$dir.tmp/root
echo "vm image: debootstrap bookworm into $root (a few minutes, once)" >&2
if ! debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" \
    >"$dir.tmp/debootstrap.log" 2>&1; then
  tail -5 "$dir.tmp/debootstrap.log" >&2
  skip "debootstrap bookworm failed (log: $dir.tmp/debootstrap.log)"
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
