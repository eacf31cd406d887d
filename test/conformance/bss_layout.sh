#!/bin/bash
# test/conformance/bss_layout.sh LIB READELF — libuslab.so's zero-filled globals laid
# out for start-up (core/platform/os.h, USLAB_LARGE_ZERO): the small ones, which every
# process touches when the library loads, in a .bss of at most 16 KiB; the big
# shard- and class-indexed arrays in a NOBITS section of their own after it (.lbss on
# x86-64, .bss.uslab_large on aarch64: core/platform/large_zero.ld), inside _end.
# On aarch64 the arrays once sat among the small globals in .bss: /bin/true took
# twice the page faults over an empty library (test/conformance/startup_faults.c, run
# in the arm64 guest), which this check finds from the file alone.
set -u
lib=$1 readelf=$2
sections=$("$readelf" -SW "$lib" | sed -n 's/^ *\[ *[0-9]*\] //p')
field() { awk -v n="$1" -v f="$2" '$1 == n {print $f}' <<<"$sections"; }
fail=0
bss_type=$(field .bss 2) bss_addr=$((16#$(field .bss 3))) bss_size=$((16#$(field .bss 5)))
large=.lbss
[ -n "$(field .bss.uslab_large 2)" ] && large=.bss.uslab_large
large_type=$(field $large 2)
echo ".bss: $bss_type, $bss_size bytes at $(printf %#x $bss_addr); $large: ${large_type:-missing}"
[ "$bss_type" = NOBITS ] || { echo "FAIL: .bss is not NOBITS"; fail=1; }
[ "$bss_size" -le 16384 ] || { echo "FAIL: .bss holds $bss_size bytes (at most 16384): big arrays among the small globals"; fail=1; }
if [ "$large_type" != NOBITS ]; then
  echo "FAIL: no NOBITS $large section for the big arrays"; fail=1
else
  large_addr=$((16#$(field $large 3))) large_size=$((16#$(field $large 5)))
  echo "$large: $large_size bytes at $(printf %#x $large_addr)"
  [ "$large_addr" -ge $((bss_addr + bss_size)) ] || { echo "FAIL: $large is not after .bss"; fail=1; }
  [ "$large_size" -ge 1048576 ] || { echo "FAIL: $large holds $large_size bytes, not the big arrays"; fail=1; }
  end=$("$readelf" -sW "$lib" | awk '$8 == "_end" {print $2; exit}')
  [ -n "$end" ] && [ $((16#$end)) -ge $((large_addr + large_size)) ] ||
    { echo "FAIL: _end (${end:-missing}) does not bound $large (os.cc advises up to it)"; fail=1; }
fi
exit $fail
