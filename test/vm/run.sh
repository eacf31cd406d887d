#!/usr/bin/env bash
# test/vm/run.sh — boots the guest (image.sh) on an emulated machine of a chosen shape,
# runs the guest suite (guest.sh) there against this tree's build, and reports.
#
# usage: run.sh [--cpus N] [--nodes K] [--mem MIB] [--possible N] [--memless-node]
#               [--kernel SERIES] [--cgroup 1|2] [--checks LIST] [--script FILE] [--kvm]
#               [--timeout SECONDS] [--keep DIR] BUILD
#   --cpus N         CPUs present at boot (default 4, what CI runs), split evenly over
#                    the nodes
#   --nodes K        NUMA nodes with memory (default 2), MIB/K MiB each
#   --mem MIB        guest memory (default 2048)
#   --possible N     CPU ids up to N-1 possible but absent (QEMU maxcpus): sparse ids
#   --memless-node   one more node with two of the CPUs and no memory
#   --kernel SERIES  Debian's kernel of that series: 6.1 (bookworm's, the image's own,
#                    the default), 5.10 (bullseye's) or 6.12 (trixie's): kernel_image.sh
#   --cgroup 1|2     the cgroup version the checks run under (default 2; 1: the memory
#                    and cpu controllers on v1 hierarchies, which 6.12 no longer has)
#   --checks LIST    comma-separated: topology,kernel,conformance,conformance-all,
#                    stress,stress-all,numa,overcommit,hotplug,cgroup,programs,sandbox,
#                    footprint;
#                    default: topology, kernel (what uslab finds the kernel offers),
#                    conformance (less its os_page runs), stress, numa, hotplug,
#                    cgroup, programs, sandbox (the NUMA calls refused on real nodes);
#                    all: those with conformance-all, stress-all and footprint
#   --script FILE    also run FILE with bash in the guest (check "script"; $build, $lib,
#                    $src are set): to reproduce something there by hand
#   --kvm            KVM instead of emulation (TCG): hung after the boot loader on
#                    the 2-core development VM, so not the default
#   --keep DIR       leave the guest's results and console log in DIR
# The host's source tree and BUILD are shared read-only with the guest (9p) at their
# host paths, so the test binaries, their RUNPATHs and meson's test list work
# unchanged. Exit: 0 every check passed, 1 one failed (its log is printed), 77 the
# guest cannot run here (the reason is printed; never a silent pass).
set -u
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cpus=4 nodes=2 mem=2048 possible=0 memless=0 checks=default kernel=6.1 cgroup=2 accel=tcg timeout=1500 keep= script=
while [ $# -gt 1 ]; do
  case $1 in
    --cpus) cpus=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --possible) possible=$2; shift 2 ;;
    --memless-node) memless=1; shift ;;
    --kernel) kernel=$2; shift 2 ;;
    --cgroup) cgroup=$2; shift 2 ;;
    --checks) checks=$2; shift 2 ;;
    --script) script=$2; shift 2 ;;
    --kvm) accel=kvm; shift ;;
    --timeout) timeout=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -eq 1 ] || { echo "usage: run.sh [options] BUILD" >&2; exit 2; }
build=$(cd "$1" && pwd)
skip() { echo "SKIP: $*"; exit 77; }

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed (Debian: qemu-system-x86)"
[ -x "$build/test/api" ] && [ -e "$build/libuslab.so" ] || { echo "run.sh: $build is not a built tree" >&2; exit 2; }
case $cgroup in 1|2) ;; *) echo "run.sh: --cgroup is 1 or 2" >&2; exit 2 ;; esac
img=$(bash "$src/test/vm/kernel_image.sh" "$kernel"); rc=$?
[ $rc -eq 0 ] || exit $rc
[ "$checks" = default ] && checks=topology,kernel,conformance,stress,numa,hotplug,cgroup,programs,sandbox
[ "$checks" = all ] && checks=topology,kernel,conformance-all,stress-all,numa,hotplug,cgroup,programs,sandbox,footprint
[ $((cpus % nodes)) -eq 0 ] || { echo "run.sh: $cpus CPUs do not split over $nodes nodes" >&2; exit 2; }

