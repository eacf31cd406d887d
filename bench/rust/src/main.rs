// Rust workloads under one global allocator (the crate's feature picks it): what Rust
// programs allocate for, from the crates they use. `uslab-bench-rust WORKLOAD` runs one
// and prints a checksum (the same under every allocator) and, for `peak`, the RSS
// after the peak; bench/rust.py times the runs and reads their peak RSS.
//   json      serde_json: records serialized, parsed back into structs and Values
//   maps      BTreeMap and HashMap churn: String keys, Vec values of mixed sizes
//   channels  a pipeline of threads over mpsc channels: messages made on one thread,
//             transformed on a second, freed on a third
//   regex     regex: patterns compiled again and again, matches collected as Strings
//   peak      a 600 MB peak of small objects freed, then light work for 12 s: RSS at
//             1 s and 12 s after the peak (the memory a service keeps after a burst)
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[cfg(feature = "uslab")]
#[global_allocator]
static GLOBAL: uslab::Uslab = uslab::Uslab;
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// A fixed pseudo-random sequence: every allocator sees the same work.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    id: u64,
    customer: String,
    tags: Vec<String>,
    lines: Vec<Line>,
    notes: Option<String>,
    attributes: HashMap<String, String>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Line {
    sku: String,
    quantity: u32,
    price: f64,
}

fn order(r: &mut Rng, id: u64) -> Order {
    let lines = (0..1 + r.below(8))
        .map(|k| Line { sku: format!("SKU-{}-{}", r.below(100_000), k), quantity: r.below(20) as u32, price: r.below(10_000) as f64 / 100.0 })
        .collect();
    let attributes = (0..r.below(5)).map(|k| (format!("key{}", k), "v".repeat(r.below(40) as usize))).collect();
    Order {
        id,
        customer: format!("customer {} of region {}", r.below(1_000_000), r.below(50)),
        tags: (0..r.below(6)).map(|k| format!("tag{}", k * r.below(100))).collect(),
        lines,
        notes: if r.below(3) == 0 { Some("x".repeat(r.below(300) as usize)) } else { None },
        attributes,
    }
}

fn json() -> u64 {
    let mut r = Rng(1);
    let mut sum = 0u64;
    for round in 0..40 {
        let orders: Vec<Order> = (0..2000).map(|i| order(&mut r, round * 2000 + i)).collect();
        let text = serde_json::to_string(&orders).unwrap();
        let back: Vec<Order> = serde_json::from_str(&text).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        sum = sum.wrapping_add(text.len() as u64 + back.iter().map(|o| o.lines.len() as u64).sum::<u64>());
        sum = sum.wrapping_add(value.as_array().unwrap().len() as u64);
        for o in back.iter().filter(|o| o.id % 7 == 0) {
            sum = sum.wrapping_add(serde_json::to_vec(o).unwrap().len() as u64);
        }
    }
    sum
}

fn maps() -> u64 {
    let mut r = Rng(2);
    let mut tree: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut hash: HashMap<u64, String> = HashMap::new();
    let mut sum = 0u64;
    for i in 0..1_500_000u64 {
        let k = r.below(200_000);
        match r.below(4) {
            0 | 1 => {
                tree.insert(format!("key-{:08}", k), vec![i; 1 + r.below(48) as usize]);
                hash.insert(k, "v".repeat(r.below(120) as usize));
            }
            2 => {
                if let Some(v) = tree.remove(&format!("key-{:08}", k)) {
                    sum = sum.wrapping_add(v.len() as u64);
                }
                hash.remove(&k);
            }
            _ => {
                if let Some(v) = tree.get_mut(&format!("key-{:08}", k)) {
                    v.push(i);
                }
                if let Some(s) = hash.get_mut(&k) {
                    s.push('x');
                }
            }
        }
        if i % 500_000 == 499_999 {
            // A rebuild: the old maps freed while the new ones grow.
            let t2: BTreeMap<String, Vec<u64>> = tree.iter().filter(|(_, v)| v.len() % 2 == 0).map(|(k, v)| (k.clone(), v.clone())).collect();
            tree = t2;
            hash.retain(|k, _| k % 3 != 0);
        }
    }
    sum.wrapping_add(tree.len() as u64).wrapping_add(hash.values().map(|s| s.len() as u64).sum::<u64>())
}

