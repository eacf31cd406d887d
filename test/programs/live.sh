#!/usr/bin/env bash
# test/programs/live.sh ROOT BUILD — a running process's statistics and heap profile
# read from outside (core/stats/live.cc, tools/live.py), with no option and no code
# change: python3 (a real program, objects made through ctypes' malloc) under uslab
# with prof=true; `uslab stats --pid` (table, JSON, Prometheus) checked against the
# known objects, the table against the JSON, and everything against the process's
# own statistics at exit; `uslab prof --pid`'s live heap against the profile written
# at exit; `uslab top` in batch mode and on a terminal (tmux: sort keys, quit); a
# forked child read apart from its parent; `uslab prof --pid` naming a C program's
# allocation site; with no option, a 70 MB heap that freed nothing and python3 holding
# 40 MB of small objects in its own arenas, idle and busy, read within a second, and
# an idle process's profile; another version noted, another layout refused; and the
# clear refusals: no uslab, live_stats=false, no prof=true, a process with no
# background thread (small and done allocating within 30 ms), no process.
set -u
root=$(readlink -f "$1")
build=$(readlink -f "$2")
lib=$build/libuslab.so
hold=$build/test/live_hold
work=$(mktemp -d)
declare -A fds
pids=()
cleanup() {
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  tmux kill-session -t uslab-live-test 2>/dev/null
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
checks=0 fails=0
check() {  # check NAME COMMAND...: COMMAND must succeed
  local name=$1; shift
  checks=$((checks + 1))
  if ! "$@"; then echo "FAILED: $name"; fails=$((fails + 1)); fi
}
uslab() { USLAB_BUILD=$build "$root/tools/uslab" "$@"; }

# start NAME CONF CMD...: CMD under uslab (USLAB_CONF=CONF, exit statistics as JSON on
# its stderr), its stdin a FIFO this script holds; returns once it printed "ready".
start() {
  local name=$1 conf=$2 fd; shift 2
  mkfifo "$work/$name.in"
  LD_PRELOAD=$lib USLAB_CONF=$conf USLAB_STATS=json "$@" <"$work/$name.in" \
    >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  eval "echo \$! > $work/$name.pid"
  exec {fd}>"$work/$name.in"
  fds[$name]=$fd
  for _ in $(seq 200); do grep -q ready "$work/$name.out" 2>/dev/null && return 0; sleep 0.1; done
  echo "FAILED: $name never became ready: $(tail -3 "$work/$name.err")"; exit 1
}
stop() {  # closes NAME's stdin and waits for it to exit
  local name=$1
  exec {fds[$name]}>&-
  wait "$(cat "$work/$name.pid")"
}
pid_of() { cat "$work/$1.pid"; }

# --- python3 with prof=true, 40000 objects of 1000 bytes kept and 40000 freed (the
# profiler takes its sampled objects, about 1 in 500 here, out of the class rows) ---
cat >"$work/hold.py" <<'PY'
import ctypes, sys
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
keep = [libc.malloc(1000) for _ in range(40000)]
drop = [libc.malloc(1000) for _ in range(40000)]
for p in drop:
    libc.free(p)
print("ready", flush=True)
sys.stdin.readline()
PY
# Debian's interpreter itself (a pyenv shim would run as a chain of processes).
python=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)
start py "prof=true,prof_prefix=$work/pyprof" "$python" "$work/hold.py"
py=$(pid_of py)
check "stats --pid: the table" uslab stats --pid "$py" >"$work/table" 2>"$work/table.err"
check "stats --pid --json" uslab stats --pid "$py" --json >"$work/live.json" 2>"$work/json.err"
check "stats --pid --prometheus" uslab stats --pid "$py" --prometheus >"$work/prom" 2>"$work/prom.err"
check "top --batch: two frames" uslab top "$py" --batch --frames 2 --interval 0.3 >"$work/top"
check "prof --pid of python3" uslab prof --pid "$py" >"$work/pyprof.out"
live_pb=$(awk '/^profile of process/ {print $NF}' "$work/pyprof.out")

# uslab top on a terminal: sorted by active objects, then by size ('s'), then quit.
tmux new-session -d -s uslab-live-test -x 150 -y 40 \
  "USLAB_BUILD=$build $root/tools/uslab top $py --interval 0.5; echo top-ended; sleep 30"
