#!/usr/bin/env bash
# test/programs/prof.sh LIB PROF_SITES PROF_PY — the heap profiler (USLAB_CONF prof=true) on a
# program whose truth is known (test/conformance/prof_sites.c) and on a real one
# built without frame pointers (Debian's python3):
#  - the allocation profile's estimate for each of three sites (60/30/10% of the
#    calls, sizes 24 B-150 KB, four threads) is within 5% of the bytes the program
#    counted; the live profile at exit names leak_site with its 32 MB within 10%
#    (prof_sample=16k: about 1800 samples, 3.3 standard deviations), and nothing
#    else above 1 MB; the folded stacks carry the "malloc" label, parse, and sum to
#    the profile.proto's totals (tools/prof.py --read --totals);
#  - the sites of object caches, bulk allocation and realloc growth appear, freed;
#  - the peak profile holds the leak and more than the live heap at exit; the controls (uslab_prof_dump, mallctl prof.*) work;
#    prof_signal and prof_interval write their files;
#  - Go's pprof reads the profile.proto and -top names the three sites (pprof: `go
#    tool pprof`; `uslab test` installs Debian's golang-go where no go is found);
#  - python3 (PYTHONMALLOC=malloc) gets stacks through its frames: PyList_New.
set -u
lib=$1 prog=$2 prof_py=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# The sum of the last column over lines matching a pattern, in a folded file.
sum_of() { awk -v pat="$2" 'index($0, pat) { s += $NF } END { printf "%.0f\n", s }' "$1"; }
within() {  # within NAME ESTIMATE TRUTH PERCENT
  awk -v e="$2" -v t="$3" -v pct="$4" -v n="$1" 'BEGIN {
    d = (e - t) / t * 100; printf "  %-12s estimate %14.0f  truth %14.0f  %+6.2f%%\n", n, e, t, d
    exit (d < -pct || d > pct) }'
}

LD_PRELOAD=$lib USLAB_CONF="${USLAB_CONF:+$USLAB_CONF,}prof=true,prof_sample=16k,prof_final=$work/sites" "$prog" >"$work/out" 2>"$work/err" ||
  { cat "$work/err"; bad "prof_sites exited with $?"; }
final=$(ls "$work"/sites.*.final.pb 2>/dev/null | head -1)
peak=$(ls "$work"/sites.*.peak.pb 2>/dev/null | head -1)
[ -n "$final" ] && [ -s "$final" ] || { bad "no final profile written"; ls -la "$work"; exit 1; }
[ -n "$peak" ] && [ -s "$peak" ] || bad "no peak profile written"
alloc=$final.alloc.folded inuse=$final.inuse.folded
awk 'NF < 2 || $NF !~ /^[0-9]+$/ { exit 1 }' "$alloc" "$inuse" || bad "a folded line is not 'stack value'"
python3 "$prof_py" --read "$final" --totals > "$work/totals" || bad "tools/prof.py cannot read the profile"
for col in alloc inuse; do
  file=$alloc; [ $col = inuse ] && file=$inuse
  want=$(awk -v k=${col}_space '$1 == k { print $2 }' "$work/totals")
  got=$(sum_of "$file" "")
  [ -n "$want" ] && [ "$want" = "$got" ] || bad "$col folded stacks sum to $got, the profile's ${col}_space is $want"
done

echo "allocation profile, per site (usable bytes):"
for site in site_sixty site_thirty site_ten; do
  truth=$(awk -v s=$site '$1 == s { print $2 }' "$work/out")
  within $site "$(sum_of "$alloc" ";$site;")" "$truth" 5 || bad "$site beyond 5%"
done
echo "live profile at exit:"
leak=$(awk '$1 == "leak_site" { print $2 }' "$work/out")
within leak_site "$(sum_of "$inuse" ";leak_site;")" "$leak" 10 || bad "leak_site's live bytes beyond 10%"
# The peak profile: the live heap at its highest, which holds the leak (it stays to
# the end) and more than is live at exit (realloc_site's growing block came after).
if [ -n "$peak" ]; then
  within "leak (peak)" "$(sum_of "$peak.inuse.folded" ";leak_site;")" "$leak" 10 || bad "the peak profile's leak_site beyond 10%"
  [ "$(sum_of "$peak.inuse.folded" "")" -gt "$(sum_of "$inuse" "")" ] || bad "the peak profile holds no more than the live heap at exit"
