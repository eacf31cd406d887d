// GlobalAlloc's contract under uslab: every alignment from 1 to 4 MiB, contents kept
// by realloc growing and shrinking (in place or moved), alloc_zeroed zero after the
// same memory was dirtied, and objects freed by other threads than their own.
use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;
use std::thread;

#[global_allocator]
static GLOBAL: uslab::Uslab = uslab::Uslab;

fn fill(p: *mut u8, n: usize, seed: usize) {
    for i in 0..n {
        unsafe { *p.add(i) = (i * 31 + seed) as u8 };
    }
}

fn same(p: *const u8, n: usize, seed: usize) -> bool {
    (0..n).all(|i| unsafe { *p.add(i) } == (i * 31 + seed) as u8)
}

fn aligned(p: *const u8, align: usize) -> bool {
    p as usize % align == 0
}

#[test]
fn every_alignment_and_realloc() {
    let a = uslab::Uslab;
    let mut align = 1;
    while align <= 4 << 20 {
        for size in [1, align / 2 + 1, align, 3 * align + 5, 100, 5000] {
            let layout = Layout::from_size_align(size, align).unwrap();
            unsafe {
                let p = a.alloc(layout);
                assert!(!p.is_null() && aligned(p, align), "alloc {} align {}", size, align);
                assert!(a.usable_size(p) >= size);
                fill(p, size, align);
                let grown = 2 * size + 100;
                let q = a.realloc(p, layout, grown);
                assert!(!q.is_null() && aligned(q, align) && same(q, size, align), "grow {} align {}", size, align);
                let big = Layout::from_size_align(grown, align).unwrap();
                let small = size / 2 + 1;
                let r = a.realloc(q, big, small);
                assert!(!r.is_null() && aligned(r, align) && same(r, small, align), "shrink {} align {}", size, align);
                a.dealloc(r, Layout::from_size_align(small, align).unwrap());
            }
        }
        align <<= 1;
    }
}

#[test]
fn zeroed_is_zero() {
    let a = uslab::Uslab;
    for align in [1, 8, 16, 64, 4096, 1 << 16] {
        for size in [1, 7, 16, 100, 4096, 40_000, 300_000, 3 << 20] {
            let layout = Layout::from_size_align(size, align).unwrap();
            unsafe {
                let d = a.alloc(layout);
                std::ptr::write_bytes(d, 0xa5, size);
                a.dealloc(d, layout);
                let z = a.alloc_zeroed(layout);
                assert!(!z.is_null() && aligned(z, align));
                assert!((0..size).all(|i| *z.add(i) == 0), "alloc_zeroed {} align {}", size, align);
                a.dealloc(z, layout);
            }
        }
    }
}

#[test]
fn collections() {
    let mut v: Vec<String> = Vec::new();
    for i in 0..100_000 {
        v.push(format!("item {}", i));
    }
    let m: std::collections::BTreeMap<usize, Vec<u8>> = (0..10_000).map(|i| (i, vec![i as u8; i % 300])).collect();
    assert_eq!(v[99_999], "item 99999");
    assert_eq!(m[&299].len(), 299);
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v.capacity(), 10);
}

#[test]
fn freed_by_other_threads() {
    let (tx, rx) = mpsc::sync_channel::<Vec<Box<[u64]>>>(64);
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let tx = tx.clone();
            thread::spawn(move || {
                for round in 0..300u64 {
                    let batch: Vec<Box<[u64]>> =
                        (0..50).map(|i| vec![round * 1000 + i + t; (i as usize % 40) + 1].into_boxed_slice()).collect();
                    tx.send(batch).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consumers: Vec<_> = {
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        (0..2)
            .map(|_| {
                let rx = rx.clone();
                thread::spawn(move || {
                    let mut seen = 0usize;
                    loop {
                        let batch = match rx.lock().unwrap().recv() {
                            Ok(b) => b,
                            Err(_) => return seen,
                        };
                        for b in &batch {
                            assert!(b.iter().all(|&x| x == b[0]));
                        }
                        seen += batch.len();
                        drop(batch); // freed on this thread, allocated on another
                    }
                })
            })
            .collect()
    };
    for p in producers {
        p.join().unwrap();
    }
    let seen: usize = consumers.into_iter().map(|c| c.join().unwrap()).sum();
    assert_eq!(seen, 4 * 300 * 50);
}