fn channels() -> u64 {
    let (tx1, rx1) = mpsc::sync_channel::<Vec<String>>(256);
    let (tx2, rx2) = mpsc::sync_channel::<HashMap<String, usize>>(256);
    let producer = std::thread::spawn(move || {
        let mut r = Rng(3);
        for i in 0..300_000u64 {
            let msg: Vec<String> = (0..1 + r.below(20)).map(|k| format!("word{} {}", r.below(5000), i + k)).collect();
            tx1.send(msg).unwrap();
        }
    });
    let transformer = std::thread::spawn(move || {
        for msg in rx1 {
            let mut counts = HashMap::new();
            for w in msg {
                let head = w.split(' ').next().unwrap().to_string();
                *counts.entry(head).or_insert(0) += w.len();
            }
            tx2.send(counts).unwrap();
        }
    });
    let mut total: HashMap<String, usize> = HashMap::new();
    for counts in rx2 {
        for (k, v) in counts {
            *total.entry(k).or_insert(0) += v;
        }
    }
    producer.join().unwrap();
    transformer.join().unwrap();
    total.values().map(|&v| v as u64).sum::<u64>() + total.len() as u64
}

fn regex() -> u64 {
    let mut r = Rng(4);
    let lines: Vec<String> = (0..20_000)
        .map(|i| format!("2026-12-{:02} 12:{:02}:{:02} user{}@host{}.example.org GET /api/v{}/items/{} {} {}ms",
                         1 + i % 28, r.below(60), r.below(60), r.below(10_000), r.below(100), r.below(3), r.below(1_000_000), 200 + 100 * r.below(4), r.below(2000)))
        .collect();
    let mut sum = 0u64;
    for round in 0..12 {
        // Compiled anew each round, as a program that builds patterns from input does.
        let patterns = [
            regex::Regex::new(r"(\w+)@(\w+)\.example\.org").unwrap(),
            regex::Regex::new(r"/api/v(\d)/items/(\d+)").unwrap(),
            regex::Regex::new(&format!(r"\b({}\d*)ms", round % 10)).unwrap(),
            regex::Regex::new(r"(?i)GET|POST|PUT").unwrap(),
        ];
        for line in &lines {
            for p in &patterns {
                for c in p.captures_iter(line) {
                    let owned: Vec<String> = c.iter().flatten().map(|m| m.as_str().to_owned()).collect();
                    sum = sum.wrapping_add(owned.iter().map(|s| s.len() as u64).sum::<u64>());
                }
            }
        }
    }
    sum
}

fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: f64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096.0 / (1 << 20) as f64
}

fn peak() -> u64 {
    let mut r = Rng(5);
    let mut sum = 0u64;
    {
        let mut m: HashMap<u64, Vec<u8>> = HashMap::new();
        for i in 0..6_000_000u64 {
            m.insert(i, vec![i as u8; 16 + r.below(140) as usize]);
        }
        sum = sum.wrapping_add(m.values().map(|v| v.len() as u64).sum::<u64>());
    }
    // After the burst: a request's worth of small allocations every 10 ms.
    let start = Instant::now();
    let mut at_1s = None;
    while start.elapsed() < Duration::from_secs(12) {
        let v: Vec<String> = (0..200).map(|i| format!("request {}", i)).collect();
        sum = sum.wrapping_add(v.len() as u64);
        drop(v);
        if at_1s.is_none() && start.elapsed() >= Duration::from_secs(1) {
            at_1s = Some(rss_mib());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("rss_after_peak_mib {:.1} {:.1}", at_1s.unwrap(), rss_mib());
    sum
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let sum = match which.as_str() {
        "json" => json(),
        "maps" => maps(),
        "channels" => channels(),
        "regex" => regex(),
        "peak" => peak(),
        _ => {
            eprintln!("usage: uslab-bench-rust json|maps|channels|regex|peak");
            std::process::exit(2);
        }
    };
    println!("checksum {}", sum);
}
