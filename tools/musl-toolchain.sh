#!/usr/bin/env bash
# tools/musl-toolchain.sh DIR — a meson cross file (DIR/musl.ini) that builds
# libuslab.so and the C tests for musl with Debian's musl-tools and musl-dev, and the
# C++ compiler's command alone, one word a line (DIR/cxx.args), for the Rust crate's
# build script (rust/uslab-sys/build.rs).
#
# musl-gcc compiles and links C against musl's headers, crt and libc.so
# (/lib/ld-musl-x86_64.so.1). Debian has no C++ toolchain for musl, but the core needs
# only header-only parts of libstdc++ (<atomic>, <cstddef>, <new>) and no C++ runtime:
# g++ compiles it with musl's headers first and libstdc++'s after, and two of
# libstdc++'s glibc-configured headers are stepped around: __GLIBC_PREREQ (which
# os_defines.h tests) reads as false, and C++20's atomic waiting (which pulls in
# std::mutex, locales and pthread_cond_clockwait) is left out. DIR/include holds what
# musl's headers lack: the kernel's (linux, asm, asm-generic), hwloc's (its header
# only: at run time uslab opens whatever libhwloc the musl system has, Alpine's) and
# <sys/sdt.h> for the USDT probes.
set -euo pipefail
dir=$(mkdir -p "$1" && cd "$1" && pwd)
ma=$(gcc -print-multiarch)
musl_inc=/usr/include/$(uname -m)-linux-musl
[ -d "$musl_inc" ] && command -v musl-gcc >/dev/null ||
  { echo "musl-toolchain: needs musl-tools and musl-dev (apt-get install musl-tools musl-dev)" >&2; exit 2; }
gxx_ver=$(g++ -dumpversion | cut -d. -f1)
musl_lib=/lib/$(uname -m)-linux-musl

inc=$dir/include
rm -rf "$inc"
mkdir -p "$inc/sys" "$inc/hwloc"
for d in linux asm-generic; do ln -s "/usr/include/$d" "$inc/$d"; done
ln -s "/usr/include/$ma/asm" "$inc/asm"
for f in /usr/include/$ma/sys/sdt.h /usr/include/$ma/sys/sdt-config.h; do
  [ -f "$f" ] && ln -s "$f" "$inc/sys/"
done
if [ -f /usr/include/hwloc.h ]; then
  ln -s /usr/include/hwloc.h "$inc/hwloc.h"
  for f in /usr/include/hwloc/*; do
    [ "${f##*/}" = autogen ] || ln -s "$f" "$inc/hwloc/"
  done
  # Debian keeps the configured header per architecture.
  for d in "/usr/include/$ma/hwloc/autogen" /usr/include/hwloc/autogen; do
    [ -d "$d" ] && { ln -s "$d" "$inc/hwloc/autogen"; break; }
  done
fi

list() {  # a meson array of its arguments
  local out="" a
  for a in "$@"; do out+="${out:+, }'$a'"; done
  echo "[$out]"
}
# Part of the compiler's command, not cpp_args: meson drops an -isystem naming a
# directory the compiler searches by default (libstdc++'s).
cpp=(g++ -nostdinc -isystem "/usr/include/c++/$gxx_ver" -isystem "/usr/include/$ma/c++/$gxx_ver"
  -isystem "$musl_inc" -isystem "$inc" -isystem "$(gcc -print-file-name=include)"
  "-D__GLIBC_PREREQ(a,b)=0" -D_GLIBCXX_ATOMIC_WAIT_H)
cat >"$dir/musl.ini" <<EOF
# Made by tools/musl-toolchain.sh: libuslab.so and the C tests for musl.
[binaries]
c = $(list musl-gcc "-isystem$inc")
cpp = $(list "${cpp[@]}")
ar = 'ar'
strip = 'strip'
pkg-config = 'false'

[built-in options]
# Where musl's libc.so is, for the programs linked with libuslab.so (whose libc.so the
# linker would otherwise take from glibc's directory).
c_link_args = ['-Wl,-rpath-link,$musl_lib']

[properties]
needs_exe_wrapper = false

[host_machine]
system = 'linux'
cpu_family = '$(uname -m)'
cpu = '$(uname -m)'
endian = 'little'
EOF
printf '%s\n' "${cpp[@]}" >"$dir/cxx.args"
echo "$dir/musl.ini"
