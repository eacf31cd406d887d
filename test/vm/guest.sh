#!/bin/sh
# test/vm/guest.sh — the checks the guest runs (its init, /sbin/uslab-init, starts this
# from the host's tree; run.sh reads the results). One line per check in
# /results/results.txt: PASS NAME, FAIL NAME or SKIP NAME REASON, then DONE; each
# check's output in /results/NAME.log. The shape (uslab.nodes, uslab.cpus, ...) and
# the checks to run (uslab.checks) come from the kernel's command line.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
arg() { sed -n "s/.*uslab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
src=$(arg src) build=$(arg build) checks=$(arg checks)
nodes=$(arg nodes) cpus=$(arg cpus) memless=$(arg memless) possible=$(arg possible)
lib=$build/libuslab.so
multiarch=/usr/lib/$(uname -m)-linux-gnu  # x86_64 or aarch64 (arm64.sh)
declare -A peer_lib=([glibc]= [uslab]=$lib [jemalloc]=$multiarch/libjemalloc.so.2
                     [mimalloc]=$multiarch/libmimalloc.so.2
                     [tcmalloc]=$multiarch/libtcmalloc_minimal.so.4)
R=/results/results.txt
: >"$R"
want() { case ",$checks," in *",$1,"*) return 0 ;; esac; return 1; }
record() { echo "$*" >>"$R"; sync; }

# check NAME CMD...: CMD's output goes to NAME.log; exit 0 passes, 77 skips (its last
# line is the reason), anything else fails.
check() {
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"/results/$name.log" 2>&1
  local rc=$?
  echo "[$name: exit $rc, $((SECONDS - t0)) s]" >>"/results/$name.log"
  case $rc in
    0) record "PASS $name" ;;
    77) record "SKIP $name $(tail -2 "/results/$name.log" | head -1)" ;;
    *) record "FAIL $name (exit $rc)" ;;
  esac
}

# Big shapes boot with a few CPUs online (run.sh: maxcpus=); the rest come online here,
# before any check, and the time it took goes in machine.log.
t0=$SECONDS
for f in /sys/devices/system/cpu/cpu[0-9]*/online; do
  [ "$(cat "$f")" = 1 ] || echo 1 >"$f" || echo "could not bring ${f%/online} online" >&2
done
{
  echo "brought online in $((SECONDS - t0)) s"
  echo "kernel: $(uname -r); CPUs: $(nproc) online of $(cat /sys/devices/system/cpu/possible) possible"
  numactl -H
  grep -E 'MemTotal|MemFree' /proc/meminfo
} >/results/machine.log 2>&1

# ---- topology: what uslab sees is what the kernel and hwloc see -------------------------
check_topology() {
  local expect=$((nodes + memless)) n out used
  n=$(numactl -H | sed -n 's/^available: \([0-9]*\) nodes.*/\1/p')
  echo "numactl: $n nodes; the shape: $expect"
  [ "$n" = "$expect" ] || return 1
  out=$("$build/uslab-topology" 2>&1); echo "$out"
  grep -q "The providers agree" <<<"$out" || { echo "FAIL: the probe and hwloc disagree"; return 1; }
  used=$(sed -n '/^uslab uses/,$p' <<<"$out")
  grep -q "NUMA nodes: $expect" <<<"$used" || { echo "FAIL: uslab does not use $expect nodes"; return 1; }
  local bad=0 k kcpus ucount
  for ((k = 0; k < expect; k++)); do
    kcpus=$(numactl -H | sed -n "s/^node $k cpus: *//p" | wc -w)
    # CPU ids possible but not present (--possible) are node 0's until plugged in.
    [ "$k" -eq 0 ] && [ "${possible:-0}" -gt "$cpus" ] && kcpus=$((kcpus + possible - cpus))
    ucount=$(sed -n "s/^    node $k: \([0-9]*\) CPUs.*/\1/p" <<<"$used")
    echo "node $k: numactl $kcpus CPUs, uslab ${ucount:-none}"
    [ "$kcpus" = "${ucount:-x}" ] || bad=1
  done
  grep -q "memory bound to nodes: yes" <<<"$used" || { echo "FAIL: memory not bound to nodes"; bad=1; }
  return $bad
}

