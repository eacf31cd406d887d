#!/bin/bash
# test/conformance/startup_charge.sh LIB FLOOR PROBE THREADS [MAX_KIB] — the commit
# charge LIB adds to a process (charge_probe.c, preloaded after it): what strict
# overcommit (vm.overcommit_memory=2, many database hosts' setting) holds against the
# commit limit for every process, forked children included, pages written or not.
# /bin/true, python3 -c pass and THREADS (64 threads alive at exit,
# threads_at_exit.c), each with LIB and with FLOOR (an empty library); LIB may add at
# most MAX_KIB (1024). libuslab.so's shard tables (3 MiB) and page-map root (1 MiB)
# in .lbss are zero pages committed as they are used; loaded writable, they charged
# every process 4 MiB. Under the default overcommit the kernel accounts the same
# mappings but for MAP_NORESERVE ones (uslab's segments): the guest's strict check
# (test/vm/guest.sh, overcommit) counts those too, against the peers.
# With MAX_KIB "-": prints LIB's charges alone (KiB, one line), checks nothing.
set -u
lib=$1 floor=$2 probe=$3 threads=$4 max=${5:-1024}
out=$(mktemp); trap 'rm -f "$out"' EXIT
# charge LIB CMD...: the KiB the command's own process was charged at exit (its
# children, python3's say, report too: their lines are skipped).
charge() {
  local with=$1 pid; shift
  : >"$out"
  CHARGE_PROBE_FD=9 LD_PRELOAD="$with:$probe" "$@" 9>"$out" >/dev/null 2>&1 &
  pid=$!
  wait $pid || { echo "FAIL: $* exited $? with LD_PRELOAD=$with" >&2; return 1; }
  awk -v p=$pid '$1 == p {print $2; found = 1} END {exit !found}' "$out" ||
    { echo "FAIL: no charge reported by $*" >&2; return 1; }
}
fail=0 line=""
while read -r name cmd; do
  # shellcheck disable=SC2086
  l=$(charge "$lib" $cmd) || { fail=1; continue; }
  line+="$name $l "
  [ "$max" = - ] && continue
  # shellcheck disable=SC2086
  f=$(charge "$floor" $cmd) || { fail=1; continue; }
  echo "$name: charged $l KiB with $(basename "$lib"), $f KiB with an empty library: $((l - f)) more (at most $max)"
  [ $((l - f)) -le "$max" ] || { echo "FAIL: $name: $((l - f)) KiB more than an empty library"; fail=1; }
done <<EOF2
true /bin/true
python3 python3 -c pass
threads $threads 64
EOF2
[ "$max" = - ] && echo "$line"
exit $fail
