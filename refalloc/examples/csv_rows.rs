//! The CSV reader's rows alone (src/csv.rs `read_rows`), without the replay: the reading
//! thread's share of `replay_rows`, timed on one core, or counted under cachegrind.
//!
//! `cargo run --release --no-default-features --example csv_rows -- CSV [REPEAT]`: reads the
//! file into memory, then parses its rows REPEAT times (best time printed with the events and
//! a checksum of them, to compare builds).
use _refalloc::csv::{read_rows, Types};
use std::collections::HashMap;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let data = std::fs::read(&args[1]).expect("read the CSV");
    let repeat: usize = args.get(2).map_or(3, |s| s.parse().expect("REPEAT"));
    // The rows start after the two header lines (`# beamalloc-trace` and the column names).
    let mut at = 0;
    for _ in 0..2 {
        at += data[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
    }
    let mut best = f64::MAX;
    let (mut count, mut sum) = (0u64, 0u64);
    for _ in 0..repeat {
        // The header's type table as the benchmark's named CSV declares it.
        let mut types = Types::new(HashMap::from([("binary".to_string(), 214)]), 0x10000);
        let t = Instant::now();
        sum = 0;
        let n = read_rows(&data[at..], 2, &mut types, |e| {
            sum = sum.wrapping_mul(31).wrapping_add(
                e.t_ns
                    ^ e.size
                    ^ e.id
                    ^ e.new_id
                    ^ e.type_
                    ^ e.allocator
                    ^ e.instance
                    ^ e.thread
                    ^ e.op as u64,
            );
            Ok(())
        })
        .unwrap()
        .expect("rows the fast paths take");
        best = best.min(t.elapsed().as_secs_f64());
        count = n;
    }
    println!(
        "{count} rows, best {best:.3} s ({:.1} ns/row), checksum {sum:x}",
        best * 1e9 / count as f64
    );
}
