#!/usr/bin/env bash
# test/sandbox/matrix.sh LIB DENY LATE API STRESS — uslab under seccomp filters that
# refuse the system calls it makes, as sandboxes do (Docker refuses the NUMA calls
# without CAP_SYS_NICE and, before 20.10, rseq; systemd's SystemCallFilter= kills at
# a call its set leaves out; gVisor and newer profiles answer ENOSYS).
#
#  - each call uslab makes, refused with EPERM and with ENOSYS, one at a time and all
#    at once: the C API conformance program, the threaded stress (content verified),
#    a threaded python3 and redis-server (a fixed command script) give the output
#    they give unfiltered, and nothing of uslab's is printed but its one line for a
#    refused mmap;
#  - each call made to kill the process (SIGSYS): wherever python3 (and redis-server)
#    survives the filter without uslab, it survives with uslab, except for the calls
#    uslab needs (NEEDS below, each with the option that spares it);
#  - systemd's @system-service set as an allow-list (killing at any other call), as
#    `systemd-analyze syscall-filter` expands it here;
#  - the statistics name each call refused, with its error;
#  - mmap, mremap and mprotect refused after start (LATE): allocations fail with ENOMEM,
#    frees work, nothing is corrupted.
# A USLAB_CONF in the environment (the fast-path mode under test) is kept in front.
set -u
lib=$1 deny=$2 late=$3 api=$4 stress=$5
mode=${USLAB_CONF:+$USLAB_CONF,}
fail=0; total=0
check() { total=$((total+1)); if ! eval "$1"; then fail=$((fail+1)); echo "FAILED: $2"; fi; }
work=$(mktemp -d /tmp/uslab-sandbox.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The system calls uslab makes (core/platform and the libc calls it issues itself),
# beside the ones no program runs without (mmap, munmap, mprotect, futex, read...).
calls=(rseq mbind get_mempolicy set_mempolicy move_pages membarrier memfd_create mincore
  process_madvise getrandom process_vm_readv madvise mremap sched_getaffinity ftruncate
  getcpu readlinkat faccessat brk tgkill fcntl clone3)
# USLAB_SANDBOX_CALLS=a,b,...: those alone (the emulated NUMA guest's, where each run
# is slow).
[ -n "${USLAB_SANDBOX_CALLS:-}" ] && IFS=, read -ra calls <<<"$USLAB_SANDBOX_CALLS"
# Calls uslab makes at start-up unasked, and the option that spares each: membarrier
# (the rseq fence's registration); rseq only where glibc registered none (before 2.35,
# or its tunable off), as with glibc's own a filter killing at rseq kills the program
# before uslab loads.
declare -A NEEDS=([membarrier]=membarrier=false [rseq]=percpu=false)
# On a machine of several NUMA nodes uslab binds its segments to their node (mbind)
# unless the process has a memory policy of its own (get_mempolicy), as it must to
# keep memory local: a filter killing at either kills it there.
if [ -d /sys/devices/system/node/node1 ]; then NEEDS[mbind]=; NEEDS[get_mempolicy]=; fi


cat > "$work/threads.py" <<'EOF'
import json, threading
def work(k):
    d = {str(i * k): [i] * (i % 7) for i in range(20000)}
    return len(json.dumps(d))
out = []
ts = [threading.Thread(target=lambda k=k: out.append(work(k))) for k in range(1, 5)]
for t in ts: t.start()
for t in ts: t.join()
print(sorted(out))
EOF
py=(python3 "$work/threads.py")
stress_args=(4 2 10)
# The stress program's own call (it reads its CPU set), left out of its filters.
stress_needs=sched_getaffinity

# run OUT ERR [deny args --] PROGRAM...: its stdout and stderr into files; the status.
run() { local out=$1 err=$2; shift 2; "$@" >"$out" 2>"$err"; }
# What uslab printed besides the allowed line.
uslab_lines() { grep '^uslab:' "$1" | grep -v '^uslab: mmap refused' | head -3; }

# The three programs under a filter (the arguments after LABEL, ending in --), uslab
# preloaded in the mode under test: each gives its unfiltered output, and uslab prints
# nothing but its mmap line.
preloaded=(env LD_PRELOAD="$lib" USLAB_CONF="${mode%,}")
expect_py() {
  local label=$1 rc; shift
  run "$work/out" "$work/err" "$@" "${preloaded[@]}" "${py[@]}"; rc=$?
  check '[ $rc -eq 0 ] && cmp -s "$work/out" "$work/py.want" && [ -z "$(uslab_lines "$work/err")" ]' \
    "python3 $label: rc=$rc, $(head -c 300 "$work/err")"
}
expect_api() {
  local label=$1 rc; shift
  run "$work/out" "$work/err" "$@" "${preloaded[@]}" "$api"; rc=$?
  check '[ $rc -eq 0 ] && [ "$(api_tally "$work/out")" = "$(cat "$work/api.want")" ] &&
         [ -z "$(uslab_lines "$work/err")" ]' "api $label: rc=$rc, $(head -c 300 "$work/err")"
}
expect_stress() {
  local label=$1 rc; shift
  run "$work/out" "$work/err" "$@" "${preloaded[@]}" "$stress" "${stress_args[@]}"; rc=$?
  check '[ $rc -eq 0 ] && grep -q " 0 failures" "$work/out" && grep -q " 0 failed" "$work/out" &&
         [ -z "$(uslab_lines "$work/err")" ]' \
    "stress $label: rc=$rc, $(head -c 300 "$work/out" "$work/err")"
}

# redis-server, a real server with threads of its own: started under the filter, a
# fixed script of commands sent by an unfiltered redis-cli, its answers compared with
# those of the server unfiltered and without uslab. Every wait has a time limit and
# the server is killed at the end of its session: a server that cannot start under a
# filter must not hang the suite. No redis-server here: said once and left out.
redis=$(command -v redis-server || true)
command -v redis-cli >/dev/null || redis=
cat > "$work/redis.cmds" <<'EOF2'
FLUSHALL
DEBUG POPULATE 20000 small 40
DEBUG POPULATE 300 big 20000
DBSIZE
GET small:1234
STRLEN big:299
RPUSH list a bb ccc dddd
LRANGE list 0 -1
HSET hash f1 v1 f2 v2 f3 v3
HGETALL hash
SADD s1 a b c d
SADD s2 c d e
SINTERSTORE s3 s1 s2
SORT s3 ALPHA
DEL big:1 big:2 small:3
DBSIZE
FLUSHALL
DBSIZE
MEMORY PURGE
DEBUG POPULATE 5000 again 100
DBSIZE
EOF2
# redis_session OUT ERR [LAUNCHER...]: the script's answers into OUT, the server's
# stderr into ERR; the status (1: the server did not answer within 10 s).
redis_session() {
  local out=$1 err=$2 pid up=0 i reply sock=$work/redis.sock; shift 2
  # A socket of this run's own: the suites run side by side, and a TCP port picked
  # from the pid was another run's server at times.
  rm -f "$sock"
  "$@" "$redis" --port 0 --unixsocket "$sock" --save "" --appendonly no --dir "$work" \
    --enable-debug-command yes --logfile "$work/redis.log" >/dev/null 2>"$err" &
  pid=$!  # the server itself: the launchers exec it
  # Until it answers, dies, or takes a connection it does not answer (a filter broke it).
  for i in $(seq 100); do
    reply=$(timeout 2 redis-cli -s "$sock" ping 2>/dev/null)
    [ $? -eq 124 ] && break
    [ "$reply" = PONG ] && { up=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  : > "$out"
  [ $up = 1 ] && timeout 30 redis-cli -s "$sock" < "$work/redis.cmds" > "$out" 2>&1
  [ $up = 1 ] && timeout 5 redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1
  for i in $(seq 50); do [ $up = 1 ] && kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  [ $up = 1 ]
}
# expect_redis LABEL LAUNCHER...: where the server answers as it does unfiltered under
# the filter alone, it answers the same preloaded (with the options in redis_extra),
# and uslab prints nothing but its mmap line.
expect_redis() {
  local label=$1; shift
  [ -n "$redis" ] || return 0
  redis_session "$work/rbase" /dev/null "$@" && cmp -s "$work/rbase" "$work/redis.want" ||
    { echo "redis-server $label: does not serve without uslab either, left out"; return 0; }
  local conf=${mode}${redis_extra:-}
  redis_session "$work/out" "$work/err" "$@" env LD_PRELOAD="$lib" USLAB_CONF="${conf%,}"
  check 'cmp -s "$work/out" "$work/redis.want" && [ -z "$(uslab_lines "$work/err")" ]' \
    "redis-server $label: $(diff "$work/redis.want" "$work/out" | head -c 200) $(head -c 300 "$work/err")"
}

# The unfiltered outputs each filtered run must give.
run "$work/py.want" /dev/null "${py[@]}"
if [ -n "$redis" ]; then
  redis_session "$work/redis.want" /dev/null env || { echo "FAILED: redis-server unfiltered did not answer"; exit 1; }
  grep -qx 5000 "$work/redis.want" || { echo "FAILED: redis-server's script: $(head -c 300 "$work/redis.want")"; exit 1; }
else
  echo "no redis-server here: its cells are left out"
fi
# The conformance program's tally (its malloc_info lines depend on what was returned).
api_tally() { grep '^api: ' "$1"; }
run "$work/api.out" /dev/null "${preloaded[@]}" "$api"
api_tally "$work/api.out" > "$work/api.want"
grep -q ' 0 failed' "$work/api.want" || { echo "FAILED: api fails unfiltered"; exit 1; }

for act in EPERM ENOSYS; do
  for c in "${calls[@]}" all; do
    list=$c
    [ "$c" = all ] && list=$(IFS=,; echo "${calls[*]}")
    f=(env "$deny" -e "$act" "$list" --)
    # The program's own needs first: a call python3 cannot do without (clone3 with
    # EPERM: no threads) is not uslab's to survive.
    run "$work/base" /dev/null "${f[@]}" "${py[@]}"; brc=$?
    if [ $brc -eq 0 ] && cmp -s "$work/base" "$work/py.want"; then
      expect_py "$c refused ($act)" "${f[@]}"
    fi
    expect_api "$c refused ($act)" "${f[@]}"
    expect_redis "$c refused ($act)" "${f[@]}"
    if [ $brc -eq 0 ] && [ "$c" != $stress_needs ]; then  # it starts threads as python3 does
      expect_stress "$c refused ($act)" \
        env "$deny" -e "$act" "$(echo "$list" | tr , '\n' | grep -vx $stress_needs | paste -sd,)" --
    fi
  done
done

# SIGSYS: uslab adds no death to a program that survives the filter on its own.
for c in "${calls[@]}"; do
  run "$work/base" /dev/null "$deny" -k "$c" -- "${py[@]}"; brc=$?
  [ $brc -eq 0 ] || continue
  run "$work/out" "$work/err" "$deny" -k "$c" -- "${preloaded[@]}" "${py[@]}"; rc=$?
  if [ -n "${NEEDS[$c]+set}" ] && [ -z "${NEEDS[$c]}" ]; then
    echo "python3 killed at $c with uslab (rc=$rc): uslab needs $c here"
  elif [ -n "${NEEDS[$c]:-}" ]; then
    run "$work/out" "$work/err" "$deny" -k "$c" -- \
      env LD_PRELOAD="$lib" USLAB_CONF="${mode}${NEEDS[$c]}" "${py[@]}"; rc=$?
    check '[ $rc -eq 0 ] && cmp -s "$work/out" "$work/py.want"' \
      "python3 killed at $c even with ${NEEDS[$c]}: rc=$rc"
  else
    check '[ $rc -eq 0 ] && cmp -s "$work/out" "$work/py.want"' \
      "python3 killed at $c with uslab, not without: rc=$rc (uslab made a call it was not asked for)"
  fi
done
# redis-server asks for the background thread (mallctl, as it asks jemalloc), and the
# thread makes the live region: memfd_create and ftruncate, which live_stats=false
# spares.
declare -A REDIS_NEEDS=([memfd_create]=live_stats=false, [ftruncate]=live_stats=false,)
for c in "${calls[@]}"; do
  [ -n "$redis" ] || break
  if [ -n "${NEEDS[$c]+set}" ]; then
    [ -n "${NEEDS[$c]}" ] || continue
    redis_extra=${NEEDS[$c]},
  else
    redis_extra=${REDIS_NEEDS[$c]:-}
  fi
  expect_redis "killed at $c${redis_extra:+ with ${redis_extra%,}}" "$deny" -k "$c" --
done
redis_extra=

# systemd's @system-service allow-list, killing at anything else (its default action).
if command -v systemd-analyze >/dev/null; then
  expand() {
    systemd-analyze syscall-filter "$1" 2>/dev/null | sed '1d; s/#.*//' | tr -s ' \n' '\n' |
      while read -r s; do case $s in @*) expand "$s" ;; ?*) echo "$s" ;; esac; done
  }
  allowed=$(expand @system-service | sort -u | paste -sd,)
  if [ -n "$allowed" ]; then
    f=("$deny" -k -a "$allowed" --)
    run "$work/base" /dev/null "${f[@]}" "${py[@]}"; brc=$?
    if [ $brc -eq 0 ]; then
      expect_py "under @system-service" "${f[@]}"
      expect_redis "under @system-service" "${f[@]}"
      expect_stress "under @system-service" "${f[@]}"
    fi
  fi
