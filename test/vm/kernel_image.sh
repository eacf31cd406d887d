#!/usr/bin/env bash
# test/vm/kernel_image.sh SERIES — the x86-64 guest's root (image.sh) with another
# Debian release's kernel: 5.10 (bullseye's linux-image-amd64) or 6.12 (trixie's); 6.1
# is the image's own. Prints a directory that holds root.ext4, vmlinuz and initrd.img,
# as image.sh does: kernel-SERIES/ beside the image, made once from a copy of its root,
# grown by 1 GiB, with the kernel package installed in it by dpkg (its modules, and its
# initramfs made by the root's initramfs-tools). A new image (a new recipe) makes new
# copies. Exit 77 with the reason where it cannot be made (not root, no loop device,
# no mirror): the suite then skips, never passes.
set -u
skip() { echo "SKIP: $*" >&2; exit 77; }
series=${1:?usage: kernel_image.sh SERIES}
here=$(dirname "${BASH_SOURCE[0]}")
base=$(bash "$here/image.sh") || exit $?
case $series in
  6.1) echo "$base"; exit 0 ;;
  5.10) suite=bullseye ;;
  6.12) suite=trixie ;;
  *) echo "kernel_image.sh: the kernels are 5.10, 6.1 and 6.12" >&2; exit 2 ;;
esac
dir=$base/kernel-$series
if [ -e "$dir/.ready" ]; then echo "$dir"; exit 0; fi
[ "$(id -u)" -eq 0 ] || skip "installing a kernel in the guest image needs root (a loop mount)"
for tool in losetup resize2fs e2fsck chroot; do command -v $tool >/dev/null || skip "$tool is not installed"; done

rm -rf "$dir.tmp"; mkdir -p "$dir.tmp/mnt"
mnt=$dir.tmp/mnt
bash "$here/kernel_deb.sh" "$suite" amd64 linux-image-amd64 "$dir.tmp/k.deb" || skip "no $suite kernel package"
ver=$(dpkg-deb -f "$dir.tmp/k.deb" Package | sed 's/^linux-image-//')
echo "vm image: $ver into a copy of $base/root.ext4 (a minute, once)" >&2
cp --sparse=always "$base/root.ext4" "$dir.tmp/root.ext4"
truncate -s +1G "$dir.tmp/root.ext4"
e2fsck -fy "$dir.tmp/root.ext4" >/dev/null 2>&1
resize2fs "$dir.tmp/root.ext4" >/dev/null 2>&1 || skip "resize2fs failed on the copy"
mount -o loop "$dir.tmp/root.ext4" "$mnt" || skip "the image cannot be loop-mounted here"
mount --bind /proc "$mnt/proc"; mount --bind /dev "$mnt/dev"
cp "$dir.tmp/k.deb" "$mnt/var/tmp/k.deb"
# --force-depends: trixie's kernel names newer kmod and initramfs-tools than the
# root's, which read its modules all the same (xz-compressed).
chroot "$mnt" dpkg -i --force-depends /var/tmp/k.deb >"$dir.tmp/dpkg.log" 2>&1; rc=$?
rm -f "$mnt/var/tmp/k.deb"
{ cp "$mnt/boot/vmlinuz-$ver" "$dir.tmp/vmlinuz" && cp "$mnt/boot/initrd.img-$ver" "$dir.tmp/initrd.img"; } 2>/dev/null || rc=1
umount "$mnt/proc" "$mnt/dev"; umount "$mnt"
[ $rc -eq 0 ] || { tail -5 "$dir.tmp/dpkg.log" >&2; skip "installing $ver failed (log: $dir.tmp/dpkg.log)"; }
rm -rf "$dir.tmp/k.deb" "$mnt"
touch "$dir.tmp/.ready"
rm -rf "$dir"; mv "$dir.tmp" "$dir"
echo "$dir"