# ---- the kernel: what uslab finds it offers is what its release added -------------------
# (Debian's kernels: none backports these calls.) And the memory controller as booted.
check_kernel() {
  local out rel v bad=0
  out=$("$build/uslab-topology" 2>&1 | sed -n '/^Kernel /,$p'); echo "$out"
  rel=$(uname -r); v=$(awk -F. '{print $1 * 1000 + $2}' <<<"$rel")
  expect() {  # expect LABEL SINCE: "LABEL yes" from release SINCE on, "LABEL no" before
    local want=no
    [ "$v" -ge "$2" ] && want=yes
    grep -qF "$1 $want" <<<"$out" || { echo "FAIL: $1 expected $want on $rel"; bad=1; }
  }
  expect "rseq:" 4018
  expect "its mm_cid field (Linux 6.3):" 6003
  expect "MADV_FREE (4.5)" 4005
  expect "MADV_POPULATE_WRITE (5.14)" 5014
  expect "MADV_COLLAPSE (6.1)" 6001
  expect "guard regions (6.13)" 6013
  expect "membarrier's rseq fences (5.10):" 5010
  local ctl="cgroup v$cgv"
  [ "$cgv" = none ] && ctl="none mounted"
  grep -qF "memory controller: $ctl" <<<"$out" || { echo "FAIL: not $ctl"; bad=1; }
  return $bad
}