fi

# Container runtimes' default profiles, as the runtime builds the filter from the JSON
# (profile.py): the containers' one Debian ships, and Docker's (EPERM for the rest,
# no NUMA calls without CAP_SYS_NICE, clone3 ENOSYS). tools/uslab test puts the
# profile beside the launcher; without it, said and left out.
profile=${USLAB_SECCOMP_PROFILE:-$(dirname "$deny")/containers-seccomp.json}
[ -f "$profile" ] || profile=/usr/share/containers/seccomp.json
if [ -f "$profile" ]; then
  for variant in containers docker; do
    mapfile -t pargs < <(python3 "$(dirname "$0")/profile.py" "$profile" \
      $([ $variant = docker ] && echo --docker))
    f=("$deny" "${pargs[@]}" --)
    run "$work/base" /dev/null "${f[@]}" "${py[@]}"; brc=$?
    check '[ $brc -eq 0 ] && cmp -s "$work/base" "$work/py.want"' "python3 alone under the $variant profile: rc=$brc"
    expect_py "under the $variant profile" "${f[@]}"
    expect_api "under the $variant profile" "${f[@]}"
    expect_redis "under the $variant profile" "${f[@]}"
    expect_stress "under the $variant profile" "${f[@]}"
  done
else
  echo "no container profile ($profile): left out (tools/uslab test fetches Debian's)"
