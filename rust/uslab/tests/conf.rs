// A configuration linked in with uslab::conf! is read at the first call, and
// USLAB_CONF given to the test still wins over it (not set here).
#[global_allocator]
static GLOBAL: uslab::Uslab = uslab::Uslab;

uslab::conf!("decay_ms=1234,guard_sample=0");

#[test]
fn linked_in_configuration() {
    if std::env::var_os("USLAB_CONF").is_some() {
        return; // the environment's would win
    }
    let mut ms: isize = 0;
    let mut len = std::mem::size_of::<isize>();
    let r = unsafe {
        uslab::sys::uslab_mallctl(
            b"arenas.dirty_decay_ms\0".as_ptr().cast(),
            (&mut ms as *mut isize).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(r, 0);
    assert_eq!(ms, 1234);
}