# ---- meson's tests, from the host's list (run.sh writes tests.tsv) ------------------------
# run_listed SUITE REGEX [SKIP]: every test of SUITE whose name matches REGEX and not
# SKIP, with its environment and ten times its timeout (emulated CPUs are slow;
# USLAB_TEST_SLOWDOWN tells the tests with a time bound); a failure prints its output.
# Left out: checks of the library file rather than of the machine (its exported
# symbols and its sections, by readelf), the valgrind run, whose tools the guest does
# not have, and the deferred readers' run with a tick every millisecond, whose floor
# of 10000 writes in 2 s is a speed that emulated CPUs do not have.
run_listed() {
  local suite=$1 re=$2 skip_re=${3:-^$} bad=0 n=0 s name env cmd to
  local host_only='^(exported symbols|zero-filled globals|C API conformance under valgrind|deferred free, readers with a decay tick every millisecond)'
  while IFS=$'\t' read -r s name env cmd to; do
    [ "$s" = "$suite" ] && [[ "$name" =~ $re ]] && ! [[ "$name" =~ $host_only ]] &&
      ! [[ "$name" =~ $skip_re ]] || continue
    n=$((n + 1))
    local -a envs=() argv=()
    IFS=$'\x1f' read -ra envs <<<"$env"
    IFS=$'\x1f' read -ra argv <<<"$cmd"
    # The start-up check counts faults on the library's pages: over 9p (the guest's view
    # of the host's build) the kernel maps fewer pages around a fault than from a local
    # disk, which deployments have (2 or 3 faults more), so its libraries are copied.
    if [[ "$name" =~ ^start-up ]]; then
      local i
      for i in "${!argv[@]}"; do
        [[ "${argv[$i]}" == *.so || "${argv[$i]}" == *.so.* ]] || continue
        cp "${argv[$i]}" /var/tmp/ && argv[$i]=/var/tmp/${argv[$i]##*/}
      done
    fi
    local t0=$SECONDS out rc
    out=$(env "${envs[@]}" USLAB_TEST_SLOWDOWN=10 timeout $((to * 10)) "${argv[@]}" 2>&1); rc=$?
    if [ $rc -eq 0 ] || [ $rc -eq 77 ]; then
      echo "ok   $((SECONDS - t0)) s  $name$([ $rc -eq 77 ] && echo ' (skipped)')"
    else
      echo "FAIL $((SECONDS - t0)) s  $name (exit $rc)"; echo "$out" | tail -20; bad=1
    fi
  done </results/tests.tsv
  echo "$n tests"
  [ $n -gt 0 ] || { echo "no test matched"; return 1; }
  return $bad
}

# ---- NUMA placement, asked of the kernel (move_pages) --------------------------------------
check_numa() {
  local rc=0 a
  LD_PRELOAD=$lib "$build/test/vm_numa_place" || rc=$?
  [ $rc -eq 77 ] && return 77
  for a in glibc jemalloc mimalloc tcmalloc; do  # for the record: first touch vs reuse
    echo "== under $a (report only)"
    LD_PRELOAD=${peer_lib[$a]} "$build/test/vm_numa_place" report | grep "in all"
  done
  return $rc
}

# numactl's policies around a preloaded program: no crash, and no page from a node the
# policy forbids (the placement program reports where its pages went).
check_numactl() {
  local bad=0 out last=$((nodes - 1))
  [ "$nodes" -ge 2 ] || { echo "one node: skipped"; return 77; }
  for policy in "--membind=$last" "--interleave=all" "--cpunodebind=0" "--preferred=$last" \
                "--cpunodebind=0 --membind=$last"; do
    echo "== numactl $policy"
    out=$(numactl $policy env LD_PRELOAD=$lib "$build/test/api" 2>&1) ||
      { echo "$out" | tail -5; echo "FAIL: api under numactl $policy"; bad=1; }
  done
  # Under --membind=LAST every page uslab hands out must be on LAST.
  out=$(numactl --membind=$last env LD_PRELOAD=$lib USLAB_CONF=percpu=true \
        "$build/test/vm_numa_place" "only=$last" 2>&1); echo "$out"
  grep -q "pages elsewhere in all" <<<"$out" || bad=1
  grep -q " 0 pages elsewhere in all" <<<"$out" || { echo "FAIL: pages outside node $last under --membind"; bad=1; }
  return $bad
}

# ---- CPUs that go offline and come back --------------------------------------------------
toggle_cpus() {  # until $1 exits: a random CPU but 0 offline for a moment, then back
  local pid=$1 c
  while kill -0 "$pid" 2>/dev/null; do
    c=$((1 + RANDOM % (cpus - 1)))
    echo 0 >/sys/devices/system/cpu/cpu$c/online 2>/dev/null
    sleep 0.$((RANDOM % 3 + 1))
    echo 1 >/sys/devices/system/cpu/cpu$c/online 2>/dev/null
    sleep 0.1
  done
}
check_hotplug() {
  local rc=0 pid
  [ "$cpus" -ge 2 ] || { echo "one CPU: skipped"; return 77; }
  LD_PRELOAD=$lib USLAB_CONF=decay_ms=400,background_thread=true "$build/test/vm_hotplug" || rc=1
  # Content-verified threads (hand-offs, cross-thread frees, exits) while CPUs come and
  # go; then a process started with a CPU offline, which comes back during the run.
  # Two threads per CPU, at most 16: taking a CPU of a 64-CPU emulated guest offline
  # stops them all, and 128 threads made the check last over an hour.
  local nt=$((cpus * 2 < 16 ? cpus * 2 : 16))
  for conf in "" "percpu=false"; do
    echo "== stress_threads with CPUs going offline (USLAB_CONF=$conf)"
    LD_PRELOAD=$lib USLAB_CONF=$conf "$build/test/stress_threads" $nt 4 10 migrate &
    pid=$!; toggle_cpus $pid; wait $pid || { echo "FAIL: exit $?"; rc=1; }
  done
  echo "== a process started while CPU $((cpus - 1)) is offline"
  echo 0 >/sys/devices/system/cpu/cpu$((cpus - 1))/online
  LD_PRELOAD=$lib "$build/test/stress_threads" $nt 4 10 migrate & pid=$!
  sleep 2; echo 1 >/sys/devices/system/cpu/cpu$((cpus - 1))/online
  wait $pid || { echo "FAIL: exit $?"; rc=1; }
  for c in /sys/devices/system/cpu/cpu[0-9]*/online; do echo 1 >"$c" 2>/dev/null; done
  return $rc
}

# ---- containers: memory.max, memory.high, nested limits ----------------------------------
# cgroup v2 (the default), or v1 (uslab.cgroup=1: the memory and cpu controllers
# mounted on their own hierarchies, as older container hosts have them; set up before
# the checks, below). The checks name v2's files; v1 has its own for each, and no
# memory.high.
cg=/sys/fs/cgroup
cgv=$(arg cgroup); cgv=${cgv:-2}
cg_dir() {  # cg_dir CONTROLLER NAME: the group's directory for that controller
  if [ "$cgv" = 1 ]; then echo "$cg/$1/uslab/$2"; else echo "$cg/uslab/$2"; fi
}
# cg_set NAME FILE=VALUE: a v2 setting, or its v1 counterpart.
cg_set() {
  local name=$1 file=${2%%=*} value=${2#*=}
  if [ "$cgv" = 2 ]; then echo "$value" >"$(cg_dir memory "$name")/$file"; return; fi
  case $file in
    memory.max) echo "$value" >"$(cg_dir memory "$name")/memory.limit_in_bytes" ;;
    memory.swap.max) ;;  # the guest has no swap
    cpu.max) echo "${value#* }" >"$(cg_dir cpu "$name")/cpu.cfs_period_us"
             echo "${value%% *}" >"$(cg_dir cpu "$name")/cpu.cfs_quota_us" ;;
    *) echo "cg_set: $file has no cgroup v1 counterpart" >&2; return 1 ;;
  esac
}
# in_cgroup NAME SETTINGS -- CMD...: runs CMD alone in a new child cgroup with the given
# "file=value" settings; prints its memory events and peak; returns CMD's status.
in_cgroup() {
  local name=$1; shift
  local mem cpu
  mem=$(cg_dir memory "$name") cpu=$(cg_dir cpu "$name")
  mkdir -p "$mem" "$cpu"
  while [ "$1" != "--" ]; do cg_set "$name" "$1"; shift; done; shift
  sh -c 'echo $$ >"$1/cgroup.procs"; echo $$ >"$2/cgroup.procs"; shift 2; exec "$@"' sh "$mem" "$cpu" "$@"
  local rc=$?
  if [ "$cgv" = 1 ]; then
    echo "   memory.failcnt: $(cat "$mem/memory.failcnt"); memory.max_usage_in_bytes: $(($(cat "$mem/memory.max_usage_in_bytes") >> 20)) MiB"
  else
    echo "   memory.events: $(tr '\n' ' ' <"$mem/memory.events"); memory.peak: $(($(cat "$mem/memory.peak" 2>/dev/null || echo 0) >> 20)) MiB"
  fi
  rmdir "$mem" "$cpu" 2>/dev/null
  return $rc
}
if [ "$cgv" = 1 ]; then
  { umount $cg && mount -t tmpfs cgroup $cg && mkdir $cg/memory $cg/cpu &&
    mount -t cgroup -o memory cgroup $cg/memory && mount -t cgroup -o cpu,cpuacct cgroup $cg/cpu; } \
    >>/results/machine.log 2>&1 || cgv=none
  echo "cgroup: v$cgv" >>/results/machine.log
