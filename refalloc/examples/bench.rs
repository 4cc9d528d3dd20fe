//! Replay speed on a synthetic workload: `cargo run --release --no-default-features --example
//! bench [strategy] [events] [max live blocks]`. Prints events/s of the model alone (events generated up front).
use _refalloc::config::{Globals, InstanceConfig, Strategy};
use _refalloc::replay::Replay;
use _refalloc::trace::{Event, Op};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let strategy =
        Strategy::parse(args.get(1).map(String::as_str).unwrap_or("aoffcbf")).expect("strategy");
    let n: usize = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let max_live: usize = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000);
    let mut s = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    // A steady state between max_live/2 and max_live blocks freed at random (no locality: a
    // worst case for caches), sizes mostly small, some medium.
    let mut live: Vec<u64> = Vec::new();
    let mut events = Vec::with_capacity(n);
    let mut id = 0u64;
    for i in 0..n as u64 {
        let r = rnd();
        let inst = r % 3;
        if live.len() < max_live && (live.len() < max_live / 2 || r % 2 == 0) {
            id += 1;
            live.push(id);
            let size = if r % 16 == 0 {
                1_000 + (r >> 20) % 60_000
            } else {
                8 + (r >> 20) % 500
            };
            events.push(Event {
                t_ns: i * 100,
                op: Op::Alloc,
                allocator: 10,
                instance: inst,
                type_: 214,
                size,
                id,
                new_id: 0,
                thread: inst,
            });
        } else {
            let j = (r >> 8) as usize % live.len();
            let victim = live.swap_remove(j);
            events.push(Event {
                t_ns: i * 100,
                op: Op::Free,
                allocator: 10,
                instance: inst,
                type_: 214,
                size: 0,
                id: victim,
                new_id: 0,
                thread: inst,
            });
        }
    }
    let cfgs: Vec<InstanceConfig> = (0..3)
        .map(|ix| {
            let mut c = InstanceConfig::default_for(10, ix);
            c.strategy = strategy;
            c.atags = true;
            (c.mmbcs, c.smbcs, c.lmbcs) = (64 << 10, 512 << 10, 5 << 20);
            if ix > 0 && strategy.is_aoff_family() {
                (c.acul, c.acnl, c.cp) = (60, 1000, Some('B'));
            }
            c
        })
        .collect();
    let mut rp = Replay::new(Globals::default(), 3, vec![cfgs], 1_000_000_000);
    let t = Instant::now();
    for ev in &events {
        rp.apply(ev);
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} {} events in {:.3} s: {:.1} M events/s, {} live blocks",
        strategy.name(),
        n,
        secs,
        n as f64 / secs / 1e6,
        rp.live_blocks()
    );
}
