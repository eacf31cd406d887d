// Holds 40 MB of small objects, says it is ready, and waits for its standard input to
// close: a process for `uslab stats --pid` and `uslab top` to read from outside.
#[global_allocator]
static GLOBAL: uslab::Uslab = uslab::Uslab;

fn main() {
    let held: Vec<Box<[u8; 200]>> = (0..200_000).map(|i| Box::new([i as u8; 200])).collect();
    println!("ready {}", std::process::id());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    println!("held {}", held.len());
}