fi
check_cgroup() {
  local bad=0 a rc out
  [ "$cgv" != none ] || { echo "this kernel has no cgroup v1 memory controller: skipped"; return 77; }
  [ "$cgv" = 1 ] || [ -e $cg/cgroup.controllers ] || { echo "no cgroup v2: skipped"; return 77; }
  if [ "$cgv" = 2 ]; then
    mkdir -p $cg/uslab
    echo "+memory +cpu" >$cg/cgroup.subtree_control
    echo "+memory +cpu" >$cg/uslab/cgroup.subtree_control
  fi
  # A 48 MiB cache flushed and refilled with other sizes, in a container of 80 MiB.
  for a in uslab glibc jemalloc mimalloc tcmalloc; do
    echo "== $a, memory.max 80M"
    local t0=$SECONDS
    in_cgroup "max-$a" memory.max=80M memory.swap.max=0 -- \
      env LD_PRELOAD=${peer_lib[$a]} "$build/test/cache_refill" 48 50000; rc=$?
    echo "   exit $rc$([ $rc -eq 137 ] && echo ' (killed: OOM)') after $((SECONDS - t0)) s"
    [ $a = uslab ] && [ $rc -ne 0 ] && { echo "FAIL: uslab did not finish under memory.max"; bad=1; }
  done
  # Above memory.high the kernel throttles the cgroup's allocations instead: a peer
  # that stays above it for long crawls (jemalloc had not finished after 10 minutes).
  for a in uslab jemalloc; do
    [ "$cgv" = 2 ] || break
    echo "== $a, memory.high 80M (throttled above it, not killed; 40 s allowed)"
    local t0=$SECONDS
    in_cgroup "high-$a" memory.high=80M memory.swap.max=0 -- timeout 40 \
      env LD_PRELOAD=${peer_lib[$a]} "$build/test/cache_refill" 48 50000; rc=$?
    echo "   exit $rc$([ $rc -eq 124 ] && echo ' (throttled: not done in 40 s)') after $((SECONDS - t0)) s"
    [ $a = uslab ] && [ $rc -ne 0 ] && { echo "FAIL: uslab did not finish under memory.high"; bad=1; }
  done
  # uslab's limit comes from the cgroup, and from a parent's limit too.
  echo "== the limit uslab takes: memory.max 300M on the cgroup, then on its parent only"
  out=$(in_cgroup limit memory.max=300M -- "$build/uslab-topology" | grep "memory limit"); echo "$out"
  grep -q "of 314572800, cgroup v$cgv" <<<"$out" || { echo "FAIL: not 90% of memory.max"; bad=1; }
  local parent
  parent=$(cg_dir memory parent)
  mkdir -p "$parent"; cg_set parent memory.max=300M
  [ "$cgv" = 2 ] && echo "+memory" >"$parent/cgroup.subtree_control"
  out=$(sh -c 'mkdir -p "$1/child"; echo $$ >"$1/child/cgroup.procs"; exec "$2"' sh "$parent" \
        "$build/uslab-topology" | grep "memory limit"); echo "$out"
  grep -q "of 314572800, cgroup v$cgv" <<<"$out" || { echo "FAIL: the parent's limit not seen"; bad=1; }
  rmdir "$parent/child" "$parent"
  # memory_limit_hard: allocations past the limit fail with ENOMEM; no OOM kill.
  echo "== uslab, memory.max 96M, memory_limit_hard=true"
  in_cgroup hard memory.max=96M memory.swap.max=0 -- env LD_PRELOAD=$lib \
    USLAB_CONF=memory_limit_hard=true "$build/test/cache_refill" until-enomem || bad=1
  echo "== the control: the same without memory_limit_hard is OOM-killed"
  in_cgroup soft memory.max=96M memory.swap.max=0 -- env LD_PRELOAD=$lib \
    "$build/test/cache_refill" until-enomem; rc=$?
  [ $rc -eq 137 ] || { echo "FAIL: exit $rc, not killed: the hard check cannot fail"; bad=1; }
  # A CPU quota without a cpuset (cpu.max, as Kubernetes sets it): 2 threads per CPU
  # roam every CPU on half the CPUs' time; once idle for decay_ms (1 s here) the
  # per-CPU caches of every CPU they touched must be back: what is left above the
  # threads' own baseline (their stacks, huge pages under THP "always") at most a
  # quarter of the peak above it.
  echo "== a CPU quota of $((cpus / 2)) CPUs (cpu.max), $((cpus * 2)) threads, 64 MB peak, 3 s idle"
  for a in uslab glibc jemalloc mimalloc tcmalloc; do
    out=$(in_cgroup "quota-$a" cpu.max="$((cpus / 2 * 100000)) 100000" -- env LD_PRELOAD=${peer_lib[$a]} \
          USLAB_CONF=decay_ms=1000 USLAB_STATS=1 "$build/test/vm_server_idle" $((cpus * 2)) 64 3000 2>&1)
    echo "   $a: $(grep -o 'peak_kib.*' <<<"$out")$([ $a = uslab ] && grep -o '[0-9]* of [0-9]* CPUs used' <<<"$out" | sed 's/^/, sheaves of /')"
    if [ $a = uslab ]; then
      local pk idle base
      pk=$(sed -n 's/.*peak_kib \([0-9]*\).*/\1/p' <<<"$out"); idle=$(sed -n 's/.*idle_kib \([0-9]*\).*/\1/p' <<<"$out")
      base=$(sed -n 's/.*base_kib \([0-9]*\).*/\1/p' <<<"$out")
      [ -n "$idle" ] && [ -n "$base" ] && [ $((idle - base)) -le $(((pk - base) / 4)) ] ||
        { echo "FAIL: uslab kept its caches under the quota"; bad=1; }
    fi
  done
  return $bad
}

