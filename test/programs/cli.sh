#!/usr/bin/env bash
# test/programs/cli.sh TOOLS_USLAB BUILD_DIR — each uslab subcommand on real programs:
# run and stats on sort (output equal to sort's without uslab; the table names the
# mode), run's preload for the whole process tree or (--no-children) the top program only, path, ab on a deterministic program (table with ratios), on a failing one
# (runs flagged, non-zero exit), on one whose output changes every run (the
# comparison switched off with a note), with piped and --input standard input (the
# same for every run), on a static binary and a program with its own allocator (no
# ratio: the allocator did not serve it), and bench on its quickest benchmark (with
# --plot where matplotlib is installed), and prof on a program with known allocation
# sites (the top sites, the files, the flame graph).
set -u
uslab=$1
export USLAB_BUILD=$2
fail=0; total=0
check() { total=$((total+1)); if ! eval "$1"; then fail=$((fail+1)); echo "FAILED: $2"; fi; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seq 1 20000 | awk '{print ($1 * 7919) % 10007, $1}' > "$work/data"

lib=$("$uslab" path)
check '[ "$lib" = "$USLAB_BUILD/libuslab.so" ] && [ -f "$lib" ]' "path prints the library ($lib)"
# --version: the project's version, the library's file and SONAME agree with it.
version=$("$uslab" --version)
real=$(readlink -f "$lib")
ver=${real##*libuslab.so.}
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
check '[ "$version" = "uslab $ver" ] && [ "$soname" = "libuslab.so.${ver%%.*}" ]' \
  "--version ($version), the library file ($real) and its SONAME ($soname) agree"

sort -n "$work/data" > "$work/plain.out"
"$uslab" run -- sort -n "$work/data" > "$work/run.out" 2>"$work/run.err"
check 'cmp -s "$work/plain.out" "$work/run.out"' "run: sort's output under uslab equals plain sort's"
"$uslab" run --allocator jemalloc -- sort -n "$work/data" > "$work/je.out" 2>/dev/null
check 'cmp -s "$work/plain.out" "$work/je.out"' "run --allocator jemalloc works"

"$uslab" stats -- sort -n "$work/data" > "$work/stats.out" 2>"$work/stats.err"
check 'cmp -s "$work/plain.out" "$work/stats.out"' "stats: output unchanged"
check 'grep -q "^uslab stats (mode: " "$work/stats.err"' "stats: table on stderr ($(head -c 300 "$work/stats.err"))"
check 'grep -q "^cached: " "$work/stats.err"' "stats: totals printed"
"$uslab" stats --json -- sort -n "$work/data" > "$work/json.out" 2>"$work/json.err"
check 'cmp -s "$work/plain.out" "$work/json.out"' "stats --json: output unchanged"
is_doc='import json, sys; d = json.load(open(sys.argv[1])); assert d["schema"] == 1 and d["classes"]'
check 'python3 -c "$is_doc" "$work/json.err"' \
  "stats --json: one JSON document with class rows on stderr ($(head -c 200 "$work/json.err"))"
# run keeps the preload for the whole process tree; --no-children for the top only.
tree=$("$uslab" run -- sh -c 'grep -c libuslab /proc/$$/maps; sh -c "grep -c libuslab /proc/\$\$/maps"')
check '[ "$(echo "$tree" | sed -n 1p)" -gt 0 ] && [ "$(echo "$tree" | sed -n 2p)" -gt 0 ]' \
  "run: a child of the program runs under uslab too ($tree)"
top=$(LD_PRELOAD=/lib/x86_64-linux-gnu/libdl.so.2 "$uslab" run --no-children -- sh -c \
  'grep -c libuslab /proc/$$/maps; echo "[$LD_PRELOAD]"; sh -c "grep -c libuslab /proc/\$\$/maps; env | grep -c USLAB_NO_CHILDREN"')
check '[ "$(echo "$top" | sed -n 1p)" -gt 0 ] && [ "$(echo "$top" | sed -n 2p)" = "[/lib/x86_64-linux-gnu/libdl.so.2]" ] && [ "$(echo "$top" | sed -n 3p)" = 0 ] && [ "$(echo "$top" | sed -n 4p)" = 0 ]' \
  "run --no-children: the program under uslab, its children not, other preloads kept ($top)"

# prof: the heap profiler's summary on a program whose sites are known.
"$uslab" prof --svg "$work/flame.svg" --dir "$work/prof" --sample 64k -- "$USLAB_BUILD/test/prof_sites" \
  > "$work/prof.out" 2>"$work/prof.err"
check 'grep -A4 "^allocated in all" "$work/prof.out" | grep -q " site_sixty$"' \
  "prof: the top allocation sites name site_sixty ($(head -c 600 "$work/prof.out"))"
check 'grep -A3 "^live at exit" "$work/prof.out" | grep -q " leak_site$"' "prof: live at exit names leak_site"
check 'ls "$work"/prof/prof.*.final.pb "$work"/prof/prof.*.peak.pb >/dev/null 2>&1' "prof: the profile files stay in --dir"
check 'grep -q "<rect" "$work/flame.svg" && grep -q "site_thirty" "$work/flame.svg"' "prof --svg: a flame graph with the sites"
"$uslab" prof --dir "$work/prof2" -- perl -e 'my @a = map { "x" x $_ } 1 .. 2000; exit 3' > /dev/null 2>&1
rc=$?
check '[ $rc -eq 3 ]' "prof: the command's exit status is passed on (got $rc)"

"$uslab" topology > "$work/topo.out" 2>&1
check 'grep -q "^The providers agree" "$work/topo.out" && grep -q "^uslab uses (topology=auto)" "$work/topo.out"' \
  "topology: the probe and hwloc agree, uslab's choice shown ($(head -c 400 "$work/topo.out"))"
HWLOC_SYNTHETIC="pack:2 numa:2 core:8 pu:2" USLAB_CONF=topology=hwloc "$uslab" topology > "$work/topo2.out" 2>&1
check 'grep -q "NUMA nodes: 4 (synthetic)" "$work/topo2.out" && grep -q "node 3: 16 (from 48)" "$work/topo2.out"' \
  "topology: a synthetic 4-node machine gives 4 nodes of 16 shards ($(tail -c 400 "$work/topo2.out"))"

"$uslab" ab -n 2 --json "$work/ab.json" -- sort -n "$work/data" > "$work/ab.out" 2>"$work/ab.err"
rc=$?
check '[ $rc -eq 0 ]' "ab on sort exits 0 (rc=$rc: $(tail -3 "$work/ab.err"))"
check 'grep -q "| wall_s | " "$work/ab.out" && grep -q "uslab/jemalloc" "$work/ab.out"' "ab prints the table ($(cat "$work/ab.out"))"
check '! grep -q "^Flagged" "$work/ab.out"' "ab flags nothing for a deterministic program"
check 'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d[\"runs\"]) == 4" "$work/ab.json"' "ab --json writes the raw runs"
check 'grep -q "\[4/4\]" "$work/ab.err"' "ab shows progress"

"$uslab" ab -n 2 -- sh -c 'exit 3' > "$work/fail.out" 2>/dev/null
rc=$?
check '[ $rc -ne 0 ]' "ab on a failing program exits non-zero"
check '[ $(grep -c "^Flagged: .*exit status 3" "$work/fail.out") -eq 4 ]' "ab flags every failing run ($(cat "$work/fail.out"))"

"$uslab" ab -n 2 -- sh -c 'date +%s%N' > "$work/rand.out" 2>/dev/null
check 'grep -q "outputs were not compared" "$work/rand.out"' "ab notes run-dependent output"
check '! grep -q "^Flagged" "$work/rand.out"' "ab does not flag run-dependent output"

# Every run reads the same input: piped into ab (read once, replayed), or --input.
# A run that read the shared stdin would leave the later ones "0" lines, flagged.
"$uslab" ab -n 2 -- wc -l < "$work/data" > "$work/stdin.out" 2>/dev/null
check '! grep -q -e "^Flagged" -e "^Not served" -e "^Not compared" "$work/stdin.out" && grep -q "uslab/jemalloc" "$work/stdin.out"' \
  "ab replays piped standard input to every run ($(cat "$work/stdin.out"))"
"$uslab" ab -n 2 --input "$work/data" -- wc -l < /dev/null > "$work/input.out" 2>/dev/null
check '! grep -q -e "^Flagged" -e "^Not served" -e "^Not compared" "$work/input.out"' "ab --input gives every run the file ($(cat "$work/input.out"))"

# An allocator that did not serve the run gets no ratio: a static binary (nothing
# can be preloaded into it), a program linked with its own allocator (glibc's
# malloc is not what redis-server calls).
printf '#include <stdio.h>\n#include <stdlib.h>\nint main(void){char*p=malloc(64);snprintf(p,64,"x");puts(p);free(p);return 0;}\n' > "$work/st.c"
if cc -static -O1 -o "$work/st" "$work/st.c" 2>/dev/null; then
  "$uslab" ab -n 1 -- "$work/st" > "$work/static.out" 2>/dev/null
  rc=$?
  check '[ $rc -ne 0 ] && grep -q "^Not served: uslab .*static binary" "$work/static.out" && grep -q "| wall_s | .* | — |" "$work/static.out"' \
    "ab refuses ratios for a static binary ($(cat "$work/static.out"))"
fi
if command -v redis-server >/dev/null; then
  "$uslab" ab -n 1 --vs glibc -- redis-server --version > "$work/own.out" 2>/dev/null
  check 'grep -q "^Not served: glibc .*libjemalloc" "$work/own.out" && ! grep -q "^Not served: uslab" "$work/own.out" && grep -q "| wall_s | .* | — |" "$work/own.out"' \
    "ab refuses the ratio against glibc for a program linked with jemalloc ($(cat "$work/own.out"))"
fi

# An allocator built elsewhere, by path (--vs NAME=PATH): one that registers rseq
# itself (defines __rseq_abi, as Google's tcmalloc) runs with glibc's registration
# off, and only it; the stand-ins print what the command sees.
printf '__thread char __rseq_abi[32] __attribute__((aligned(32)));\n' | cc -shared -fPIC -x c - -o "$work/librs.so"
printf 'int plain_symbol;\n' | cc -shared -fPIC -x c - -o "$work/libplain.so"
tun=$(GLIBC_TUNABLES= "$uslab" run --allocator rs="$work/librs.so" -- sh -c 'echo "[$GLIBC_TUNABLES]"')
check '[ "$tun" = "[glibc.pthread.rseq=0]" ]' "run: an allocator that registers rseq gets glibc's off ($tun)"
tun=$(GLIBC_TUNABLES= "$uslab" run --allocator plain="$work/libplain.so" -- sh -c 'echo "[$GLIBC_TUNABLES]"')
check '[ "$tun" = "[]" ]' "run: any other allocator by path keeps glibc's rseq ($tun)"
"$uslab" run --allocator nope="$work/missing.so" -- true 2>"$work/nope.err"
rc=$?
check '[ $rc -ne 0 ] && grep -q "no library at" "$work/nope.err"' "run refuses a path with no library ($(cat "$work/nope.err"))"
GLIBC_TUNABLES= "$uslab" ab -n 1 --vs plain="$work/libplain.so" --vs rs="$work/librs.so" -- sh -c 'echo "[$GLIBC_TUNABLES]"' > "$work/vs.out" 2>/dev/null
check 'grep -q "uslab/plain" "$work/vs.out" && grep -q "^Flagged: rs run 1: output differs" "$work/vs.out" && ! grep -q "^Flagged: plain" "$work/vs.out"' \
  "ab --vs NAME=PATH: each by name, the rseq one with glibc's rseq off ($(cat "$work/vs.out"))"

# --plot needs matplotlib, which uslab bench installs when asked; checked where it is
# already there (the test does not install it).
plot=()
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null && plot=(--plot "$work/charts")
"$uslab" bench bulk --rounds 1 "${plot[@]}" > "$work/bench.out" 2>/dev/null
check 'grep -q "^| 64 | " "$work/bench.out"' "bench bulk prints its table ($(head -c 400 "$work/bench.out"))"
if [ ${#plot[@]} -gt 0 ]; then
  check '[ -s "$work/charts/bulk.png" ] && grep -q "^Chart: " "$work/bench.out"' "bench --plot writes the chart"
else
  echo "note: matplotlib not installed; bench --plot not checked"
fi

# bench suite on a stand-in mimalloc-bench checkout: programs that allocate and print
# what the real ones print (cfrac its result, larson its relative time) and one whose
# throughput line is missing (rptest), which must be flagged, not tabled.
mb="$work/mb"; mkdir -p "$mb/bench" "$mb/out/bench"
fake() { printf '#include <stdio.h>\n#include <stdlib.h>\nint main(void){char*p=malloc(4096);p[0]=1;printf("%%s\\n",%s);free(p);return 0;}\n' "$2" |
  cc -x c - -o "$mb/out/bench/$1"; }
fake cfrac '"factors: 2 3 5"'
fake larson '"Throughput = 1000 operations per second, relative time: 1.234s."'
fake rptest '"no line"'
"$uslab" bench suite --suite "$mb" --rounds 1 > "$work/suite.out" 2>/dev/null
check 'grep -q "^| cfrac | " "$work/suite.out" && grep -q "^| larsonN | 1.234 / " "$work/suite.out" && grep -q "^Flagged: uslab under rptestN: its own check failed" "$work/suite.out" && grep -q "^Skipped: sh8benchN" "$work/suite.out"' \
  "bench suite tables the stand-in programs, their own times, flags a run without its line ($(head -c 600 "$work/suite.out"))"
"$uslab" bench suite --suite "$mb" --rounds 1 --vs other="/usr/lib/$(gcc -print-multiarch)/libjemalloc.so.2" > "$work/suite3.out" 2>/dev/null
check 'grep -q "| other s / MiB |" "$work/suite3.out" && grep -q "^| cfrac | " "$work/suite3.out"' \
  "bench --vs NAME=PATH adds a column ($(head -c 600 "$work/suite3.out"))"
"$uslab" bench suite --suite "$mb" --rounds 1 --vs other="$work/missing.so" > "$work/suite4.out" 2>&1
rc=$?
check '[ $rc -ne 0 ] && grep -q "no library at" "$work/suite4.out"' "bench --vs refuses a path with no library"
"$uslab" bench suite --suite "$work" --rounds 1 > "$work/suite2.out" 2>&1
rc=$?
check '[ $rc -ne 0 ] && grep -q "not a built mimalloc-bench checkout" "$work/suite2.out"' "bench suite refuses a folder that is not a checkout"

echo "cli: $total checks, $fail failed"
[ $fail -eq 0 ]