fi
others=$(awk '!index($0, ";leak_site;") && $NF > 1048576' "$inuse" | wc -l)
[ "$others" -eq 0 ] || { bad "live stacks other than leak_site above 1 MB at exit"; awk '$NF > 1048576' "$inuse" | cut -c1-300; }
grep -q ";site_sixty;malloc " "$alloc" || bad "no 'malloc' entry label under site_sixty"
for site in cache_site bulk_site realloc_site; do
  [ "$(sum_of "$alloc" ";$site;")" -gt 0 ] || bad "$site not in the allocation profile"
  [ "$(sum_of "$inuse" ";$site;")" -eq 0 ] || bad "$site freed everything but is live in the profile"
done
grep -q ";cache_site;uslab_cache_alloc" "$alloc" || bad "no uslab_cache_alloc label under cache_site"
grep -q ";bulk_site;uslab_alloc_bulk" "$alloc" || bad "no uslab_alloc_bulk label under bulk_site"

mkdir -p "$work/controls"
LD_PRELOAD=$lib USLAB_CONF="${USLAB_CONF:+$USLAB_CONF,}prof=true,prof_sample=64k,prof_final=false" "$prog" controls "$work/controls" ||
  bad "the profiler's controls"
grep -q "CHECK failed" "$work/err" && { cat "$work/err"; bad "prof_sites' checks"; }

# The triggers: prof_signal (the next sampled allocation writes), prof_interval (a
# file each time the live estimate grows by 8 MiB past the last: the leak site's 32 MB
# crosses three thresholds at least, each within one sample's weight of its 8 MiB; at
# 16m the second threshold could land just above the leak's estimate).
LD_PRELOAD=$lib USLAB_CONF="${USLAB_CONF:+$USLAB_CONF,}prof=true,prof_signal=USR2,prof_prefix=$work/sig,prof_final=false" \
  "$prog" signal >/dev/null 2>&1 || bad "prof_sites signal exited with $?"
ls "$work"/sig.*.signal.pb >/dev/null 2>&1 || bad "prof_signal=USR2 wrote no profile"
LD_PRELOAD=$lib USLAB_CONF="${USLAB_CONF:+$USLAB_CONF,}prof=true,prof_interval=8m,prof_prefix=$work/int,prof_final=false" \
  "$prog" >/dev/null 2>&1 || bad "prof_sites with prof_interval exited with $?"
n=$(ls "$work"/int.*.interval.pb 2>/dev/null | wc -l)
[ "$n" -ge 3 ] || bad "prof_interval=8m wrote $n profiles for a 32 MB leak"

# Go's pprof on the profile.proto.
go=$(command -v go || ls /usr/lib/go/bin/go /usr/local/go/bin/go 2>/dev/null | head -1)
if [ -z "$go" ]; then
  bad "no go toolchain for pprof (uslab test installs golang-go)"
else
  if ! HOME=$work GOCACHE=$work/gocache GOFLAGS=-mod=mod timeout 300 "$go" tool pprof -top \
      -sample_index=alloc_space "$prog" "$final" >"$work/top" 2>"$work/top.err"; then
    cat "$work/top.err"; bad "pprof could not read the profile"
  fi
  for site in site_sixty site_thirty site_ten; do
    grep -q " $site\$" "$work/top" || bad "pprof -top does not name $site"
  done
  HOME=$work GOCACHE=$work/gocache timeout 300 "$go" tool pprof -top -sample_index=inuse_space \
    "$prog" "$final" 2>/dev/null | grep -q " leak_site\$" || bad "pprof's inuse_space does not name leak_site"
  head -12 "$work/top"
fi

# python3 has no frame pointers: the unwinder must still find its frames.
if command -v python3 >/dev/null; then
  py=$(readlink -f "$(command -v python3)")
  case "$py" in /usr/bin/*) ;; *) py=/usr/bin/python3 ;; esac  # not a pyenv shim
  PYTHONMALLOC=malloc LD_PRELOAD=$lib USLAB_CONF="${USLAB_CONF:+$USLAB_CONF,}prof=true,prof_final=$work/py" "$py" -c '
x = []
for i in range(200000): x.append([i, str(i) * 3])
print(len(x))' >"$work/py.out" || bad "python3 under the profiler"
  pyalloc=$(ls "$work"/py.*.final.pb.alloc.folded 2>/dev/null | head -1)
  [ -n "$pyalloc" ] && grep -q ";PyList_New;" "$pyalloc" || bad "python3's stacks lack PyList_New"
fi
[ $fail -eq 0 ] && echo "heap profiler: ok"
exit $fail
