#!/usr/bin/env bash
# rust/check-package.sh — the crates as `cargo package` makes them: their version is
# the library's, uslab-sys ships the tree's own sources (every file the build reads,
# byte for byte), and the packaged uslab-sys builds and passes its tests in a folder
# of its own, away from the tree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
root=$(cd .. && pwd)
fail=0
bad() { echo "check-package: $*"; fail=1; }

version=$(sed -n 's/^#define USLAB_VERSION "\(.*\)"$/\1/p' "$root/include/uslab.h")
ws=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml)
[ "$ws" = "$version" ] || bad "the crates' version $ws is not the library's $version"
grep -q "pub const USLAB_VERSION: &str = \"$version\";" uslab-sys/src/lib.rs ||
  bad "uslab-sys's USLAB_VERSION is not $version"

cargo package --workspace --allow-dirty --quiet 2>&1 | grep -v '^warning: manifest has no\|^  |$\|^  = note: see' || true
crate=target/package/uslab-sys-$version.crate
[ -f "$crate" ] || { bad "cargo package made no $crate"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$crate" -C "$work"
pkg=$work/uslab-sys-$version

# Every file the build script reads, and every header they include, as in the tree.
want=(core/sources.txt core/flags.txt)
while read -r f _; do want+=("$f"); done < <(grep -v '^#' "$root/core/sources.txt" | grep .)
while read -r f; do want+=("${f#"$root"/}"); done < <(find "$root/core" "$root/include" "$root/preload" "$root/compat" -type f)
for f in "${want[@]}"; do
  if [ ! -f "$pkg/$f" ]; then bad "the package lacks $f"
  elif ! cmp -s "$pkg/$f" "$root/$f"; then bad "the package's $f differs from the tree's"
  fi
done
echo "check-package: uslab-sys $version packages ${#want[@]} files of the tree, all equal"

# Built and tested from the package, outside the tree and its workspace.
cp Cargo.lock "$pkg/"
(cd "$pkg" && CARGO_TARGET_DIR="$work/target" cargo test --quiet 2>&1 | grep -E '^test result|panicked|error' ) ||
  bad "the packaged uslab-sys failed its tests"
[ $fail -eq 0 ] && echo "check-package: ok"
exit $fail
