//! Raw bindings to uslab's C API (`include/uslab.h`), with the allocator built from the
//! crate's own copy of its sources.
//!
//! Most programs want the [`uslab`](https://docs.rs/uslab) crate's `#[global_allocator]`
//! instead. This crate is for the rest of the API: object caches, bulk allocation,
//! RCU-style deferred frees, statistics and `mallctl`.
//!
//! ```
//! use uslab_sys::*;
//! unsafe {
//!     let p = uslab_malloc(100);
//!     assert!(!p.is_null() && uslab_malloc_usable_size(p) >= 100);
//!     uslab_free_sized(p, 100);
//!
//!     // An object cache: 200 objects of 48 bytes in one call, and back.
//!     let cache = uslab_cache_create(b"doc\0".as_ptr().cast(), 48, 0, 0, None);
//!     let mut objs = [std::ptr::null_mut(); 200];
//!     assert_eq!(uslab_cache_alloc_bulk(cache, 200, objs.as_mut_ptr()), 200);
//!     uslab_cache_free_bulk(cache, 200, objs.as_mut_ptr());
//!     uslab_cache_destroy(cache);
//! }
//! ```
#![no_std]
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// `USLAB_VERSION`: the version of the sources this crate builds.
pub const USLAB_VERSION: &str = "0.1.0";

/// Numbers for programs (`uslab_stats_get`), as `uslab_stats_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct uslab_stats_t {
    pub allocated: usize,
    pub active: usize,
    pub resident: usize,
    pub mapped: usize,
    pub metadata: usize,
    pub cached: usize,
    pub returned: usize,
    pub mode: c_uint,
    pub cpus: c_uint,
    pub deferred_objects: usize,
    pub deferred_bytes: usize,
    pub deferred_blocks: usize,
    pub grace_periods: c_ulonglong,
    pub deferred_batches: c_ulonglong,
    pub nodes: c_uint,
    pub remote_node_frees: c_ulonglong,
    pub remote_node_pending: usize,
    pub background: c_uint,
    pub thp_segments: usize,
    pub thp_splits: c_ulonglong,
    pub thp_collapses: c_ulonglong,
    pub thp_kept: usize,
    pub guarded_allocations: c_ulonglong,
    pub guarded_live: usize,
    pub guarded_freed: usize,
    pub guarded_reports: c_ulonglong,
}

pub const USLAB_BACKGROUND_NONE: c_uint = 0;
pub const USLAB_BACKGROUND_WANTED: c_uint = 1;
pub const USLAB_BACKGROUND_RUNNING: c_uint = 2;
pub const USLAB_BACKGROUND_FAILED: c_uint = 3;
pub const USLAB_MODE_PER_THREAD: c_uint = 0;
pub const USLAB_MODE_PERCPU_GLIBC: c_uint = 1;
pub const USLAB_MODE_PERCPU_OWN: c_uint = 2;

/// An object cache (`uslab_cache_t`).
#[repr(C)]
pub struct uslab_cache_t {
    _opaque: [u8; 0],
}

pub const USLAB_CACHE_ZERO: c_uint = 0x1;
pub const USLAB_CACHE_HWALIGN: c_uint = 0x2;
pub const USLAB_CACHE_POISON: c_uint = 0x4;

/// The callback the statistics and topology printers write through.
pub type uslab_write_cb = Option<unsafe extern "C" fn(opaque: *mut c_void, text: *const c_char)>;

extern "C" {
    // The malloc family under uslab's names.
    pub fn uslab_malloc(size: usize) -> *mut c_void;
    pub fn uslab_calloc(n: usize, size: usize) -> *mut c_void;
    pub fn uslab_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    pub fn uslab_free(p: *mut c_void);
    pub fn uslab_free_sized(p: *mut c_void, size: usize);
    pub fn uslab_aligned_alloc(align: usize, size: usize) -> *mut c_void;
    pub fn uslab_aligned_alloc_zeroed(align: usize, size: usize) -> *mut c_void;
    pub fn uslab_realloc_aligned(p: *mut c_void, align: usize, size: usize) -> *mut c_void;
    pub fn uslab_free_aligned_sized(p: *mut c_void, align: usize, size: usize);
    pub fn uslab_malloc_usable_size(p: *const c_void) -> usize;
    pub fn uslab_mallctl(
        name: *const c_char,
        oldp: *mut c_void,
        oldlenp: *mut usize,
        newp: *mut c_void,
        newlen: usize,
    ) -> c_int;

    pub fn uslab_version() -> *const c_char;
    pub fn uslab_stats_print(write_cb: uslab_write_cb, opaque: *mut c_void);
    pub fn uslab_stats_print_json(write_cb: uslab_write_cb, opaque: *mut c_void);
    pub fn uslab_stats_json(buf: *mut c_char, size: usize) -> usize;
    pub fn uslab_stats_get(out: *mut uslab_stats_t, size: usize) -> c_int;
    pub fn uslab_topology_print(write_cb: uslab_write_cb, opaque: *mut c_void);
    pub fn uslab_trim() -> usize;
    pub fn uslab_prof_dump(path: *const c_char) -> c_int;

    pub fn uslab_cache_create(
        name: *const c_char,
        size: usize,
        align: usize,
        flags: c_uint,
        ctor: Option<unsafe extern "C" fn(obj: *mut c_void)>,
    ) -> *mut uslab_cache_t;
    pub fn uslab_cache_alloc(cache: *mut uslab_cache_t) -> *mut c_void;
    pub fn uslab_cache_free(cache: *mut uslab_cache_t, obj: *mut c_void);
    pub fn uslab_cache_alloc_bulk(cache: *mut uslab_cache_t, n: usize, out: *mut *mut c_void) -> usize;
    pub fn uslab_cache_free_bulk(cache: *mut uslab_cache_t, n: usize, objs: *mut *mut c_void);
    pub fn uslab_cache_destroy(cache: *mut uslab_cache_t);

    pub fn uslab_alloc_bulk(size: usize, n: usize, out: *mut *mut c_void) -> usize;
    pub fn uslab_free_bulk(n: usize, ptrs: *mut *mut c_void);

    pub fn uslab_read_lock();
    pub fn uslab_read_unlock();
    pub fn uslab_free_deferred(ptr: *mut c_void);
    pub fn uslab_synchronize();
    pub fn uslab_deferred_barrier();
}