# ---- real programs: the host's list, less those the guest lacks (the x86-64 guest: g++,
# git, redis), and redis-server's purge through mallctl where it is installed (arm64).
# Then the mode they ran in, from the statistics: per-CPU, not the per-thread fallback.
check_programs() {
  local rc=0 mode
  bash "$src/test/programs/run_programs.sh" --available "$lib" || rc=1
  bash "$src/test/programs/redis_purge.sh" "$lib"
  case $? in 0|77) ;; *) rc=1 ;; esac
  mode=$(LD_PRELOAD=$lib USLAB_STATS=1 python3 -c pass 2>&1 | grep -o -m1 'mode: [^)]*)')
  echo "python3 under uslab: ${mode:-no mode in its statistics}"
  [[ "$mode" == "mode: percpu"* ]] || { echo "FAIL: not in per-CPU mode"; rc=1; }
  return $rc
}

# ---- footprints (64 threads and a 1 GB peak on a 64-CPU shape; less on small ones;
# uslab.threads sets the server's threads), and the peers built from their sources that
# the host put in the guest (arm64.sh: /var/tmp/peers/list, NAME=PATH[;VAR=VALUE] a line)
check_footprint() {
  local threads peak=$((cpus * 16)) extra=()
  threads=$(arg threads); threads=${threads:-$cpus}
  [ $peak -gt 1024 ] && peak=1024
  [ -f /var/tmp/peers/list ] && mapfile -t extra </var/tmp/peers/list
  python3 "$src/test/vm/footprint.py" "$build" "$threads" $peak 12000 "${extra[@]}"
}

