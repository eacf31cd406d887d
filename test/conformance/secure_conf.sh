#!/usr/bin/env bash
# test/conformance/secure_conf.sh SECURE_CONF — setuid safety: a setuid-root copy of
# secure_conf run by an unprivileged user with USLAB_CONF and USLAB_STATS set must
# ignore both (as glibc ignores its malloc tunables under AT_SECURE: the profiler
# would otherwise write files where the caller says, as root), and keep the
# linked-in uslab_malloc_conf; the same copy without the setuid bit takes them.
# Needs root (to make the copy setuid) and setpriv; skipped (77) without them, or
# where the file system ignores setuid bits.
set -u
bin=$1
[ "$(id -u)" -eq 0 ] || { echo "not root: cannot make a setuid copy; skipped"; exit 77; }
command -v setpriv >/dev/null || { echo "setpriv (util-linux) missing; skipped"; exit 77; }
dir=$(mktemp -d /tmp/uslab-secure.XXXXXX)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
cp "$bin" "$dir/plain"
cp "$bin" "$dir/setuid"
chown root:root "$dir/setuid"
chmod 4755 "$dir/setuid"
run() {
  USLAB_CONF="prof=true,prof_prefix=/root/evil" USLAB_STATS=1 \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$1"
}
fail=0
plain=$(run "$dir/plain") || fail=1
suid=$(run "$dir/setuid") || fail=1
echo "plain:  $plain"
echo "setuid: $suid"
case "$suid" in
  secure=0*) echo "the setuid bit was not honoured here (nosuid mount?): skipped"; exit 77 ;;
esac
[ "$plain" = "secure=0 prof=1 stats=1 prof_sample=65536 prefix=/root/evil" ] ||
  { echo "FAIL: the environment was not applied without setuid"; fail=1; }
[ "$suid" = "secure=1 prof=0 stats=0 prof_sample=65536 prefix=uslab" ] ||
  { echo "FAIL: a setuid process took USLAB_CONF/USLAB_STATS from the environment"; fail=1; }
exit $fail
