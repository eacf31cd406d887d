// The statistics through uslab-ctl agree with the C library's numbers struct and its
// mallctl, and the controls act: a purge returns memory, the decay time reads back
// what was written, a hard memory limit refuses, bad names and sizes are refused as
// mallctl refuses them.
#[global_allocator]
static GLOBAL: uslab::Uslab = uslab::Uslab;

#[test]
fn stats_and_controls() {
    // One test: the numbers are the process's, and the harness runs tests in threads.
    let hold: Vec<Vec<u8>> = (0..2000).map(|i| vec![i as u8; 1000 + i]).collect();
    // The document and the numbers struct with no allocation between them.
    let mut buf = vec![0u8; 1 << 20];
    let len = unsafe { uslab_sys::uslab_stats_json(buf.as_mut_ptr().cast(), buf.len()) };
    let n = uslab_ctl::numbers();
    assert!(len < buf.len());
    let s = uslab_ctl::Stats::parse(std::str::from_utf8(&buf[..len]).unwrap()).expect("the document parses");
    assert_eq!(s.schema, 1);
    assert_eq!(s.version, uslab_sys::USLAB_VERSION);
    assert_eq!(s.pid, std::process::id());
    // Read a moment apart on one thread: the same totals.
    assert_eq!(s.bytes.allocated, n.allocated as u64);
    assert_eq!(s.bytes.mapped, n.mapped as u64);
    assert!(s.bytes.allocated >= hold.iter().map(|v| v.len() as u64).sum::<u64>());
    let class_live: u64 = s.classes.iter().map(|c| c.active * c.size).sum();
    assert_eq!(class_live, s.bytes.small_allocated);
    assert!(["percpu", "per-thread"].contains(&s.mode.fast_path.as_str()));
    assert!(s.raw["thp"]["enabled"].is_boolean());

    assert!(uslab_ctl::stats().unwrap().bytes.allocated > 0);
    let (a, n) = (uslab_ctl::allocated().unwrap(), uslab_ctl::numbers());
    // The epoch's snapshot holds the name it was called with (a CString of 8 bytes).
    assert!(a.abs_diff(n.allocated) <= 64, "mallctl {} against {}", a, n.allocated);
    assert_eq!(uslab_ctl::read_str("version").unwrap(), format!("uslab-{}", uslab_sys::USLAB_VERSION));

    let before = uslab_ctl::numbers().returned;
    drop(hold);
    uslab_ctl::purge().unwrap();
    assert!(uslab_ctl::numbers().returned > before, "a purge returned nothing");

    let old = uslab_ctl::decay_ms().unwrap();
    uslab_ctl::set_decay_ms(Some(250)).unwrap();
    assert_eq!(uslab_ctl::decay_ms().unwrap(), Some(250));
    uslab_ctl::set_decay_ms(None).unwrap();
    assert_eq!(uslab_ctl::decay_ms().unwrap(), None);
    uslab_ctl::set_decay_ms(old).unwrap();
    uslab_ctl::decay().unwrap();

    // A hard memory limit refuses what would pass it; none takes it back.
    let was = uslab_ctl::memory_limit().unwrap();
    let resident = uslab_ctl::resident().unwrap();
    uslab_ctl::set_memory_limit(Some(resident + (64 << 20)), true).unwrap();
    assert_eq!(uslab_ctl::memory_limit().unwrap(), Some(resident + (64 << 20)));
    let mut v: Vec<u8> = Vec::new();
    assert!(v.try_reserve_exact(256 << 20).is_err(), "the hard limit let 256 MiB through");
    assert!(v.try_reserve_exact(16 << 20).is_ok());
    drop(v);
    uslab_ctl::set_memory_limit(None, false).unwrap();
    let mut v: Vec<u8> = Vec::new();
    assert!(v.try_reserve_exact(256 << 20).is_ok());
    drop(v);
    uslab_ctl::set_memory_limit(was, false).unwrap();

    assert_eq!(uslab_ctl::read::<usize>("no.such.name"), Err(uslab_ctl::Error(2)));
    assert_eq!(uslab_ctl::read::<u32>("stats.allocated"), Err(uslab_ctl::Error(22)));
    assert_eq!(uslab_ctl::write("stats.allocated", 1usize), Err(uslab_ctl::Error(1)));
    assert_eq!(uslab_ctl::read::<usize>("arenas.narenas").unwrap_or(0), 0, "narenas is unsigned");
    assert_eq!(uslab_ctl::read::<u32>("arenas.narenas").unwrap(), 1);
    // Without prof=true the profiler's names answer as jemalloc's without opt.prof.
    assert!(!uslab_ctl::prof::enabled().unwrap());
    assert_eq!(uslab_ctl::prof::dump(None), Err(uslab_ctl::Error(2)));
}
