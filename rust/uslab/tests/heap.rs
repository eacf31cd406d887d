// What the program allocates is uslab's (its statistics count it), and without the
// override feature C's malloc stays libc's. One test: the counts are process-wide.
use std::ffi::c_void;

#[global_allocator]
static GLOBAL: uslab::Uslab = uslab::Uslab;

extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn free(p: *mut c_void);
}

fn allocated() -> usize {
    let mut s = uslab::sys::uslab_stats_t::default();
    let r = unsafe { uslab::sys::uslab_stats_get(&mut s, std::mem::size_of::<uslab::sys::uslab_stats_t>()) };
    assert_eq!(r, 0);
    s.allocated
}

#[test]
fn rust_allocations_are_uslab_s() {
    let before = allocated();
    let v = vec![1u8; 64 << 20];
    let during = allocated();
    assert!(during >= before + (64 << 20), "{} then {}", before, during);
    drop(v);
    assert!(allocated() < during);

    unsafe {
        let p = malloc(64 << 20);
        assert!(!p.is_null());
        std::ptr::write_bytes(p.cast::<u8>(), 1, 64 << 20);
        let with_c = allocated();
        if cfg!(feature = "override") {
            assert!(with_c >= before + (64 << 20), "override: malloc is uslab's");
        } else {
            assert!(with_c < before + (1 << 20), "no override: malloc is libc's");
        }
        free(p);
    }
}
