#!/usr/bin/env bash
# test/programs/redis_purge.sh LIB — a real program's purge path through mallctl.
# Debian's redis-server is linked with jemalloc and, after FLUSHALL, asks it for its
# memory back: mallctl("arenas.narenas"), then mallctl("arena.<narenas>.purge").
# Under uslab (preloaded, so those calls reach uslab's mallctl) the memory of a
# 1 M-key dataset must be back within a second of FLUSHALL with the background thread
# off and the default 10 s decay: only the program's purge call can do that (uslab
# without arenas.narenas kept all of it for as long as redis stayed idle). Also
# MEMORY PURGE, redis's command for the same call. Skipped (exit 77) where
# redis-server is not installed.
set -u
lib=$1
command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
  { echo "redis-server or redis-cli not installed: skipped"; exit 77; }
work=$(mktemp -d)
port=$((20000 + $$ % 20000))
pid=
cleanup() {
  [ -n "$pid" ] && { redis-cli -p "$port" shutdown nosave >/dev/null 2>&1; kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT
fail=0

LD_PRELOAD=$lib USLAB_CONF=background_thread=false \
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --enable-debug-command yes --logfile "$work/log" &
pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
rss() { awk '/^VmRSS/{print $2}' "/proc/$pid/status"; }
grep -q libuslab "/proc/$pid/maps" || { echo "FAILED: libuslab.so is not mapped in redis-server"; exit 1; }

# fill_then COMMAND...: fills 1 M keys, then runs each COMMAND (one word each); prints
# RSS at start, filled and 1 s later, and fails unless the dataset's memory is back.
fill_then() {
  local start filled after c
  start=$(rss)
  redis-cli -p "$port" debug populate 1000000 key 100 >/dev/null
  filled=$(rss)
  for c in "$@"; do redis-cli -p "$port" $c >/dev/null; done
  sleep 1
  after=$(rss)
  echo "redis-server under uslab: RSS $start KiB at start, $filled with 1 M keys, $after 1 s after: $*"
  if [ "$filled" -lt $((start + 100000)) ]; then
    echo "FAILED: the dataset did not take memory (DEBUG POPULATE refused?)"; fail=1
  elif [ "$after" -gt $((start + 20000)) ]; then
    echo "FAILED: the memory did not come back after $* (the purge did not reach uslab)"; fail=1
  fi
}
fill_then flushall
redis-cli -p "$port" config set lazyfree-lazy-user-flush no >/dev/null
fill_then flushdb "memory purge"
echo "redis_purge: $([ $fail -eq 0 ] && echo ok || echo failed)"
exit $fail
