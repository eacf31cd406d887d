#!/usr/bin/env bash
# test/conformance/symbols.sh LIB — libuslab.so exports the whole malloc family,
# the __libc_* aliases and all 20 C++ operator new/delete forms, and needs libc alone
# at load time (no libstdc++, no libgcc_s), carries its USDT probes, and binds no
# glibc symbol at a version newer than GLIBC_2.17 (core/platform/libc_calls.h: built
# on glibc 2.34+, pthread_create and dlopen would need GLIBC_2.34 and the library
# would not load on Debian 11, Ubuntu 20.04 or RHEL 8).
set -u
lib=$1
want="malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc pvalloc
malloc_usable_size cfree __libc_malloc __libc_free __libc_calloc __libc_realloc __libc_memalign
__libc_valloc __libc_pvalloc __posix_memalign malloc_trim mallinfo mallinfo2 malloc_stats
malloc_info mallopt free_sized free_aligned_sized uslab_version uslab_stats_print uslab_trim
uslab_stats_print_json uslab_stats_json
uslab_cache_create uslab_cache_alloc uslab_cache_free uslab_cache_alloc_bulk uslab_cache_free_bulk
uslab_cache_destroy uslab_alloc_bulk uslab_free_bulk mallocx rallocx xallocx sallocx dallocx
sdallocx nallocx mallctl uslab_stats_get uslab_read_lock uslab_read_unlock uslab_free_deferred
uslab_synchronize uslab_deferred_barrier uslab_topology_print
uslab_malloc uslab_calloc uslab_realloc uslab_free uslab_free_sized uslab_aligned_alloc
uslab_aligned_alloc_zeroed uslab_realloc_aligned uslab_free_aligned_sized uslab_malloc_usable_size
uslab_mallctl uslab_prof_dump
_Znwm _Znam _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t _ZnwmSt11align_val_t _ZnamSt11align_val_t
_ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t _ZdlPv _ZdaPv _ZdlPvm
_ZdaPvm _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t
_ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t _ZdlPvSt11align_val_tRKSt9nothrow_t
_ZdaPvSt11align_val_tRKSt9nothrow_t"
have=$(nm -D --defined-only "$lib" | awk '{print $3}')
fail=0; total=0
for s in $want; do
  total=$((total+1))
  grep -qx "$s" <<<"$have" || { echo "missing export: $s"; fail=$((fail+1)); }
done
needed=$(readelf -d "$lib" | awk '/NEEDED/{print $5}' | tr -d '[]')
total=$((total+1))
[ "$needed" = "libc.so.6" ] || { echo "libuslab.so needs more than libc: $needed"; fail=$((fail+1)); }
# USDT probes on the slow paths (core/platform/probe.h), as readelf lists them.
probes=$(readelf -n "$lib" | awk '/^ *Name: /{print $2}')
for p in sheaf_refill sheaf_drain slab_grow slab_release page_purge large_alloc deferred_batch remote_flush; do
  total=$((total+1))
  grep -qx "$p" <<<"$probes" || { echo "missing USDT probe: $p"; fail=$((fail+1)); }
done
# The OpenTelemetry eBPF profiler's allocator probes: provider, name, argument count.
otel=$(readelf -n "$lib" | awk '/Provider:/{p=$2} /Name:/{n=$2} /Arguments:/{print p ":" n ":" NF-1}')
for p in otel_memory:alloc:3 otel_memory:free:1; do
  total=$((total+1))
  grep -qx "$p" <<<"$otel" || { echo "missing USDT probe (provider:name:arguments): $p"; fail=$((fail+1)); }
done
# Every glibc version the library's imports name, newest first.
newest=$(objdump -T "$lib" | awk '/\*UND\*/' | grep -o 'GLIBC_2\.[0-9.]*' | sort -t. -k2,2n -k3,3n -u | tail -1)
total=$((total+1))
if [ -z "$newest" ]; then
  echo "no versioned glibc import found (objdump -T)"; fail=$((fail+1))
elif [ "$(printf '%s\n' "$newest" GLIBC_2.17 | sort -t. -k2,2n -k3,3n | tail -1)" != GLIBC_2.17 ]; then
  echo "imports newer than GLIBC_2.17:"; objdump -T "$lib" | awk '/\*UND\*/' | grep -E 'GLIBC_2\.(1[89]|[2-9][0-9])'
  fail=$((fail+1))
fi
echo "symbols: $total checks, $fail failed"
[ $fail -eq 0 ]