for _ in $(seq 50); do
  tmux capture-pane -p -t uslab-live-test >"$work/screen1" 2>/dev/null
  grep -q "^ *CLASS" "$work/screen1" && break; sleep 0.2
done
tmux send-keys -t uslab-live-test s
sleep 1.5
tmux capture-pane -p -t uslab-live-test >"$work/screen2"
tmux send-keys -t uslab-live-test q
sleep 1
tmux capture-pane -p -t uslab-live-test >"$work/screen3"

stop py
check "python3 exits 0" test $? -eq 0
# The heap profile taken live and the one written at exit: the 40 MB kept in both.
inuse() { uslab prof --read "$1" --totals | awk '$1 == "inuse_space" {print $2}'; }
live_inuse=$(inuse "$live_pb")
exit_inuse=$(inuse "$(ls "$work"/pyprof."$py".*.final.pb)")
check "prof --pid: about the 40 MB kept live ($live_inuse bytes), as at exit ($exit_inuse)" \
  python3 -c 'import sys; l, e = int(sys.argv[1]), int(sys.argv[2])
sys.exit(not (26e6 <= l <= 60e6 and abs(e - l) <= 0.3 * l))' "${live_inuse:-0}" "${exit_inuse:-0}"

python3 - "$work" "$py" <<'PY' || fails=$((fails + 1))
import json, re, sys
work, pid = sys.argv[1], int(sys.argv[2])
bad = []
def ok(cond, what):
    if not cond:
        bad.append(what)
live = json.load(open(work + "/live.json"))
ok(live["pid"] == pid, "the JSON is the process's (pid %s)" % live["pid"])
cls = min((c for c in live["classes"] if c["size"] >= 1000), key=lambda c: c["size"])
ok(39700 <= cls["active"] <= 42000, "class %d (%d B) holds the 40000 objects kept: %d active"
   % (cls["class"], cls["size"], cls["active"]))
ok(live["bytes"]["allocated"] >= 40000 * 1000, "bytes.allocated %d" % live["bytes"]["allocated"])
# A shard used at start-up may have given all its segments back since (decay unmaps
# a wholly free one): the shards together map the 40 MB kept, each its free within.
ok(sum(s["mapped"] for s in live["shards"]) >= 40000 * 1000
   and all(0 <= s["free"] <= s["mapped"] for s in live["shards"]),
   "shards map the 40 MB kept: %s" % live["shards"])
ok(live["background"]["state"] == "running", "the background thread runs (40 MB freed)")
ok(isinstance(live["thp"]["process_bytes"], int), "thp.process_bytes read from smaps_rollup")
# The table of the same snapshot: its row of that class as in the JSON.
table = open(work + "/table").read()
ok(table.startswith("uslab stats (mode:"), "the table's first line")
rows = {int(l.split()[0]): l.split() for l in table.splitlines() if re.match(r"^ +\d+ +\d+ ", l)}
row = rows.get(cls["class"])
ok(row and int(row[2]) == cls["slabs"] and int(row[3]) == cls["objects"]
   and int(row[4]) >= 40000, "the table's row %s against the JSON's %s" % (row, cls))
# Prometheus: every line a comment or `name{labels} value`, types declared first.
types = set()
for line in open(work + "/prom"):
    line = line.rstrip("\n")
    m = re.match(r"# TYPE (\w+) (gauge|counter)$", line)
    if m:
        types.add(m.group(1))
        continue
    if line.startswith("# HELP "):
        continue
    m = re.match(r'^(\w+)(\{(\w+="(\\\\.|[^"\\\\])*",?)*\})? (-?[0-9.]+)$', line)
    ok(m and m.group(1) in types, "Prometheus line %r" % line)
prom = open(work + "/prom").read()
m = re.search(r'uslab_class_active_objects\{cls="%d",size="%d"\} (\d+)' % (cls["class"], cls["size"]),
              prom)
