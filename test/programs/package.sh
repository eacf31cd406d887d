#!/usr/bin/env bash
# test/programs/package.sh ROOT BUILD — `uslab package` makes a .deb that installs
# with apt on Debian 11 (the root old_glibc.sh keeps, glibc 2.31) and on this
# Debian 12: in each, the library by its SONAME preloaded into python3 serves it
# (uslab's table at exit), a program compiled against the installed uslab.h and
# -luslab gets uslab_version(), the installed uslab command runs (--version, run,
# stats, topology), and apt removes every file again. On this machine also:
# pkg-config, the ab launcher and `uslab stats --pid` from the installed tools. The
# package's own version, the library's SONAME and the command agree. Needs root
# (apt, chroot); a Debian 11 root that is not there yet is skipped, not made here.
set -u
root_src=$(readlink -f "$1")
build=$(readlink -f "$2")
old=${USLAB_OLD_ROOT:-/var/cache/uslab/bullseye}
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (apt install)"; exit 77; }
work=$(mktemp -d)
mounted=()
cleanup() {
  for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null; done
  [ -n "${installed_here:-}" ] && apt-get purge -y -qq uslab >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
checks=0 fails=0
check() {  # check NAME COMMAND...
  local name=$1; shift
  checks=$((checks + 1))
  if ! "$@" >"$work/out" 2>&1; then echo "FAILED: $name: $(tail -5 "$work/out")"; fails=$((fails + 1)); fi
}

version=$(sed -n 's/^#define USLAB_VERSION "\(.*\)"$/\1/p' "$root_src/include/uslab.h")
major=${version%%.*}
deb=$(USLAB_BUILD=$build "$root_src/tools/uslab" package --out "$work" | tail -1)
check "uslab package prints the .deb it wrote" test -f "$deb"
check "the package's version is the library's" test "$(dpkg-deb -f "$deb" Version)" = "$version-1"
dpkg-deb -x "$deb" "$work/x"
ma=$(gcc -print-multiarch)
check "the library carries its SONAME" \
  sh -c "readelf -d '$work/x/usr/lib/$ma/libuslab.so.$version' | grep -q 'SONAME.*\[libuslab.so.$major\]'"
for f in usr/lib/$ma/libuslab.so.$major usr/lib/$ma/libuslab.so usr/lib/$ma/libuslab.a \
    usr/include/uslab.h usr/lib/$ma/pkgconfig/uslab.pc usr/bin/uslab usr/share/uslab/live.py \
    usr/lib/uslab/spawn; do
  check "the package has /$f" test -e "$work/x/$f"
done

cat >"$work/hello.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <uslab.h>
int main(void) {
  uslab_stats_t st;
  void *p = malloc(1000);
  if (uslab_stats_get(&st, sizeof st) != 0 || st.mapped == 0) return 1;
  printf("%s\n", uslab_version());
  free(p);
  return 0;
}
C
# The checks each system runs with the package installed; RUN prefixes a command.
installed_checks() {
  local where=$1; shift
  local -a run=("$@")
  check "$where: uslab --version" test "$("${run[@]}" uslab --version)" = "uslab $version"
  check "$where: python3 with libuslab.so.$major preloaded is served by it" \
    sh -c "$(printf '%q ' "${run[@]}") env LD_PRELOAD=libuslab.so.$major USLAB_STATS=1 \
      python3 -c 'print(sum(len(str(i)) for i in range(100000)))' 2>&1 | grep -q '^uslab stats'"
  check "$where: uslab run -- python3" \
    sh -c "$(printf '%q ' "${run[@]}") uslab stats -- python3 -c 'x = [str(i) for i in range(10**5)]' \
      2>&1 | grep -q '^uslab stats'"
  check "$where: uslab topology" sh -c "$(printf '%q ' "${run[@]}") uslab topology | grep -q 'uses'"
  check "$where: a program built against uslab.h and -luslab" \
    sh -c "$(printf '%q ' "${run[@]}") sh -c 'cc /tmp/uslab-hello.c -o /tmp/uslab-hello -luslab && /tmp/uslab-hello' | grep -qx '$version'"
}

# --- Debian 11 ---
if [ -e "$old/.uslab-ready" ]; then
  for d in proc dev; do
    if ! mountpoint -q "$old/$d"; then mount --bind "/$d" "$old/$d" && mounted+=("$old/$d"); fi
  done
  cp "$deb" "$old/tmp/uslab.deb"
  cp "$work/hello.c" "$old/tmp/uslab-hello.c"
  check "Debian 11: apt installs the package" \
    chroot "$old" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q /tmp/uslab.deb
  echo "Debian 11: $(chroot "$old" ldd --version | head -1)"
  installed_checks "Debian 11" chroot "$old"
  check "Debian 11: apt removes it, every file" \
    sh -c "chroot '$old' apt-get purge -y -q uslab && ! test -e '$old/usr/lib/$ma/libuslab.so.$major' && ! test -e '$old/usr/bin/uslab'"
  rm -f "$old/tmp/uslab.deb" "$old/tmp/uslab-hello.c" "$old/tmp/uslab-hello"
else
  echo "SKIP (Debian 11 part): no root at $old (test/programs/old_glibc.sh makes it)"
fi

# --- this machine (Debian 12), unless uslab is installed here already ---
if dpkg-query -W -f='${Status}' uslab 2>/dev/null | grep -q "ok installed"; then
  echo "SKIP (this machine's part): a uslab package is installed here already"
else
  installed_here=1
  cp "$work/hello.c" /tmp/uslab-hello.c
  check "Debian 12: apt installs the package" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$deb"
  installed_checks "Debian 12" env
  check "Debian 12: pkg-config --modversion" test "$(pkg-config --modversion uslab)" = "$version"
  # The installed tools: ab's launcher, and the live reader on an installed library.
  check "Debian 12: uslab ab from the installed command" \
    sh -c "uslab ab -n 2 --vs glibc -- python3 -c 'x = [str(i) for i in range(10**5)]' | grep -Eq '^[|] wall_s [|].*[|] [0-9]+[.][0-9]+ [|]\$'"
  mkfifo "$work/in"
  LD_PRELOAD=libuslab.so.$major "$build/test/live_hold" 40000 40000 1000 <"$work/in" >"$work/hold" &
  hold=$!
  exec 3>"$work/in"
  for _ in $(seq 100); do grep -q ready "$work/hold" && break; sleep 0.1; done
  check "Debian 12: uslab stats --pid from the installed command" \
    sh -c "uslab stats --pid $hold --json | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)[\"pid\"] != $hold)'"
  exec 3>&-
  wait $hold
  check "Debian 12: apt removes it, every file" \
    sh -c "apt-get purge -y -q uslab && ! test -e /usr/lib/$ma/libuslab.so.$major && ! test -e /usr/bin/uslab"
  installed_here=
  rm -f /tmp/uslab-hello.c /tmp/uslab-hello
fi

echo "package: $checks checks, $fails failed"
[ $fails -eq 0 ]
