// The C API beyond malloc through the raw bindings: bulk allocation of malloc memory,
// object caches with a constructor, deferred (RCU-style) frees with a reader that
// still uses what a writer replaced, and the numbers struct.
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;
use uslab_sys::*;

#[test]
fn bulk_of_malloc_memory() {
    let mut objs = vec![null_mut::<c_void>(); 1000];
    unsafe {
        assert_eq!(uslab_alloc_bulk(96, 1000, objs.as_mut_ptr()), 1000);
        for (i, &p) in objs.iter().enumerate() {
            assert!(!p.is_null() && uslab_malloc_usable_size(p) >= 96);
            std::ptr::write_bytes(p.cast::<u8>(), i as u8, 96);
        }
        for (i, &p) in objs.iter().enumerate() {
            assert!((0..96).all(|k| *p.cast::<u8>().add(k) == i as u8));
        }
        uslab_free_bulk(1000, objs.as_mut_ptr());
    }
}

static CONSTRUCTED: AtomicUsize = AtomicUsize::new(0);
unsafe extern "C" fn ctor(obj: *mut c_void) {
    *obj.cast::<u64>() = 0x5eed;
    CONSTRUCTED.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn object_cache_with_constructor() {
    unsafe {
        let c = uslab_cache_create(b"rust-test\0".as_ptr().cast(), 40, 8, 0, Some(ctor));
        assert!(!c.is_null());
        let mut objs = vec![null_mut::<c_void>(); 500];
        assert_eq!(uslab_cache_alloc_bulk(c, 500, objs.as_mut_ptr()), 500);
        assert!(objs.iter().all(|&p| *p.cast::<u64>() == 0x5eed));
        assert!(CONSTRUCTED.load(Ordering::Relaxed) >= 500);
        uslab_cache_free_bulk(c, 500, objs.as_mut_ptr());
        let one = uslab_cache_alloc(c);
        assert_eq!(*one.cast::<u64>(), 0x5eed);
        uslab_cache_free(c, one);
        uslab_cache_destroy(c);
        // Bad input is refused with EINVAL, not a crash.
        assert!(uslab_cache_create(b"bad\0".as_ptr().cast(), 0, 0, 0, None).is_null());
    }
}

#[test]
fn deferred_free_waits_for_readers() {
    struct Node {
        value: u64,
    }
    let shared = Arc::new(AtomicPtr::new(Box::into_raw(Box::new(Node { value: 0 }))));
    let stop = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while stop.load(Ordering::Relaxed) == 0 {
                    unsafe {
                        uslab_read_lock();
                        let n = shared.load(Ordering::Acquire);
                        let v = (*n).value;
                        std::hint::spin_loop();
                        assert_eq!((*n).value, v, "a node changed under a reader");
                        uslab_read_unlock();
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    // The writer replaces the node; the old one is freed after a grace period. Nodes
    // are uslab_malloc's, so the deferred free hands them back to the same heap.
    unsafe {
        for i in 1..20_000u64 {
            let n = uslab_malloc(std::mem::size_of::<Node>()).cast::<Node>();
            (*n).value = i;
            let old = shared.swap(n, Ordering::AcqRel);
            if i == 1 {
                uslab_synchronize(); // the first was Box's: its grace period by hand
                drop(Box::from_raw(old));
            } else {
                // Freed at once, the next node would reuse it under a reader, and
                // the reader's check fails.
                uslab_free_deferred(old.cast());
            }
        }
        stop.store(1, Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(reads > 0);
        uslab_deferred_barrier();
        let mut s = uslab_stats_t::default();
        assert_eq!(uslab_stats_get(&mut s, std::mem::size_of::<uslab_stats_t>()), 0);
        assert_eq!(s.deferred_objects, 0, "every deferred free done after the barrier");
        assert!(s.grace_periods > 0);
        uslab_free(shared.load(Ordering::Acquire).cast());
    }
}

#[test]
fn numbers_struct_matches_the_c_one() {
    // A struct larger than the C library's is refused (EINVAL): this one is accepted,
    // and its last field is read as the C library writes it.
    let mut s = uslab_stats_t::default();
    s.guarded_reports = u64::MAX;
    unsafe {
        assert_eq!(uslab_stats_get(&mut s, std::mem::size_of::<uslab_stats_t>()), 0);
        assert_eq!(uslab_stats_get(&mut s, std::mem::size_of::<uslab_stats_t>() + 8), -1);
    }
    assert_eq!(s.guarded_reports, 0);
    assert!(s.mapped >= s.active && s.active >= s.allocated);
    let v = unsafe { std::ffi::CStr::from_ptr(uslab_version()) };
    assert_eq!(v.to_str().unwrap(), USLAB_VERSION);
}
