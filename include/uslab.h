/* uslab.h — public C API of the uslab allocator.
 *
 * Link with -luslab (pkg-config uslab) or preload libuslab.so; the malloc family and
 * C++ operators are interposed either way. This header adds uslab's own functions.
 * Configuration is the USLAB_CONF environment variable ("key=value,..."; see the
 * README), or a string the program links in:
 *     const char *uslab_malloc_conf = "decay_ms=1000";
 */
#ifndef USLAB_H
#define USLAB_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define USLAB_VERSION "0.1.0"

/* ---- The malloc family under uslab's names ----
 * The heap malloc and free reach when libuslab is linked or preloaded, for a program
 * that links uslab beside another malloc (the Rust crate `uslab` without its
 * `override` feature leaves the standard names to libc). Semantics as the standard
 * calls': NULL with errno = ENOMEM, calloc's overflow checked, realloc(p, 0) frees.
 * The aligned calls take any power-of-two alignment (EINVAL otherwise); a failed
 * uslab_realloc_aligned leaves p valid. The sized frees take the size (and
 * alignment) the object was asked for, or any size up to its usable size. */
void* uslab_malloc(size_t size);
void* uslab_calloc(size_t n, size_t size);
void* uslab_realloc(void* p, size_t size);
void uslab_free(void* p);
void uslab_free_sized(void* p, size_t size);
void* uslab_aligned_alloc(size_t align, size_t size);
void* uslab_aligned_alloc_zeroed(size_t align, size_t size);
void* uslab_realloc_aligned(void* p, size_t align, size_t size);
void uslab_free_aligned_sized(void* p, size_t align, size_t size);
size_t uslab_malloc_usable_size(const void* p);
/* jemalloc's mallctl (docs/API.md, "jemalloc's API", lists the names). */
int uslab_mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen);

/* The version string of the loaded library. */
const char* uslab_version(void);

/* Writes the slabinfo-style statistics table through write_cb, one line per call.
 * Allocates nothing, so it may be called from a signal-free context at any time. */
void uslab_stats_print(void (*write_cb)(void* opaque, const char* text), void* opaque);

/* The same statistics as one JSON document (its schema: docs/STATS.md), written
 * through write_cb in pieces; allocates nothing. */
void uslab_stats_print_json(void (*write_cb)(void* opaque, const char* text), void* opaque);
/* The JSON document in buf, cut at size - 1 bytes and NUL-terminated (when size > 0);
 * returns the document's whole length, as snprintf does: a result >= size means buf
 * was too small. */
size_t uslab_stats_json(char* buf, size_t size);

/* Numbers for programs (the same the statistics table prints). */
typedef struct uslab_stats {
  size_t allocated;        /* bytes in live objects */
  size_t active;           /* bytes of slabs, large spans and huge mappings holding them */
  size_t resident;         /* estimate: mapped minus purged free pages, plus metadata */
  size_t mapped;           /* bytes of segments mapped */
  size_t metadata;         /* bytes of uslab's own descriptors and caches */
  size_t cached;           /* bytes of free objects in CPU sheaves, depots, thread caches */
  size_t returned;         /* bytes returned to the OS so far (cumulative) */
  unsigned mode;           /* USLAB_MODE_* below */
  unsigned cpus;           /* CPUs whose sheaves are in use (per-CPU modes) */
  size_t deferred_objects; /* objects given to uslab_free_deferred, not freed yet */
  size_t deferred_bytes;   /* their bytes, in sealed blocks and the emergency chain */
  size_t deferred_blocks;  /* sealed blocks waiting for their grace period */
  unsigned long long grace_periods;     /* grace periods completed */
  unsigned long long deferred_batches;  /* batches of deferred objects freed so far */
  unsigned nodes;                       /* NUMA nodes of the topology in use */
  unsigned long long remote_node_frees; /* objects freed on a CPU of another node than
                                           theirs, flushed back to their node so far */
  size_t remote_node_pending;           /* such objects still in the CPUs' remote-node buffers */
  unsigned background;                  /* USLAB_BACKGROUND_* below: the background thread */
  size_t thp_segments;                  /* segments advised transparent huge pages now */
  unsigned long long thp_splits;        /* times a return of pages took a segment off huge
                                           pages, splitting those it had (cumulative) */
  unsigned long long thp_collapses;     /* segments measured dense and collapsed into huge
                                           pages (MADV_COLLAPSE, cumulative) */
  size_t thp_kept;                      /* free bytes the last decay purge left inside
                                           segments mostly in use, to keep their huge
                                           pages whole (a trim returns them) */
  unsigned long long guarded_allocations; /* objects guarded sampling served so far */
  size_t guarded_live;                  /* of them, not freed yet */
  size_t guarded_freed;                 /* freed, inaccessible, waiting for reuse */
  unsigned long long guarded_reports;   /* errors found on guarded objects */
} uslab_stats_t;

/* uslab_stats_t.background: */
#define USLAB_BACKGROUND_NONE 0    /* not started: nothing to give back yet (or =false) */
#define USLAB_BACKGROUND_WANTED 1  /* to be started at the next call from outside libc */
#define USLAB_BACKGROUND_RUNNING 2 /* running */
/* Could not be started (pthread_create failed, or a seccomp filter): memory returns on
 * allocator calls. */
