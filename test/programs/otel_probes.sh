#!/usr/bin/env bash
# test/programs/otel_probes.sh LIB — the OpenTelemetry eBPF profiler's allocator
# probes (core/platform/probe.h: otel_memory:alloc(address, size, weight) on each
# allocation the heap profiler samples, otel_memory:free(address) when one is freed),
# read live with perf: python3 runs with uslab and prof=true, perf records both
# probes, and every sampled allocation must name its size and a weight of at least
# that size, and every free an address an alloc named. Needs perf and uprobes (root);
# exits 77 (skipped, with the reason) where perf cannot attach.
set -u
lib=$(readlink -f "$1")
command -v perf >/dev/null || { echo "skipped: no perf (Debian: linux-perf)"; exit 77; }
work=$(mktemp -d)
cleanup() { perf probe -q -d 'sdt_otel_memory:*' >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
perf probe -q -d 'sdt_otel_memory:*' >/dev/null 2>&1
if ! perf probe -q -x "$lib" -a sdt_otel_memory:alloc -a sdt_otel_memory:free >"$work/probe" 2>&1; then
  echo "skipped: perf cannot add uprobes here: $(head -2 "$work/probe")"; exit 77
fi
LD_PRELOAD=$lib USLAB_CONF=prof=true,prof_sample=4k,prof_final=false \
  perf record -q -e sdt_otel_memory:alloc -e sdt_otel_memory:free -o "$work/perf.data" \
  python3 -c 'x = [bytearray(100) for i in range(20000)]; del x' >"$work/rec" 2>&1 ||
  { echo "FAILED: perf record: $(tail -3 "$work/rec")"; exit 1; }
perf script -i "$work/perf.data" -F event,trace >"$work/events" 2>/dev/null
python3 - "$work/events" <<'PY'
import re, sys
allocs, frees, bad = {}, [], []
for line in open(sys.argv[1]):
    args = dict(re.findall(r"arg(\d)=(\d+)", line))
    if "otel_memory:alloc" in line:
        p, size, w = int(args["1"]), int(args["2"]), int(args["3"])
        allocs[p] = size
        if size == 0 or w < size:
            bad.append(line.strip())
    elif "otel_memory:free" in line:
        frees.append(int(args["1"]))
unknown = [p for p in frees if p not in allocs]
checks = [(len(allocs) >= 100, f"{len(allocs)} sampled allocations (want >= 100)"),
          (len(frees) >= 50, f"{len(frees)} sampled frees (want >= 50)"),
          (not bad, f"allocations with no size or a weight below it: {bad[:3]}"),
          (not unknown, f"frees of addresses no alloc named: {unknown[:3]}")]
fail = [why for ok, why in checks if not ok]
for why in fail:
    print("FAILED:", why)
print(f"otel probes: {len(allocs)} allocations, {len(frees)} frees, "
      f"{len(checks)} checks, {len(fail)} failed")
sys.exit(1 if fail else 0)
PY
