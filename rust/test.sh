#!/usr/bin/env bash
# rust/test.sh — the Rust crates' tests, as CI runs them (tools/uslab test rust):
# cargo test on x86_64 glibc, with the override feature, on x86_64 musl (static
# binaries, and the example run as one), on aarch64 glibc under qemu-user, an idle
# Rust process read live from outside, then check-package.sh. Prints one line per leg; exits 1 if any failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
failed=0 passed=0
leg() {  # leg NAME COMMAND...: runs it, its output kept for a failure
  local name=$1 log
  shift
  log=$(mktemp)
  local t0=$SECONDS
  # A hung test must not hold CI: 20 minutes a leg at most (through bash, which runs
  # the legs that are functions of this script: they are exported).
  if timeout -s KILL 1200 bash -c '"$@"' leg "$@" >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "rust: $name: ok ($((SECONDS - t0)) s; $(grep -c '^test .* ok$' "$log") tests)"
  else
    failed=$((failed + 1))
    echo "rust: $name: FAILED"
    tail -40 "$log"
  fi
  rm -f "$log"
}
have_target() { rustup target list --installed 2>/dev/null | grep -qx "$1" || rustup target add "$1" >/dev/null 2>&1; }

leg "x86_64 glibc" cargo test --locked
# The override builds in a target folder of their own: the features would rebuild uslab-sys.
leg "x86_64 glibc, override" cargo test --locked -p uslab --features override --target-dir target/override
if have_target x86_64-unknown-linux-musl; then
  leg "x86_64 musl" cargo test --locked --target x86_64-unknown-linux-musl
  static_example() {
    cargo build --locked --quiet --target x86_64-unknown-linux-musl -p uslab --example hello &&
      file target/x86_64-unknown-linux-musl/debug/examples/hello | grep -q 'static' &&
      target/x86_64-unknown-linux-musl/debug/examples/hello | tee /dev/stderr |
        grep -q '^5000 distinct words, 40 each; uslab'
  }
  export -f static_example
  leg "x86_64 musl, a static binary" static_example
else
  failed=$((failed + 1)); echo "rust: x86_64 musl: FAILED (rustup could not add the target)"
fi
if have_target aarch64-unknown-linux-gnu; then
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  # The cross toolchain's loader and C library together, as tools/cross's exe_wrapper:
  # with libc6:arm64 installed too (the arm64 tier's libhwloc-dev:arm64 brings it) the
  # loader finds that package's libc.so.6, another release, and the tests hang.
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib"
  leg "aarch64 glibc (qemu-user)" cargo test --locked --target aarch64-unknown-linux-gnu
else
  failed=$((failed + 1)); echo "rust: aarch64: FAILED (rustup could not add the target)"
fi
# uslab stats --pid reads a Rust process holding 40 MB (rust/uslab/examples/hold.rs),
# idle after its start, from outside: with the default features, with override (its
# thread started in the constructor), and as a static musl binary.
live_read() {  # live_read TARGET [FEATURES]
  local target=$1 features=${2:-} dir=target out pid json
  [ -n "$features" ] && dir=target/$features
  cargo build --locked --quiet --target "$target" --target-dir "$dir" -p uslab --example hold \
    ${features:+--features $features} || return 1
  dir=$dir/$target/debug/examples
  out=$(mktemp)
  (sleep 5 | "$dir/hold" >"$out") &
  for _ in $(seq 50); do grep -q ready "$out" && break; sleep 0.1; done
  pid=$(awk '/^ready/{print $2}' "$out")
  [ -n "$pid" ] || { echo "hold did not start"; return 1; }
  sleep 0.5  # idle: no allocator call from here on
  json=$(../tools/uslab stats --pid "$pid" --json) || return 1
  wait
  grep -q '^held 200000' "$out" || { echo "hold did not finish"; return 1; }
  rm -f "$out"
  python3 -c '
import json, sys
d = json.loads(sys.argv[1])
live = sum(c["active"] * c["size"] for c in d["classes"] if c["size"] >= 200 and c["size"] <= 256)
print("live: %d bytes of 200-byte objects, background %s" % (live, d["background"]["state"]))
assert d["bytes"]["allocated"] >= 40_000_000 and live >= 40_000_000, d["bytes"]
' "$json"
}
export -f live_read
leg "live statistics of an idle Rust process" live_read x86_64-unknown-linux-gnu
leg "live statistics, override" live_read x86_64-unknown-linux-gnu override
if have_target x86_64-unknown-linux-musl; then
  leg "live statistics, static musl" live_read x86_64-unknown-linux-musl
fi
leg "the packaged crates" bash check-package.sh
echo "rust: $passed passed, $failed failed"
[ $failed -eq 0 ]