#define USLAB_BACKGROUND_FAILED 3

#define USLAB_MODE_PER_THREAD 0   /* per-thread caches */
#define USLAB_MODE_PERCPU_GLIBC 1 /* per-CPU sheaves, glibc's rseq registration */
#define USLAB_MODE_PERCPU_OWN 2   /* per-CPU sheaves, uslab's rseq registration */

/* Fills *out; size is sizeof(uslab_stats_t) as the caller was compiled (fields
 * added later are left out for older callers). 0, or -1 with errno = EINVAL. */
int uslab_stats_get(uslab_stats_t* out, size_t size);

/* Writes what the topology providers (the start-up probe and hwloc, when libhwloc.so.15
 * can be loaded) see of the machine and what uslab uses: CPUs, NUMA nodes, caches,
 * shards, per-CPU cache budget, mode. Loads hwloc (milliseconds); `uslab topology`. */
void uslab_topology_print(void (*write_cb)(void* opaque, const char* text), void* opaque);

/* Returns cached free memory to the OS now (as malloc_trim(0)); bytes released. */
size_t uslab_trim(void);

/* Heap profiling (USLAB_CONF=prof=true; README "Heap profiling"): writes the profile
   now, as pprof's profile.proto at `path` (NULL: PREFIX.PID.SEQ.dump.pb, after
   prof_prefix) with the live objects and everything allocated since start, and the
   folded stacks beside it (path.inuse.folded, path.alloc.folded). 0, or an errno
   value: EINVAL when profiling is off, else why the file could not be written. */
int uslab_prof_dump(const char* path);

/* ---- Object caches (the kernel's kmem_cache) ----
 * A cache hands out objects of one size and alignment from slabs of its own, through
 * the same lockless per-CPU path as malloc. The constructor, when given, runs once
 * per object when its slab is carved, not on every allocation: objects must be
 * returned to the cache in their constructed state. free() accepts cache objects too.
 * At most 70 caches exist at once (a destroyed cache frees its slot unless objects
 * were still allocated). Objects larger than 32 KiB, alignments above 8 KiB, and a
 * constructor together with ZERO or POISON are refused (NULL, errno = EINVAL). */
typedef struct uslab_cache uslab_cache_t;

#define USLAB_CACHE_ZERO 0x1u    /* every allocation returns zeroed memory */
#define USLAB_CACHE_HWALIGN 0x2u /* objects aligned to the hardware cache line (64 bytes) */
#define USLAB_CACHE_POISON 0x4u  /* debug: freed objects are poisoned, checked on reuse */

/* NULL with errno = EINVAL (size 0, align not a power of two, bad flags) or ENOMEM. */
uslab_cache_t* uslab_cache_create(const char* name, size_t size, size_t align, unsigned flags,
                                  void (*ctor)(void* obj));
void* uslab_cache_alloc(uslab_cache_t* cache);
void uslab_cache_free(uslab_cache_t* cache, void* obj);
/* n, or 0 with nothing allocated (all or nothing, as kmem_cache_alloc_bulk). */
size_t uslab_cache_alloc_bulk(uslab_cache_t* cache, size_t n, void** out);
void uslab_cache_free_bulk(uslab_cache_t* cache, size_t n, void** objs);
/* Objects still allocated are reported on stderr by cache name and count, and
 * their memory stays valid. */
void uslab_cache_destroy(uslab_cache_t* cache);

/* ---- Bulk allocation of malloc memory ----
 * uslab_alloc_bulk returns n, or 0 with nothing allocated (errno = ENOMEM).
 * uslab_free_bulk takes any pointers uslab handed out (malloc, caches, mixed sizes)
 * and skips NULLs. Both move whole batches between the layers. */
size_t uslab_alloc_bulk(size_t size, size_t n, void** out);
void uslab_free_bulk(size_t n, void** ptrs);

/* ---- Deferred free (RCU-style) ----
 * uslab_free_deferred(p) frees p only after every thread that was inside a
 * read-side section when it was called has left that section: a reader that found p
 * through a shared structure may keep using it until its uslab_read_unlock. Sections
 * nest, may be used in signal handlers, and cost no atomic instruction or fence (the
 * writers' side uses membarrier). Pointers are batched per CPU in page-sized blocks
 * and freed in bulk once their grace period is over; this happens on uslab's own
 * slow paths and on the background thread (README, "When memory comes back"), so no
 * other call is needed for memory to come back. NULL is a no-op.
 * uslab_synchronize and uslab_deferred_barrier wait, so calling them inside a
 * read-side section is reported and aborts. */
void uslab_read_lock(void); /* enter a read-side section; nestable */
void uslab_read_unlock(void);
void uslab_free_deferred(void* ptr); /* free after a grace period; NULL is a no-op */
void uslab_synchronize(void);        /* wait until a grace period has passed */
void uslab_deferred_barrier(void);   /* wait until every deferred free queued before it is done */

#ifdef __cplusplus
}
#endif

#endif /* USLAB_H */
