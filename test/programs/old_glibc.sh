#!/usr/bin/env bash
# test/programs/old_glibc.sh LIB SRCDIR — the library built here, on an older glibc:
# a Debian 11 (bullseye, glibc 2.31, which registers no rseq, so uslab's own
# registration runs) root made with debootstrap from Debian's mirror. In that root:
#   1. the C API conformance test and the thread, fork and out-of-memory stress
#      tests, compiled there by its own gcc, pass with the library preloaded;
#   2. the system's own programs (bash, coreutils, perl, python3, apt-cache, dpkg,
#      tar with gzip and xz, openssl, ssh-keygen, make) print what they print
#      without it;
#   3. with the library in /etc/ld.so.preload, a whole shell script of them prints
#      what it prints without, and each of its programs had the library mapped.
# The root is kept in USLAB_OLD_ROOT (default /var/cache/uslab/bullseye), outside
# the clone, and built once. Skipped (exit 77, with the reason) where this is not
# root or the mirror cannot be reached: never passed without running.
set -u
lib=$(realpath "$1")
src=$2
root=${USLAB_OLD_ROOT:-/var/cache/uslab/bullseye}
mirror=${USLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
skip() { echo "SKIP: $*"; exit 77; }
fail=0; total=0
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot, mounts)"
if [ ! -e "$root/.uslab-ready" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq debootstrap >/dev/null 2>&1; } ||
    skip "debootstrap is not installed and apt-get could not install it"
  curl -sfI --max-time 20 "$mirror/dists/bullseye/Release" >/dev/null 2>&1 ||
    wget -q --spider --timeout=20 "$mirror/dists/bullseye/Release" 2>/dev/null ||
    skip "the Debian mirror $mirror cannot be reached"
  rm -rf "$root.tmp"; mkdir -p "$(dirname "$root")"
  if ! debootstrap --variant=minbase \
      --include=python3,perl,openssl,openssh-client,make,gcc,libc6-dev,xz-utils,gzip \
      bullseye "$root.tmp" "$mirror" >"$root.log" 2>&1; then
    tail -5 "$root.log"
    skip "debootstrap bullseye failed (log: $root.log)"
  fi
  rm -rf "$root"; mv "$root.tmp" "$root"; touch "$root/.uslab-ready"
fi

ldd_version=$(chroot "$root" /usr/bin/ldd --version 2>/dev/null | head -1)
echo "root: $root ($ldd_version)"
mounted=()
cleanup() {
  for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null; done
  rm -f "$root/etc/ld.so.preload"
}
trap cleanup EXIT
for d in proc dev; do
  if ! mountpoint -q "$root/$d"; then
    mount --bind "/$d" "$root/$d" || skip "cannot bind-mount /$d into the root (no CAP_SYS_ADMIN?)"
    mounted+=("$root/$d")
  fi
done

