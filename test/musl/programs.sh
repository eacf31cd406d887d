#!/usr/bin/env bash
# test/musl/programs.sh ROOT LIB WORDFREQ LIVE_HOLD — musl-linked programs with the
# musl libuslab.so (LIB) preloaded: wordfreq on ~40 MB of generated text, alone and
# with forked children, its output equal to the run on musl's own malloc, and uslab's
# statistics at exit proving it served the run; then a musl process read live by
# `uslab stats --pid` (the reader does not care which libc the process has).
set -u
root=$(readlink -f "$1")
lib=$(readlink -f "$2")
wordfreq=$(readlink -f "$3")
hold=$(readlink -f "$4")
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
checks=0 fails=0
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }

file "$wordfreq" | grep -q "ld-musl" || { echo "FAILED: $wordfreq is not a musl program"; exit 1; }

# Text: the licences of the system, repeated with numbered words, 40 MB or so.
python3 - "$work/text" <<'PY'
import glob, sys
words = []
for f in sorted(glob.glob("/usr/share/common-licenses/*"))[:8]:
    try:
        words += open(f, errors="replace").read().split()
    except OSError:
        pass
words = words or ["lorem", "ipsum", "dolor"]
with open(sys.argv[1], "w") as out:
    for r in range(120):
        out.write(" ".join(w + ("x" * (i % 7)) for i, w in enumerate(words[r % 50:])) + "\n")
PY

for kids in 0 4; do
  checks=$((checks + 1))
  "$wordfreq" 20 $kids <"$work/text" >"$work/musl.$kids" 2>&1 || fail "wordfreq $kids on musl's malloc"
  LD_PRELOAD=$lib USLAB_STATS=1 "$wordfreq" 20 $kids <"$work/text" >"$work/uslab.$kids" \
    2>"$work/stats.$kids" || fail "wordfreq $kids under uslab exits $?: $(tail -3 "$work/stats.$kids")"
  cmp -s "$work/musl.$kids" "$work/uslab.$kids" || fail "wordfreq $kids: output differs"
  grep -q "distinct words" "$work/uslab.$kids" || fail "wordfreq $kids: no result"
  # The parent's table, and each child's (they exit through exit(): stats too).
  want=$((1 + kids))
  got=$(grep -c "^uslab stats (mode: percpu" "$work/stats.$kids")
  [ "$got" -eq "$want" ] || fail "wordfreq $kids: $got of $want processes report uslab's statistics"
done
echo "wordfreq: $(tail -1 "$work/uslab.0"), top word: $(head -1 "$work/uslab.0")"

# A musl process read live.
checks=$((checks + 1))
mkfifo "$work/in"
LD_PRELOAD=$lib "$hold" 40000 40000 1000 <"$work/in" >"$work/hold.out" 2>&1 &
hold_pid=$!
exec 3>"$work/in"
for _ in $(seq 100); do grep -q ready "$work/hold.out" && break; sleep 0.1; done
USLAB_BUILD= "$root/tools/uslab" stats --pid $hold_pid --json >"$work/live.json" 2>"$work/live.err" ||
  fail "stats --pid of a musl process: $(cat "$work/live.err")"
python3 - "$work/live.json" $hold_pid <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
c = min((x for x in d["classes"] if x["size"] >= 1000), key=lambda x: x["size"])
ok = d["pid"] == int(sys.argv[2]) and 39900 <= c["active"] <= 41000
print("%s: live musl process, class %d active %d" % ("ok" if ok else "FAILED", c["class"], c["active"]))
sys.exit(0 if ok else 1)
PY
exec 3>&-
wait $hold_pid || fail "the musl process exits $?"

echo "musl programs: $checks checks, $fails failed"
[ $fails -eq 0 ]
