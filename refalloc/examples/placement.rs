//! Placement digest: `placement TRACE STRATEGY [EVERY]` replays a trace under the bench's
//! configuration (examples/bench.rs) and prints a hash of every carrier's block layout (address,
//! size, free) every EVERY events and at the end: a speed change of the model must leave it alone
//! (the `digest` mode of `bench` hashes the statistics only).
mod common;

use _refalloc::config::{Globals, Strategy};
use _refalloc::replay::Replay;
use _refalloc::trace::TraceReader;
use common::configs;

fn fnv(h: u64, v: u64) -> u64 {
    v.to_le_bytes().iter().fold(h, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn layout(rp: &Replay) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for heap in rp.heaps.iter().flatten() {
        for (c, cr) in heap.live_carriers() {
            h = fnv(
                fnv(fnv(h, c as u64), cr.addr),
                cr.owner as u64 | (cr.in_pool as u64) << 32,
            );
            for b in heap.carrier_blocks(c) {
                let x = heap.block(b);
                h = fnv(fnv(h, x.addr), x.size << 1 | x.free as u64);
            }
        }
        for inst in &heap.instances {
            h = format!("{:?}", inst.stats)
                .bytes()
                .fold(h, |h, b| fnv(h, b as u64));
        }
    }
    h
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let strategy = Strategy::parse(&args[2]).expect("strategy");
    let every: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(250_000);
    let mut reader = TraceReader::open(&args[1]).expect("open trace");
    let mut rp = Replay::new(Globals::default(), 3, vec![configs(strategy)], 0);
    let cps: Vec<u64> = (1..=400).map(|i| i * every).collect();
    let mut acc = 0xcbf2_9ce4_8422_2325_u64;
    rp.run_reader_at(&mut reader, &cps, |rp| acc = fnv(acc, layout(rp)))
        .expect("replay");
    println!(
        "{} {:016x} {:016x} {}",
        strategy.name(),
        acc,
        layout(&rp),
        rp.events
    );
}
