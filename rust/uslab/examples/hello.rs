// The two lines a program needs, and what uslab says about the run.
#[global_allocator]
static GLOBAL: uslab::Uslab = uslab::Uslab;

fn main() {
    let words: Vec<String> = (0..200_000).map(|i| format!("word{}", i % 5000)).collect();
    let mut counts = std::collections::HashMap::new();
    for w in &words {
        *counts.entry(w.as_str()).or_insert(0u32) += 1;
    }
    let mut s = uslab::sys::uslab_stats_t::default();
    unsafe { uslab::sys::uslab_stats_get(&mut s, std::mem::size_of_val(&s)) };
    println!("{} distinct words, {} each; uslab {} holds {} bytes live",
             counts.len(), counts["word42"], uslab::Uslab.version(), s.allocated);
}
