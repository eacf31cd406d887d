//! uslab's statistics as Rust structs, and `mallctl`-style reads and writes of its
//! controls.
//!
//! [`stats()`] reads the JSON document the C library writes (schema 1, its fields in
//! uslab's `docs/STATS.md`); the structs hold the fields most programs look at, and
//! the whole document is kept in [`Stats::raw`]. [`read`], [`write`] and [`call`] are
//! jemalloc's `mallctl` by name; the functions below them are the names used most.
//!
//! A process using uslab, through this crate or preloaded, is also read from outside,
//! live: `uslab stats --pid PID` and `uslab top`.
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: uslab::Uslab = uslab::Uslab;
//!
//! let v: Vec<u64> = (0..100_000).collect();
//! let s = uslab_ctl::stats().unwrap();
//! assert!(s.bytes.allocated >= 800_000);
//! drop(v);
//! uslab_ctl::purge().unwrap(); // everything free back to the OS now
//! assert!((uslab_ctl::allocated().unwrap() as u64) < s.bytes.allocated);
//! ```
use serde::Deserialize;
use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::mem::{size_of, MaybeUninit};
use std::os::raw::c_char;
use uslab_sys as ffi;

/// What a control refused, as `mallctl` says it (an errno value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error(pub i32);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.0 {
            2 => "no such name (ENOENT)",
            1 => "read-only, or takes no value (EPERM)",
            22 => "wrong value size (EINVAL)",
            14 => "bad value (EFAULT)",
            11 => "not available now (EAGAIN)",
            _ => "error",
        };
        write!(f, "uslab mallctl: {} (errno {})", what, self.0)
    }
}

impl std::error::Error for Error {}

fn name_of(name: &str) -> CString {
    CString::new(name).expect("a mallctl name has no NUL byte")
}

fn ctl(name: &str, old: *mut c_void, oldlen: *mut usize, new: *mut c_void, newlen: usize) -> Result<(), Error> {
    let n = name_of(name);
    match unsafe { ffi::uslab_mallctl(n.as_ptr(), old, oldlen, new, newlen) } {
        0 => Ok(()),
        e => Err(Error(e)),
    }
}

/// Values a control reads or writes: the C type the name documents (`size_t`,
/// `ssize_t`, `bool`, `unsigned`, `uint64_t`).
pub trait Value: Copy {}
impl Value for usize {}
impl Value for isize {}
impl Value for bool {}
impl Value for u32 {}
impl Value for u64 {}

/// Reads `name` (e.g. `"stats.allocated"`, a `usize`).
pub fn read<T: Value>(name: &str) -> Result<T, Error> {
    let mut v = MaybeUninit::<T>::uninit();
    let mut len = size_of::<T>();
    ctl(name, v.as_mut_ptr().cast(), &mut len, std::ptr::null_mut(), 0)?;
    if len != size_of::<T>() {
        return Err(Error(22));
    }
    Ok(unsafe { v.assume_init() })
}

/// Writes `name` (e.g. `"arenas.dirty_decay_ms"`, an `isize`).
pub fn write<T: Value>(name: &str, mut value: T) -> Result<(), Error> {
    ctl(name, std::ptr::null_mut(), std::ptr::null_mut(), (&mut value as *mut T).cast(), size_of::<T>())
}

/// Writes `name` and returns the value it had.
pub fn swap<T: Value>(name: &str, mut value: T) -> Result<T, Error> {
    let mut old = MaybeUninit::<T>::uninit();
    let mut len = size_of::<T>();
    ctl(name, old.as_mut_ptr().cast(), &mut len, (&mut value as *mut T).cast(), size_of::<T>())?;
    Ok(unsafe { old.assume_init() })
}

/// Runs a name that takes no value (e.g. `"arena.4096.purge"`).
pub fn call(name: &str) -> Result<(), Error> {
    ctl(name, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0)
}

/// Reads a name whose value is a string (e.g. `"version"`).
pub fn read_str(name: &str) -> Result<String, Error> {
    let s: usize = read(name)?; // a const char*
    Ok(unsafe { CStr::from_ptr(s as *const c_char) }.to_string_lossy().into_owned())
}