ok(m and 39700 <= int(m.group(1)) <= 42000, "the class's active objects in Prometheus")
# top --batch: two frames, the class of the kept objects on the first row (by active).
top = open(work + "/top").read()
frames = [f for f in top.split("uslab top - pid %d" % pid) if f.strip()]
ok(len(frames) == 2, "two frames in batch mode, got %d" % len(frames))
first = [l for l in frames[0].splitlines() if re.match(r"^ +\d+ +\d+ ", l)]
ok(first and int(first[0].split()[0]) == cls["class"], "top's first row %r" % first[:1])
# On the terminal: the screen, the sort key, the end.
s1, s2, s3 = (open(work + "/screen%d" % i).read() for i in (1, 2, 3))
ok("sorted by active" in s1 and re.search(r"^ +%d +%d " % (cls["class"], cls["size"]),
   s1.split("CLASS", 1)[-1].split("\n", 2)[1] if "CLASS" in s1 else "", re.M),
   "tmux: the first screen, by active objects: %r" % s1[:400])
rows2 = [l.split() for l in s2.split("CLASS", 1)[-1].splitlines()[1:] if re.match(r"^ +\d+ +\d+ ", l)]
sizes = [int(r[1]) for r in rows2]
ok("sorted by size" in s2 and sizes and sizes == sorted(sizes, reverse=True),
   "tmux: 's' sorts by size: %r" % sizes)
ok("top-ended" in s3, "tmux: 'q' quits")
# Against the process's own statistics at exit: the kept objects are all still there.
err, docs, at = open(work + "/py.err").read(), [], 0
while "{" in err[at:]:  # the process's document (children the interpreter ran print theirs)
    doc, at = json.JSONDecoder().raw_decode(err, err.index("{", at))
    docs.append(doc)
exit_stats = ([d for d in docs if d["pid"] == pid] or [{"pid": None, "classes": []}])[0]
ecls = [c for c in exit_stats["classes"] if c["class"] == cls["class"]]
ok(ecls and 39700 <= ecls[0]["active"] <= cls["active"],
   "at exit class %d has %s active, live %d" % (cls["class"], ecls and ecls[0]["active"], cls["active"]))
ok(exit_stats["pid"] == live["pid"], "the same process at exit")
for b in bad:
    print("FAILED:", b)
print("live python3: %d checks, %d failed" % (16, len(bad)))
sys.exit(1 if bad else 0)
PY
checks=$((checks + 16))

# --- a forked child has statistics of its own ---
start hold "" "$hold" 40000 40000 1000
parent=$(pid_of hold)
echo fork >&"${fds[hold]}"
for _ in $(seq 100); do grep -q "^child" "$work/hold.out" && break; sleep 0.1; done
child=$(awk '/^child/ {print $2}' "$work/hold.out")
check "fork: the child reports" test -n "$child"
uslab stats --pid "$child" --json >"$work/child.json" 2>"$work/child.err"
uslab stats --pid "$parent" --json >"$work/parent.json" 2>"$work/parent.err"
check "fork: the child's figures are the child's (80000 objects: its own and its parent's)" \
  python3 -c '
import json, sys
c, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cc = min((x for x in c["classes"] if x["size"] >= 1000), key=lambda x: x["size"])
pc = min((x for x in p["classes"] if x["size"] >= 1000), key=lambda x: x["size"])
sys.exit(not (c["pid"] == int(sys.argv[3]) and p["pid"] == int(sys.argv[4])
              and cc["active"] >= 79900 and 39900 <= pc["active"] < 41000))' \
  "$work/child.json" "$work/parent.json" "$child" "$parent"
# Another version: a reader of another release says so and reads on (the layout is
# the same); a region of another layout (its magic overwritten here) is refused.
USLAB_TOOL_VERSION=9.9.9 python3 "$root/tools/live.py" stats --pid "$parent" >/dev/null \
  2>"$work/version.err"
check "a reader of another version says which each is" \
  grep -q "runs uslab .*, this reader is uslab 9.9.9" "$work/version.err"
python3 - "$parent" <<'PY'
import sys
pid = int(sys.argv[1])
base = next(int(l.split("-")[0], 16) for l in open("/proc/%d/maps" % pid) if "/memfd:uslab-live" in l)
with open("/proc/%d/mem" % pid, "r+b", buffering=0) as mem:
    mem.seek(base + 64)
    mem.write(b"uslabLV9")
PY
checks=$((checks + 1))
if uslab stats --pid "$parent" >"$work/layout" 2>&1 || ! grep -q "another layout" "$work/layout"; then
  echo "FAILED: another layout is refused: $(cat "$work/layout")"; fails=$((fails + 1))
fi
stop hold