fi

# The statistics name what was refused, with the error, and nothing else.
refusals() {  # STDERR ACT: the JSON document's refused_syscalls, or "wrong: ..."
  python3 -c '
import json, sys
text = open(sys.argv[1]).read()
start = 0 if text.startswith("{\n") else text.index("\n{\n") + 1
refused = json.loads(text[start:text.rindex("\n}") + 2])["refused_syscalls"]
bad = [k for k, v in refused.items() if v != sys.argv[2] or k not in sys.argv[3:]]
print("wrong: %s" % refused if bad else ",".join(sorted(refused)) or "none")
' "$1" "$2" "${calls[@]}"
}
for act in EPERM ENOSYS; do
  run /dev/null "$work/err" "$deny" -e "$act" "$(IFS=,; echo "${calls[*]}")" -- \
    env LD_PRELOAD="$lib" USLAB_CONF="${mode}stats=json" "$api"
  said=$(refusals "$work/err" "$act" 2>&1)
  # Some call of the whole list is always made (getrandom, madvise); of a subset
  # (USLAB_SANDBOX_CALLS), maybe none.
  check '[ -n "$said" ] && [ "${said#wrong}" = "$said" ] && [ "${said#Traceback}" = "$said" ] &&
         { [ "$said" != none ] || [ -n "${USLAB_SANDBOX_CALLS:-}" ]; }' \
    "statistics of refusals ($act): $said"
  echo "refused ($act), as the statistics name them: $said"
done

# mmap, mremap and mprotect refused after start: ENOMEM, one line said, nothing lost.
for e in EPERM ENOSYS ENOMEM; do
  run "$work/out" "$work/err" "${preloaded[@]}" "$late" "$e"; rc=$?
  said=$(grep -c '^uslab: mmap refused' "$work/err")
  want=1; [ $e = ENOMEM ] && want=0
  check '[ $rc -eq 0 ] && grep -q " 0 failed" "$work/out" && [ "$said" -eq $want ] &&
         [ -z "$(uslab_lines "$work/err")" ]' \
    "late $e: rc=$rc, said $said times, $(head -c 300 "$work/out" "$work/err")"
done

echo "sandbox: $total checks, $fail failed"
[ $fail -eq 0 ]
