//! uslab as Rust's global allocator.
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: uslab::Uslab = uslab::Uslab;
//!
//! let v: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
//! assert_eq!(v[999], "999");
//! ```
//!
//! uslab is a slab allocator after the Linux kernel's: size-class slabs behind
//! lockless per-CPU caches (restartable sequences), batched frees across CPUs, and
//! memory given back to the OS by itself when the program stops using it (a
//! background thread with a decay clock, as jemalloc's). The core is C++, built by
//! `uslab-sys` from its own sources with the `cc` crate: a C++20 compiler is needed,
//! nothing else.
//!
//! Deallocation passes the layout's size and alignment to the core (a sized free:
//! the size class comes from the size, not from a lookup), `realloc` stays in place
//! when the object's slab or span holds the new size, and `alloc_zeroed` uses
//! calloc's path, which knows fresh pages are zero.
//!
//! Configuration is uslab's: the `USLAB_CONF` environment variable
//! (`decay_ms=1000,prof=true`...), or a string linked into the program with
//! [`conf!`]. The statistics are read with the `stats` feature ([`stats()`]), and
//! from outside, live, with `uslab stats --pid PID` or `uslab top`.
#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

pub use uslab_sys as sys;

/// The allocator. `#[global_allocator] static GLOBAL: uslab::Uslab = uslab::Uslab;`
#[derive(Clone, Copy, Debug, Default)]
pub struct Uslab;

// What malloc's memory is aligned to: 16 bytes from 16 bytes up, and a smaller
// object to the largest power of two not above its size (its size class).
const MALLOC_ALIGN: usize = 16;

#[inline(always)]
fn malloc_aligned(align: usize, size: usize) -> bool {
    align <= MALLOC_ALIGN && align <= size
}

unsafe impl GlobalAlloc for Uslab {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if malloc_aligned(layout.align(), layout.size()) {
            sys::uslab_malloc(layout.size()).cast()
        } else {
            sys::uslab_aligned_alloc(layout.align(), layout.size()).cast()
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if malloc_aligned(layout.align(), layout.size()) {
            sys::uslab_calloc(1, layout.size()).cast()
        } else {
            sys::uslab_aligned_alloc_zeroed(layout.align(), layout.size()).cast()
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        sys::uslab_free_aligned_sized(ptr.cast(), layout.align(), layout.size())
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if malloc_aligned(layout.align(), new_size) {
            sys::uslab_realloc(ptr.cast(), new_size).cast()
        } else {
            sys::uslab_realloc_aligned(ptr.cast(), layout.align(), new_size).cast()
        }
    }
}

impl Uslab {
    /// The bytes the object at `ptr` can hold (at least its layout's size).
    ///
    /// # Safety
    /// `ptr` is null or was returned by this allocator and not freed.
    #[inline]
    pub unsafe fn usable_size(&self, ptr: *const u8) -> usize {
        sys::uslab_malloc_usable_size(ptr.cast::<c_void>())
    }

    /// Gives cached free memory back to the OS now (as `malloc_trim(0)`); the bytes
    /// released. uslab does this by itself after `decay_ms` (10 s by default).
    pub fn trim(&self) -> usize {
        unsafe { sys::uslab_trim() }
    }

    /// The version of the uslab sources built in.
    pub fn version(&self) -> &'static str {
        sys::USLAB_VERSION
    }
}

/// A configuration string linked into the program, read at uslab's first call (the
/// `uslab_malloc_conf` symbol of the C library); `USLAB_CONF` is read after it and
/// wins. Once per program, outside any function:
///
/// ```
/// uslab::conf!("decay_ms=200,background_thread=true");
/// ```
#[macro_export]
macro_rules! conf {
    ($text:expr) => {
        #[no_mangle]
        #[used]
        pub static uslab_malloc_conf: $crate::Conf = $crate::Conf::new(concat!($text, "\0"));
    };
}

/// The string [`conf!`] links in: a C string pointer, as the C library reads it.
#[repr(transparent)]
pub struct Conf(*const u8);

// A pointer to a static string, never written.
unsafe impl Sync for Conf {}

impl Conf {
    #[doc(hidden)]
    pub const fn new(text: &'static str) -> Self {
        Conf(text.as_ptr())
    }
}

/// The statistics, read now (uslab-ctl's; the `stats` feature).
#[cfg(feature = "stats")]
pub use uslab_ctl::{stats, Stats};

/// The heap profiler's controls (uslab-ctl's; the `prof` feature).
#[cfg(feature = "prof")]
pub use uslab_ctl::prof;
