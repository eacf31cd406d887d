#!/bin/bash
# test/vm/arm64.sh BUILD [CPUS] [PAGE] [checks|short|rss|debian] — the arm64 guest: Debian's arm64 kernel
# (PAGE 4k: bookworm's linux-image-arm64, 6.1; 16k: trixie's linux-image-arm64-16k,
# 6.12, 16 KiB pages) booted by qemu-system-aarch64 -M virt under TCG,
# from an initramfs that holds the cross build's unit tests, libuslab.so and test
# programs with the cross toolchain's libraries. Its /init (arm64_init.c) runs the
# unit suite in the three fast-path modes; preloaded in per-CPU mode, the conformance
# and stress programs that run alone, memory's return after a 1 GB peak with no call,
# a CPU going offline and back, guarded sampling's read and write faults, and churn
# under a signal storm (glibc's rseq registration and uslab's): the restartable
# sections of percpu_rseq_aarch64.h and the page-granular calls on a real arm64 kernel.
# MODE short is the test suite's default run of it: the same checks, less the unit
# suite's other two modes, the 1 GB peak (10 MB instead) and churn's second run.
# With MODE rss, the guest runs bench/rss frag under uslab, glibc and Debian's arm64
# jemalloc and mimalloc instead, three alternated rounds (memory is real in a guest;
# its timings are not). With MODE debian, the guest is a Debian arm64 userland instead
# (image.sh arm64, run from memory) with the host's test tree and BUILD at their host
# paths, and runs guest.sh's checks there, as the x86-64 guest does: the conformance
# and stress suites (the cross build's meson list, test/vm/test_list.py), the real
# programs (python3, perl, sort, awk and sed preloaded), and the footprints of uslab
# and Debian's arm64 jemalloc, mimalloc and tcmalloc (a 64-thread server); and, when
# USLAB_VM_DEB names the arm64 .deb, its installation with apt (guest.sh's package
# check). USLAB_VM_CHECKS overrides the list of checks; USLAB_VM_PEERS ("NAME=PATH
# ...": arm64 builds of other allocators, from their sources) adds footprint columns;
# USLAB_VM_SCRIPT is a script of the caller's to run there too (guest.sh's script);
# USLAB_VM_NODES=K splits the CPUs and memory over K NUMA nodes (-numa, which the
# arm64 kernel reads from the device tree) and adds guest.sh's topology and NUMA
# placement checks.
# BUILD is a cross build (tools/uslab build --arch arm64). Exit status 0 when every
# check passed, 77 when the guest cannot run here (printed), 1 otherwise.
set -euo pipefail
build=$(cd "$1" && pwd)
cpus=${2:-4}
page=${3:-4k}
case $page in 4k|16k) ;; *) echo "test/vm/arm64.sh: PAGE is 4k or 16k" >&2; exit 2 ;; esac
mode=${4:-checks}
case $mode in checks|short|rss|debian) ;; *) echo "test/vm/arm64.sh: MODE is checks, short, rss or debian" >&2; exit 2 ;; esac
nodes=${USLAB_VM_NODES:-1} mem=3072
[ "$nodes" -ge 1 ] && [ $((cpus % nodes)) -eq 0 ] && [ "$mode" = debian ] || [ "$nodes" -eq 1 ] ||
  { echo "test/vm/arm64.sh: $nodes nodes need --debian and a CPU count they divide" >&2; exit 2; }
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
  tmp=$(mktemp -d)
  bash "$src/test/vm/kernel_deb.sh" trixie arm64 linux-image-arm64-16k "$tmp/k.deb" ||
    { rm -rf "$tmp"; skip "could not download trixie's 16k kernel"; }
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
if [ "$mode" = debian ]; then
  image=$(bash "$src/test/vm/image.sh" arm64) || exit $?
  # The Debian root, then what this run adds (a second archive, which the kernel
  # unpacks over the first): /init, the test tree and BUILD's programs.
  mkdir -p "$root$src" "$root$build"
  if git -C "$src" rev-parse >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z test | cpio -0pdm --quiet "$root$src")
  else
    cp -a "$src/test" "$root$src/"
  fi
  (cd "$build" && find . -path '*.p' -prune -o \( -type f -o -type l \) -print |
     grep -Ev '\.(a|o|ninja|json)$|/meson-' | cpio -pdm --quiet "$root$build")
  # meson's test list for guest.sh's conformance and stress checks.
  mkdir -p "$root/results"
  python3 "$src/test/vm/test_list.py" "$build" >"$root/results/tests.tsv"
  # Other allocators for the footprint table; one that registers rseq itself (Google's
  # tcmalloc) runs with glibc's registration off, or its per-CPU mode stays off.
  if [ -n "${USLAB_VM_PEERS:-}" ]; then
    mkdir -p "$root/var/tmp/peers"
    for p in $USLAB_VM_PEERS; do
      name=${p%%=*} path=${p#*=}
      file -L "$path" | grep -q aarch64 || { echo "test/vm/arm64.sh: $path is not an arm64 library" >&2; exit 2; }
      cp -L "$path" "$root/var/tmp/peers/$name.so"
      line="$name=/var/tmp/peers/$name.so"
      aarch64-linux-gnu-nm -D --defined-only "$path" | grep -q ' __rseq_abi$' &&
        line+=";GLIBC_TUNABLES=glibc.pthread.rseq=0"
      echo "$line" >>"$root/var/tmp/peers/list"
    done
  fi
  cat >"$root/init" <<'INIT'
#!/bin/sh
# The arm64 Debian guest's first process: runs guest.sh, then writes its results and
# each check's log to the console (the guest has no shared folder), and powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm /results; mount -t devpts devpts /dev/pts
# What udev would make: bash's process substitution opens /dev/fd/N.
ln -s /proc/self/fd /dev/fd; ln -s fd/0 /dev/stdin; ln -s fd/1 /dev/stdout; ln -s fd/2 /dev/stderr
mount -t tmpfs tmp /dev/shm; mount -t tmpfs tmp /tmp; mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo 1 >/proc/sys/kernel/sysrq
ip link set lo up  # the guest has no network; redis listens on the loopback
src=$(sed -n 's/.*uslab.src=\([^ ]*\).*/\1/p' /proc/cmdline)
echo "uslab-guest: $(nproc) CPUs online, page size $(getconf PAGESIZE), $(uname -r)"
# Each check's verdict on the console as it comes (the host sees how far a long run got).
touch /results/results.txt
tail -f /results/results.txt | sed -u 's/^/uslab-guest: so far: /' &
progress=$!
bash "$src/test/vm/guest.sh" >/results/guest.log 2>&1
kill $progress
for log in /results/*.log; do echo "== ${log#/results/}"; cat "$log"; done
failed=0
while read -r verdict name rest; do
  [ "$verdict" = DONE ] && continue
  echo "uslab-guest: $name: $verdict${rest:+ $rest}"
  [ "$verdict" = FAIL ] && failed=$((failed + 1))
done </results/results.txt
grep -q '^DONE' /results/results.txt || { echo "uslab-guest: guest.sh did not finish"; failed=$((failed + 1)); }
echo "uslab-guest: done, $failed failed"
sync
echo o >/proc/sysrq-trigger
sleep 60
INIT
  chmod +x "$root/init"
  # A script of the caller's (USLAB_VM_SCRIPT; guest.sh's script check), as run.sh's
  # --script: to reproduce something there by hand.
  extra_checks=
  if [ -n "${USLAB_VM_SCRIPT:-}" ]; then
    cp "$USLAB_VM_SCRIPT" "$root/results/script.sh"; extra_checks=,script
  fi
  # The arm64 .deb (tools/uslab package --arch arm64), for guest.sh's package check.
  deb_check=
  if [ -n "${USLAB_VM_DEB:-}" ]; then
    mkdir -p "$root/var/tmp"; cp "$USLAB_VM_DEB" "$root/var/tmp/uslab.deb"; deb_check=,package
  fi
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/add.gz"
  cat "$image/root.cpio.gz" "$work/add.gz" >"$work/initrd.gz"
  rm -rf "$root" "$work/add.gz"
else
  # The checks and the benchmark: a static /init, the programs and their libraries.
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
fi

guest_args=""
[ "$mode" = rss ] && guest_args=" uslab.rss"  # /init runs the benchmark instead
[ "$mode" = short ] && guest_args=" uslab.short"
[ "$mode" = debian ] &&
  guest_args=" uslab.src=$src uslab.build=$build uslab.cpus=$cpus uslab.nodes=$nodes uslab.memless=0 uslab.possible=0 uslab.threads=64 uslab.checks=${USLAB_VM_CHECKS:-$([ "$nodes" -gt 1 ] && echo topology,numa,)conformance,stress,programs,footprint}$extra_checks$deb_check"
# NUMA nodes: the CPUs and the memory split evenly, as run.sh does for x86-64.
machine=(-smp "$cpus" -m "$mem")
if [ "$nodes" -gt 1 ]; then
  for ((n = 0; n < nodes; n++)); do
    machine+=(-object "memory-backend-ram,id=m$n,size=$((mem / nodes))M"
              -numa "node,nodeid=$n,cpus=$((n * cpus / nodes))-$(((n + 1) * cpus / nodes - 1)),memdev=m$n")
  done
fi
echo "arm64 guest: $cpus CPUs$([ "$nodes" -gt 1 ] && echo " in $nodes nodes"), $(basename "$kernel") ($page pages), tcg"
start=$(date +%s)
limit=1500
[ "$mode" = debian ] && limit=5400  # the conformance and stress suites, emulated
timeout "${USLAB_VM_TIMEOUT:-$limit}" qemu-system-aarch64 -M virt -cpu max "${machine[@]}" \
  -accel tcg,thread=multi -nic none -nographic -no-reboot -monitor none -serial "file:$work/console.log" \
  -kernel "$kernel" -initrd "$work/initrd.gz" \
  -append "console=ttyAMA0 rdinit=/init quiet panic=-1${guest_args}" \
  </dev/null >/dev/null 2>&1 || true
grep -a '^uslab-guest:' "$work/console.log" || true
echo "arm64 guest: $(( $(date +%s) - start )) s (console: $work/console.log)"
grep -aq '^uslab-guest: done, 0 failed' "$work/console.log" && exit 0
echo "arm64 guest: failed; the console's last lines:"
tail -n 40 "$work/console.log"
exit 1