# ---- strict overcommit: every private writable mapping counted against the limit ------
# vm.overcommit_memory=2 (database hosts' setting) with the limit at half the guest's
# memory: each allocator starts python3, then test/vm/commit.c allocates objects of
# 64 B, 4 KiB, 1 MiB and 2 MiB on every CPU until malloc fails; uslab must fail with
# ENOMEM, keep every object intact, allocate again after frees and reach 85% of the
# headroom. The share each allocator reached is printed (bench/RESULTS.md's table),
# and the commit charge each adds to /bin/true, python3 and 64 threads, where uslab's
# may be no more than the lowest peer's.
check_overcommit() {
  local bad=0 mode ratio a s out rc
  mode=$(cat /proc/sys/vm/overcommit_memory) ratio=$(cat /proc/sys/vm/overcommit_ratio)
  echo 50 >/proc/sys/vm/overcommit_ratio && echo 2 >/proc/sys/vm/overcommit_memory ||
    { echo "cannot set vm.overcommit_memory"; return 77; }
  grep -E '^(MemTotal|CommitLimit|Committed_AS)' /proc/meminfo
  for a in uslab glibc jemalloc mimalloc tcmalloc; do
    [ -z "${peer_lib[$a]}" ] || [ -e "${peer_lib[$a]}" ] || continue
    out=$(env LD_PRELOAD=${peer_lib[$a]} python3 -c 'print(sum(range(1000)))' 2>&1); rc=$?
    echo "== $a: python3 starts: $([ $rc -eq 0 ] && [ "$out" = 499500 ] && echo yes || echo "no (exit $rc: $out)")"
    [ $a = uslab ] && [ "$out" != 499500 ] && bad=1
    for s in 64 4096 1048576 2097152; do
      out=$(env LD_PRELOAD=${peer_lib[$a]} "$build/test/vm_commit" $s "$cpus" \
        $([ $a = uslab ] && echo 85) 2>&1); rc=$?
      echo "   $a: ${out:-no output} (exit $rc)"
      [ $a = uslab ] && [ $rc -ne 0 ] && { echo "FAIL: uslab under strict overcommit, $s B"; bad=1; }
    done
  done
  # What each allocator adds to a process's commit charge before it does anything
  # (test/conformance/startup_charge.sh): uslab at most the lowest of the peers.
  local -A charge
  for a in glibc uslab jemalloc mimalloc tcmalloc; do
    [ -z "${peer_lib[$a]}" ] || [ -e "${peer_lib[$a]}" ] || continue
    charge[$a]=$(bash "$src/test/conformance/startup_charge.sh" "${peer_lib[$a]}" "" \
      "$build/test/libcharge_probe.so" "$build/test/threads_at_exit" -) || bad=1
    echo "== $a: commit charge at exit, KiB: ${charge[$a]}"
  done
  local cmd u p
  for cmd in true python3 threads; do
    u=$(awk -v k=$cmd '{for (i = 1; i < NF; i += 2) if ($i == k) print $(i + 1)}' <<<"${charge[uslab]}")
    for a in jemalloc mimalloc tcmalloc; do
      [ -n "${charge[$a]:-}" ] || continue
      p=$(awk -v k=$cmd '{for (i = 1; i < NF; i += 2) if ($i == k) print $(i + 1)}' <<<"${charge[$a]}")
      [ -n "$u" ] && [ -n "$p" ] && [ "$u" -gt "$p" ] &&
        { echo "FAIL: $cmd: uslab's commit charge $u KiB is above $a's $p KiB"; bad=1; }
    done
  done
  echo "$ratio" >/proc/sys/vm/overcommit_ratio; echo "$mode" >/proc/sys/vm/overcommit_memory
  return $bad
}