/// Refreshes the `stats.*` numbers (jemalloc's epoch).
pub fn epoch() -> Result<(), Error> {
    write("epoch", 1u64)
}

/// Bytes in live objects, as of now (an epoch, then `stats.allocated`).
pub fn allocated() -> Result<usize, Error> {
    epoch()?;
    read("stats.allocated")
}

/// Bytes resident by uslab's estimate, as of now.
pub fn resident() -> Result<usize, Error> {
    epoch()?;
    read("stats.resident")
}

/// Everything free goes back to the OS now (as `malloc_trim(0)`).
pub fn purge() -> Result<(), Error> {
    call("arena.4096.purge")
}

/// A decay tick now: what stayed unused for `decay_ms` goes back.
pub fn decay() -> Result<(), Error> {
    call("arena.4096.decay")
}

/// How long freed memory may stay before it goes back, in ms (`None`: never).
pub fn decay_ms() -> Result<Option<u64>, Error> {
    let ms: isize = read("arenas.dirty_decay_ms")?;
    Ok(if ms < 0 { None } else { Some(ms as u64) })
}

/// Sets the decay time (`None`: never give memory back by itself).
pub fn set_decay_ms(ms: Option<u64>) -> Result<(), Error> {
    write("arenas.dirty_decay_ms", ms.map_or(-1, |m| m.min(isize::MAX as u64) as isize))
}

/// Whether memory comes back by itself (the background thread, `auto` or `true`).
pub fn background_thread() -> Result<bool, Error> {
    read("background_thread")
}

/// Starts (`true`) or stops (`false`) the background thread.
pub fn set_background_thread(on: bool) -> Result<(), Error> {
    write("background_thread", on)
}

/// The memory limit in force (`uslab.memory_limit`; None: none): the option's, the
/// control group's share, or what [`set_memory_limit`] set.
pub fn memory_limit() -> Result<Option<usize>, Error> {
    let bytes: usize = read("uslab.memory_limit")?;
    Ok(if bytes == 0 { None } else { Some(bytes) })
}

/// Sets the memory limit now (None: none). Past it the caches and free pages go back
/// at once; with `hard`, allocations that would pass it fail (Rust's allocation error
/// handler then runs).
pub fn set_memory_limit(bytes: Option<usize>, hard: bool) -> Result<(), Error> {
    write("uslab.memory_limit_hard", hard)?;
    write("uslab.memory_limit", bytes.unwrap_or(0))
}

/// The calling thread's cache back to the shared lists (per-thread mode).
pub fn flush_thread_cache() -> Result<(), Error> {
    call("thread.tcache.flush")
}

/// The heap profiler (started with `prof=true` in `USLAB_CONF` or the linked-in
/// configuration, `uslab::conf!`): pprof profiles of live and allocated memory.
pub mod prof {
    use super::*;

    /// Whether the profiler was configured (`opt.prof`).
    pub fn enabled() -> Result<bool, Error> {
        read("opt.prof")
    }

    /// Whether it samples now.
    pub fn active() -> Result<bool, Error> {
        read("prof.active")
    }

    /// Starts or pauses sampling.
    pub fn set_active(on: bool) -> Result<(), Error> {
        write("prof.active", on)
    }

    /// Writes a profile now: pprof's profile.proto at `path` (None: the configured
    /// prefix's PREFIX.PID.SEQ.dump.pb), folded stacks beside it.
    pub fn dump(path: Option<&str>) -> Result<(), Error> {
        let Some(path) = path else { return call("prof.dump") };
        let path = name_of(path);
        let mut p: *const c_char = path.as_ptr();
        let size = size_of::<*const c_char>();
        ctl("prof.dump", std::ptr::null_mut(), std::ptr::null_mut(), (&mut p as *mut *const c_char).cast(), size)
    }

    /// Forgets what was sampled, and samples every 2^lg_sample bytes on average.
    pub fn reset(lg_sample: usize) -> Result<(), Error> {
        write("prof.reset", lg_sample)
    }
}