# The library and the tests' sources (with the project's layout, which their includes
# name), compiled by the root's own gcc against glibc 2.31, as the meson build does.
rm -rf "$root/opt/uslab"; mkdir -p "$root/opt/uslab/src"
cp "$lib" "$root/opt/uslab/libuslab.so"
ln -s libuslab.so "$root/opt/uslab/libuslab.so.0"  # its soname, which threads and fork link to
(cd "$src" && cp --parents include/uslab.h bench/proc_self.h test/common/*.h \
  test/conformance/api.c test/stress/threads.c test/stress/fork.c test/stress/oom.c \
  "$root/opt/uslab/src/")
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C "$@"; }
total=$((total+1))
if ! in_root /bin/sh -c 'cd /opt/uslab/src &&
    f="-O1 -D_GNU_SOURCE -I. -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc -w" &&
    gcc $f -o api test/conformance/api.c -lpthread -ldl &&
    gcc $f -o threads test/stress/threads.c -L/opt/uslab -l:libuslab.so -Wl,-rpath,/opt/uslab -lpthread -ldl &&
    gcc $f -o fork test/stress/fork.c -L/opt/uslab -l:libuslab.so -Wl,-rpath,/opt/uslab -lpthread -ldl &&
    gcc $f -o oom test/stress/oom.c -lpthread -ldl' >"$root/opt/uslab/build.log" 2>&1; then
  cat "$root/opt/uslab/build.log"; bad "the tests did not compile in the root"
fi
pre=LD_PRELOAD=/opt/uslab/libuslab.so
for t in api threads fork oom; do
  total=$((total+1))
  if [ ! -x "$root/opt/uslab/src/$t" ]; then bad "$t was not built"; continue; fi
  out=$(in_root $pre timeout 300 "/opt/uslab/src/$t" 2>&1) ||
    { echo "$out" | tail -5; bad "$t under uslab on glibc 2.31"; }
done

# The system's programs, each alone: output with the library preloaded = without.
cat >"$root/opt/uslab/programs.sh" <<'EOF'
set -e
cd /tmp && rm -rf w && mkdir w && cd w
seq 1 200000 | sort -r | sort -n | sha256sum
ls -la /usr/bin | awk '{print $9}' | sort | head -50 | md5sum
perl -e 'my %h; $h{$_} = "x" x ($_ % 300) for 1..200000; my $t = 0; $t += length($h{$_}) for keys %h; print "$t\n"'
python3 -c 'import json; d = {str(i): [i] * (i % 7) for i in range(100000)}; s = json.dumps(d, sort_keys=True); print(len(s), sum(len(v) for v in json.loads(s).values()))'
apt-cache policy perl | head -3 | sed 's/ *$//'
dpkg -l | awk '/^ii/ {print $2}' | sort | md5sum
cp -r /usr/share/perl5 p && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf p.tar p &&
  gzip -9 -n -k p.tar && xz -k p.tar
gzip -dc p.tar.gz | md5sum && xz -dc p.tar.xz | md5sum && tar tf p.tar | sort | md5sum
printf 'all:\n\t@echo made $(words $(wildcard /usr/bin/*))\n' > Makefile && make
openssl dgst -sha256 p.tar | cut -d' ' -f2
openssl genrsa 2048 2>/dev/null | openssl rsa -check -noout 2>&1 | head -1
ssh-keygen -q -t ed25519 -N '' -f key && ssh-keygen -l -f key.pub | cut -d' ' -f1
EOF
ref=$(in_root /bin/bash /opt/uslab/programs.sh 2>&1) || { echo "$ref"; bad "programs.sh fails without the library"; }
total=$((total+1))
got=$(in_root $pre /bin/bash /opt/uslab/programs.sh 2>&1)
[ "$got" = "$ref" ] || { diff <(echo "$ref") <(echo "$got") | head; bad "programs.sh under LD_PRELOAD differs from the plain run"; }

# System-wide: every program of the script gets the library from /etc/ld.so.preload;
# each reports whether it is mapped (the grep is one of the script's processes).
echo /opt/uslab/libuslab.so >"$root/etc/ld.so.preload"
total=$((total+1))
got=$(in_root /bin/bash /opt/uslab/programs.sh 2>&1)
[ "$got" = "$ref" ] || { diff <(echo "$ref") <(echo "$got") | head; bad "programs.sh with /etc/ld.so.preload differs from the plain run"; }
total=$((total+1))
n=$(in_root /bin/bash -c 'grep -c libuslab /proc/self/maps; python3 -c "print(open(\"/proc/self/maps\").read().count(\"libuslab\") > 0)"; perl -ne "\$n++ if /libuslab/; END { print \$n > 0 ? \"yes\n\" : \"no\n\" }" /proc/self/maps' 2>&1)
case "$n" in
  [1-9]*$'\n'True$'\n'yes) ;;
  *) echo "$n"; bad "a program under /etc/ld.so.preload did not map the library" ;;
esac
rm -f "$root/etc/ld.so.preload"

echo "old glibc ($ldd_version): $total checks, $fail failed"
[ $fail -eq 0 ]