# ---- the package (tools/uslab package) installed with apt, when the guest has one ------
# (arm64.sh puts the arm64 .deb at /var/tmp/uslab.deb): the installed command, the
# library by its SONAME preloaded into python3 in per-CPU mode, and apt's removal.
check_package() {
  local deb=/var/tmp/uslab.deb bad=0 version major out
  [ -f $deb ] || { echo "no package in the guest"; return 77; }
  version=$(dpkg-deb -f $deb Version); version=${version%-*}; major=${version%%.*}
  echo "== $(dpkg-deb -f $deb Package Version Architecture | tr '\n' ' ')"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $deb || { echo "FAIL: apt did not install it"; return 1; }
  out=$(uslab --version); echo "uslab --version: $out"
  [ "$out" = "uslab $version" ] || { echo "FAIL: not uslab $version"; bad=1; }
  out=$(LD_PRELOAD=libuslab.so.$major USLAB_STATS=1 python3 -c 'print(len([str(i) for i in range(10**5)]))' 2>&1)
  grep -m1 '^uslab stats' <<<"$out"
  grep -qx 100000 <<<"$out" && grep -q '^uslab stats (mode: percpu' <<<"$out" ||
    { echo "FAIL: python3 with libuslab.so.$major preloaded"; bad=1; }
  uslab topology | grep 'uslab uses' || { echo "FAIL: uslab topology"; bad=1; }
  apt-get purge -y -q uslab || bad=1
  [ ! -e "$multiarch/libuslab.so.$major" ] && [ ! -e /usr/bin/uslab ] ||
    { echo "FAIL: apt left files"; bad=1; }
  return $bad
}

want topology && check topology check_topology
want kernel && check kernel check_kernel
# The conformance suite whole, less on x86-64 its runs at OS pages of 16 and 64 KiB
# (os_page): those ask of this kernel what the host's run asks of it, and the arm64
# guests run them (one on a real 16 KiB kernel); conformance-all: every test.
os_page_runs='^$'
[ "$(uname -m)" = x86_64 ] && os_page_runs='\[OS pages of'
want conformance && check conformance run_listed conformance '.' "$os_page_runs"
want conformance-all && check conformance-all run_listed conformance '.'
# The stress suite's default mode in CI (emulated CPUs are slow), less its slowest there
# (100000 threads, fork storms: 80-90 s each, no CPU or node logic of their own) and the
# memory-limit runs (the cgroup check has them); stress-all: every test, every mode.
want stress && check stress run_listed stress '^(stress_ (threads|churning|out of memory|cached|a thread|memory freed)|deferred free, readers)[^[]*$'
want stress-all && check stress-all run_listed stress '.'
# The sandbox matrix's default mode on a machine whose nodes are real (segments bound
# with mbind), for the NUMA calls alone: the rest runs on the host.
check_sandbox() {
  USLAB_SANDBOX_CALLS=mbind,get_mempolicy,set_mempolicy,move_pages \
    run_listed sandbox '^sandboxes. each call refused \(EPERM[^[]*$'
}
want sandbox && check sandbox check_sandbox
want numa && check numa check_numa
want numa && check numactl check_numactl
want overcommit && check overcommit check_overcommit
want hotplug && check hotplug check_hotplug
want cgroup && check cgroup check_cgroup
want programs && check programs check_programs
want footprint && check footprint check_footprint
want package && check package check_package
want script && check script env build="$build" lib="$lib" src="$src" bash /results/script.sh
record DONE