# --- a heap profile now, from a process started with prof=true ---
start profd "prof=true,prof_prefix=$work/prof" "$hold" 20000 20000 500
(cd "$work" && uslab prof --pid "$(pid_of profd)" --top 5) >"$work/prof.out" 2>&1
check "prof --pid: the profile names make_records" grep -q make_records "$work/prof.out"
check "prof --pid: the file is there" test -s "$(awk '/^profile of process/ {print $NF}' "$work/prof.out")"
stop profd

# --- with no option: a heap that freed nothing, and python3 holding 40 MB of small
# objects in its own arenas (uslab's heap: one segment), idle and busy, each read
# within a second; an idle process started with prof=true gives its profile ---
# read_within NAME SECONDS: `uslab stats --pid` of NAME answers, as JSON naming the
# process, with the background thread running, within SECONDS.
read_within() {
  local pid start took
  pid=$(pid_of "$1")
  start=$(date +%s%N)
  uslab stats --pid "$pid" --json >"$work/$1.json" 2>"$work/$1.read.err"
  took=$((($(date +%s%N) - start) / 1000000))
  echo "stats --pid of $1: $took ms"
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(not (d["pid"] == int(sys.argv[2]) and d["background"]["state"] == "running"))' \
    "$work/$1.json" "$pid" && [ "$took" -le $(($2 * 1000)) ]
}
start big "" "$hold" 70000 0 1000
check "a 70 MB heap that freed nothing is read within a second" read_within big 1
stop big
cat >"$work/small_objects.py" <<'PY'
import sys, threading
keep = [bytes(200) + str(i).encode() for i in range(200000)]
def churn():
    while True:
        x = [bytearray(1000) for _ in range(1000)]
        del x
if sys.argv[1] == "busy":
    threading.Thread(target=churn, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
PY
start idle40 "" "$python" "$work/small_objects.py" idle
sleep 0.5  # the thread asleep by now: nothing to give back
check "python3 idle with 40 MB of small objects is read within a second" read_within idle40 1
stop idle40
start busy40 "" "$python" "$work/small_objects.py" busy
check "python3 busy with 40 MB of small objects is read within a second" read_within busy40 1
stop busy40
# decay_ms=100: the thread has nothing left to give back, and sleeps, soon.
start idleprof "prof=true,decay_ms=100,prof_prefix=$work/idleprof" "$python" \
  "$work/small_objects.py" idle
for _ in $(seq 50); do
  uslab stats --pid "$(pid_of idleprof)" 2>/dev/null | grep -q "asleep (nothing to give back)" && break
  sleep 0.2
done
start_ms=$(date +%s%N)
(cd "$work" && uslab prof --pid "$(pid_of idleprof)" >"$work/idleprof.out" 2>&1)
took=$((($(date +%s%N) - start_ms) / 1000000))
echo "prof --pid of an idle python3: $took ms"
check "prof --pid of an idle process started with prof=true answers within 2 s" \
  test -s "$(awk '/^profile of process/ {print $NF}' "$work/idleprof.out")" -a "$took" -le 2000
stop idleprof

# --- what it says where there is nothing to read ---
refused() {  # refused NAME PATTERN COMMAND...: the command fails, saying PATTERN
  local name=$1 pattern=$2; shift 2
  checks=$((checks + 1))
  if "$@" >"$work/refusal" 2>&1 || ! grep -q "$pattern" "$work/refusal"; then
    echo "FAILED: $name: $(cat "$work/refusal")"; fails=$((fails + 1))
  fi
}
start noprof "" "$hold" 20000 20000 500
refused "prof --pid without prof=true" "without prof=true" uslab prof --pid "$(pid_of noprof)"
stop noprof
sleep 60 & plain=$!; pids+=($plain)
refused "a process without uslab" "does not run uslab" uslab stats --pid "$plain"
start off "live_stats=false" "$hold" 40000 40000 1000
refused "live_stats=false" "started with USLAB_CONF=live_stats=false" \
  uslab stats --pid "$(pid_of off)"
stop off
start small "" "$hold" 1000 0 64
refused "a small process with no background thread" "no live region yet" \
  uslab stats --pid "$(pid_of small)"
stop small
(exit 0) & gone=$!; wait $gone
refused "no such process" "no process" uslab stats --pid "$gone"

echo "live: $checks checks, $fails failed"
[ $fails -eq 0 ]