out=${keep:-$(mktemp -d /tmp/uslab-vm.XXXXXX)}
mkdir -p "$out"; rm -f "$out"/*.log "$out"/results.txt "$out"/tests.tsv "$out"/script.sh
if [ -n "$script" ]; then cp "$script" "$out/script.sh"; checks+=,script; fi
# meson's test list, for the guest's runner (guest.sh's run_listed).
if command -v meson >/dev/null; then
  python3 "$src/test/vm/test_list.py" "$build" >"$out/tests.tsv" 2>/dev/null || rm -f "$out/tests.tsv"
fi

# The machine: -numa node per memory node, CPUs split evenly; a memory-less node takes
# the last two CPUs; absent CPU ids (up to --possible) belong to node 0.
per_node=$((mem / nodes)) per_cpu=$((cpus / nodes))
machine=(-m "${mem}M")
smp="$cpus"; [ "$possible" -gt "$cpus" ] && smp="$cpus,maxcpus=$possible"
machine+=(-smp "$smp")
for ((n = 0; n < nodes; n++)); do
  lo=$((n * per_cpu)) hi=$((n * per_cpu + per_cpu - 1))
  [ $memless -eq 1 ] && [ $n -eq $((nodes - 1)) ] && hi=$((hi - 2))
  extra=; [ $n -eq 0 ] && [ "$possible" -gt "$cpus" ] && extra=",cpus=$cpus-$((possible - 1))"
  machine+=(-object "memory-backend-ram,id=m$n,size=${per_node}M"
            -numa "node,nodeid=$n,cpus=$lo-$hi$extra,memdev=m$n")
done
[ $memless -eq 1 ] && machine+=(-numa "node,nodeid=$nodes,cpus=$((cpus - 2))-$((cpus - 1))")
shape="$cpus CPUs"
[ "$possible" -gt "$cpus" ] && shape+=" ($possible possible)"
shape+=", $nodes nodes of $per_node MiB"
[ $memless -eq 1 ] && shape+=" and one without memory"
shape+=", $accel, kernel $kernel, cgroup v$cgroup"
echo "vm: $shape; checks: $checks"
accel_args=(-accel tcg,thread=multi -cpu max)
[ $accel = kvm ] && accel_args=(-accel kvm -cpu host)
cmdline="console=ttyS0 root=/dev/vda rw rootfstype=ext4 init=/sbin/uslab-init panic=-1 quiet"
# Big shapes boot with 4 CPUs online and bring the rest up in guest.sh: with all 64
# emulated CPUs booting on the host's 2 cores, the initramfs's udev workers starved
# (RCU stalls, soft lockups) and never loaded the disk's driver whenever the host had
# other work, and the guest dropped to a shell. Possible-but-absent CPUs stay absent.
[ "$cpus" -gt 16 ] && cmdline+=" maxcpus=4"
cmdline+=" uslab.src=$src uslab.build=$build uslab.checks=$checks uslab.nodes=$nodes"
cmdline+=" uslab.cpus=$cpus uslab.memless=$memless uslab.possible=$possible uslab.cgroup=$cgroup"
virtfs=(-virtfs "local,path=$src,mount_tag=src,security_model=none,readonly=on"
        -virtfs "local,path=$out,mount_tag=results,security_model=none")
case $build in "$src"/build) ;; *)
  virtfs+=(-virtfs "local,path=$build,mount_tag=build,security_model=none,readonly=on") ;;
esac
start=$(date +%s)
timeout "$timeout" qemu-system-x86_64 "${accel_args[@]}" "${machine[@]}" -nographic -no-reboot \
  -monitor none -serial "file:$out/console.log" -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
  -append "$cmdline" -drive "file=$img/root.ext4,if=virtio,format=raw,snapshot=on" \
  "${virtfs[@]}" >"$out/qemu.log" 2>&1
qrc=$?
secs=$(($(date +%s) - start))
if [ ! -s "$out/results.txt" ]; then
  tail -30 "$out/console.log" 2>/dev/null; cat "$out/qemu.log"
  if [ $qrc -eq 124 ]; then echo "FAIL: the guest did not finish in $timeout s"; exit 1; fi
  grep -q "Could not access KVM\|failed to initialize kvm\|not support" "$out/qemu.log" &&
    skip "QEMU cannot start this guest here (see above)"
  echo "FAIL: the guest wrote no results (QEMU exit $qrc, $secs s)"; exit 1
fi
pass=$(grep -c '^PASS' "$out/results.txt") fail=$(grep -c '^FAIL' "$out/results.txt")
skipped=$(grep -c '^SKIP' "$out/results.txt")
grep -v '^PASS' "$out/results.txt"
for f in $(sed -n 's/^FAIL \([^ ]*\).*/\1/p' "$out/results.txt"); do
  echo "---- $f"; tail -40 "$out/$f.log" 2>/dev/null
done
grep -q '^DONE' "$out/results.txt" || { echo "FAIL: the guest stopped before the end (console: $out/console.log)"; fail=$((fail + 1)); }
echo "vm: $shape: $pass passed, $fail failed, $skipped skipped in $secs s (results: $out)"
[ $fail -eq 0 ]
