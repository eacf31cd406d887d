// core/platform/probe.h — USDT probes on the slow paths, for perf and bpftrace.
//
// Owns: USLAB_PROBE(name, a, b) (and USLAB_PROBE4), a systemtap-style static probe "uslab:name"
// with two integer arguments (a `nop` and an ELF note; nothing runs unless a tracer attaches).
// `readelf -n libuslab.so` lists them; `perf probe -x libuslab.so sdt_uslab:NAME` enables one.
// Without <sys/sdt.h> (Debian's systemtap-sdt-dev) they compile away. Probes: sheaf_refill (class,
// objects), sheaf_drain (class, objects), slab_grow (class, slab), slab_release (class, slab),
// page_purge (address, bytes), large_alloc (bytes, alignment), deferred_batch (objects,
// grace-period stamp): a batch of deferred frees given back after its grace period, remote_flush
// (objects, groups): a CPU's remote-node buffer flushed to the nodes that own its objects,
// guarded_alloc (address, size): an object guarded sampling served (core/guard/guard.h).
// USLAB_PROBE4 (four arguments): prof_sample (address, bytes, weight, class) for each object the
// heap profiler samples (core/prof: weight is the bytes it stands for, bytes / (1 - exp(-bytes /
// prof_sample)); class is the size or cache class, 0 for large and huge), and prof_free with the
// same arguments when it is freed.
// Beside them, the OpenTelemetry eBPF profiler's allocator contract (its design doc 00003,
// "memory profiling"): provider otel_memory, alloc (address, size, weight) on each sampled
// allocation, the weight being the unbiased bytes it stands for, and free (address) when a
// sampled one is freed; USLAB_OTEL_ALLOC and USLAB_OTEL_FREE fire them where prof_sample and
// prof_free fire, so only while the heap profiler samples (prof=true).
#pragma once

#if defined(__has_include) && __has_include(<sys/sdt.h>)
#include <sys/sdt.h>
#define USLAB_PROBE(name, a, b) STAP_PROBE2(uslab, name, a, b)
#define USLAB_PROBE4(name, a, b, c, d) STAP_PROBE4(uslab, name, a, b, c, d)
#define USLAB_OTEL_ALLOC(p, size, weight) STAP_PROBE3(otel_memory, alloc, p, size, weight)
#define USLAB_OTEL_FREE(p) STAP_PROBE1(otel_memory, free, p)
#else
#define USLAB_PROBE(name, a, b) ((void)(a), (void)(b))
#define USLAB_PROBE4(name, a, b, c, d) ((void)(a), (void)(b), (void)(c), (void)(d))
#define USLAB_OTEL_ALLOC(p, size, weight) ((void)(p), (void)(size), (void)(weight))
#define USLAB_OTEL_FREE(p) ((void)(p))
#endif