/// The statistics document (schema 1). Fields are uslab's `docs/STATS.md`'s; one the
/// mode does not have (`mode.cpus_used` with thread caches) reads as 0 or empty.
#[derive(Clone, Debug, Deserialize)]
pub struct Stats {
    pub schema: u32,
    pub version: String,
    pub pid: u32,
    pub mode: Mode,
    pub bytes: Bytes,
    #[serde(default)]
    pub classes: Vec<Class>,
    #[serde(default)]
    pub caches: Vec<Cache>,
    pub background: Background,
    pub memory_limit: MemoryLimit,
    #[serde(default)]
    pub guarded: Option<Guarded>,
    #[serde(default)]
    pub prof: Option<Prof>,
    /// The whole document, with the fields the structs leave out.
    #[serde(skip)]
    pub raw: serde_json::Value,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Mode {
    /// `percpu` (rseq sheaves) or `per-thread`.
    pub fast_path: String,
    #[serde(default)]
    pub rseq: Option<String>,
    pub cpus_used: u32,
    pub capacity_per_cpu: u64,
    pub thread_caches: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Bytes {
    pub allocated: u64,
    pub active: u64,
    pub resident: u64,
    pub mapped: u64,
    pub metadata: u64,
    pub cached_cpu: u64,
    pub cached_depot: u64,
    pub cached_thread: u64,
    pub small_allocated: u64,
    pub large_allocated: u64,
    pub huge_allocated: u64,
    pub free: u64,
    pub dirty: u64,
    pub returned: u64,
    pub pending_return: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Class {
    pub class: u32,
    pub size: u64,
    pub slabs: u64,
    pub objects: u64,
    pub active: u64,
    pub cpu: u64,
    pub depot: u64,
    pub thread: u64,
    pub free: u64,
    pub hits: u64,
    pub refills: u64,
    pub drains: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Cache {
    pub name: String,
    pub size: u64,
    pub align: u64,
    pub slabs: u64,
    pub objects: u64,
    pub active: u64,
    pub destroyed: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Background {
    /// `idle`, `wanted`, `running` or `failed`.
    pub state: String,
    pub ticks: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct MemoryLimit {
    pub decided: bool,
    /// 0: none.
    pub bytes: u64,
    pub hard: bool,
    pub source: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Guarded {
    pub sample_bytes: u64,
    pub allocations: u64,
    pub live: u64,
    pub reports: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Prof {
    pub active: bool,
    pub sample_bytes: u64,
    pub samples: u64,
    pub live_bytes: u64,
    pub peak_bytes: u64,
}

/// The statistics document as text (what `USLAB_STATS=json` prints at exit).
pub fn stats_json() -> String {
    // uslab_stats_json allocates nothing and returns the whole length: sized, then
    // written, once more if the document grew in between.
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let cap = buf.len();
        let len = unsafe { ffi::uslab_stats_json(buf.as_mut_ptr().cast(), cap) };
        if len < cap {
            buf.truncate(len);
            return String::from_utf8_lossy(&buf).into_owned();
        }
        buf = vec![0u8; len + len / 4 + 4096];
    }
}

/// The statistics, read now.
pub fn stats() -> Result<Stats, serde_json::Error> {
    Stats::parse(&stats_json())
}

impl Stats {
    /// The statistics from a document: [`stats_json`]'s, `USLAB_STATS=json`'s at exit,
    /// or `uslab stats --pid PID --json`'s of another process.
    pub fn parse(text: &str) -> Result<Stats, serde_json::Error> {
        let raw: serde_json::Value = serde_json::from_str(text)?;
        let mut s = Stats::deserialize(&raw)?;
        s.raw = raw;
        Ok(s)
    }
}

/// The C library's numbers struct (`uslab_stats_get`), without JSON.
pub fn numbers() -> ffi::uslab_stats_t {
    let mut s = ffi::uslab_stats_t::default();
    unsafe { ffi::uslab_stats_get(&mut s, size_of::<ffi::uslab_stats_t>()) };
    s
}
