//! Replay speed. Three modes (`cargo run --release --no-default-features --example bench -- …`):
//!
//! * `gen PATH EVENTS MAX_LIVE [SEED]` — write a synthetic binary_alloc trace: a steady state
//!   between MAX_LIVE/2 and MAX_LIVE live blocks freed at random (no locality: a worst case for
//!   caches), sizes mostly small, some medium, on three instances; block ids are dense (a freed
//!   id is reused), as a tracer that remaps pointers at write time produces them;
//! * `replay PATH STRATEGY` — replay the file through the model (read + decode + model) and print
//!   `EVENTS SECONDS PEAK_RSS_KB LIVE_BLOCKS CPU_SECONDS`;
//! * `decode PATH` — read and decode only, to tell the reader's share from the model's: prints
//!   `EVENTS SECONDS PEAK_RSS_KB CHECKSUM CPU_SECONDS`;
//! * `mem STRATEGY [EVENTS] [MAX_LIVE]` — the model alone on events generated up front;
//! * `digest PATH STRATEGY` — replay and print a hash of the final statistics (every instance,
//!   every mseg instance), to check that a speed change leaves the model's results alone.
//!
//! tests/bench/bench_replay.py drives `gen` and `replay` against a glibc baseline.
mod common;

use _refalloc::config::{Globals, Strategy};
use _refalloc::replay::Replay;
use _refalloc::trace::{Event, Op, TraceReader, TraceWriter};
use common::configs;
use std::io::BufWriter;
use std::time::Instant;

struct Gen {
    s: u64,
    live: Vec<u64>,
    spare: Vec<u64>,
    next: u64,
    max_live: usize,
    i: u64,
}

impl Gen {
    fn new(max_live: usize, seed: u64) -> Self {
        Gen {
            s: seed | 1,
            live: Vec::new(),
            spare: Vec::new(),
            next: 1,
            max_live,
            i: 0,
        }
    }
    fn rnd(&mut self) -> u64 {
        self.s ^= self.s << 13;
        self.s ^= self.s >> 7;
        self.s ^= self.s << 17;
        self.s
    }
    fn next_event(&mut self) -> Event {
        let r = self.rnd();
        let inst = r % 3;
        self.i += 1;
        let n = self.live.len();
        let ev = |op, size, id| Event {
            t_ns: self.i * 100,
            op,
            allocator: 10,
            instance: inst,
            type_: 214,
            size,
            id,
            new_id: 0,
            thread: inst,
        };
        if n < self.max_live && (n < self.max_live / 2 || r.is_multiple_of(2)) {
            let id = self.spare.pop().unwrap_or_else(|| {
                self.next += 1;
                self.next - 1
            });
            self.live.push(id);
            let size = if r.is_multiple_of(16) {
                1_000 + (r >> 20) % 60_000
            } else {
                8 + (r >> 20) % 500
            };
            ev(Op::Alloc, size, id)
        } else {
            let j = (r >> 8) as usize % n;
            let victim = self.live.swap_remove(j);
            self.spare.push(victim);
            ev(Op::Free, 0, victim)
        }
    }
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// CPU time of the calling thread, ns (first field of /proc/thread-self/schedstat): on a shared
/// machine the wall time also counts the time other processes held the core.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("gen") => {
            let path = &args[2];
            let n: u64 = arg(&args, 3, 20_000_000);
            let max_live: usize = arg(&args, 4, 50_000);
            let seed: u64 = arg(&args, 5, 0x1234_5678_9abc_def1);
            let f = std::fs::File::create(path).expect("create trace");
            let header = format!(
                "{{\"format\":\"beamalloc-trace\",\"version\":1,\"schedulers\":2,\
                 \"source\":\"synthetic\",\"generator\":\"bench\",\"max_live\":{max_live}}}"
            );
            let mut w = TraceWriter::new(BufWriter::new(f), &header).expect("header");
            let mut g = Gen::new(max_live, seed);
            for _ in 0..n {
                w.write(&g.next_event()).expect("write");
            }
            w.finish().expect("finish");
        }
        Some("replay") => {
            let strategy = Strategy::parse(&args[3]).expect("strategy");
            let mut reader = TraceReader::open(&args[2]).expect("open trace");
            let mut rp = Replay::new(Globals::default(), 3, vec![configs(strategy)], 0);
            let (t, cpu) = (Instant::now(), cpu_ns());
            rp.run_reader(&mut reader).expect("replay");
            let secs = t.elapsed().as_secs_f64();
            let cpu_secs = (cpu_ns() - cpu) as f64 / 1e9;
            println!(
                "{} {:.6} {} {} {:.6}",
                rp.events,
                secs,
                peak_rss_kb(),
                rp.live_blocks(),
                cpu_secs
            );
        }
        Some("decode") => {
            let mut reader = TraceReader::open(&args[2]).expect("open trace");
            let (t, cpu) = (Instant::now(), cpu_ns());
            let (mut n, mut sum) = (0u64, 0u64);
            reader
                .for_each_event(|ev| {
                    n += 1;
                    sum = sum.wrapping_add(ev.size ^ ev.id);
                })
                .expect("decode");
            let secs = t.elapsed().as_secs_f64();
            let cpu_secs = (cpu_ns() - cpu) as f64 / 1e9;
            println!("{n} {secs:.6} {} {sum} {cpu_secs:.6}", peak_rss_kb());
        }
        Some("digest") => {
            let strategy = Strategy::parse(&args[3]).expect("strategy");
            let mut reader = TraceReader::open(&args[2]).expect("open trace");
            let mut rp = Replay::new(Globals::default(), 3, vec![configs(strategy)], 0);
            rp.run_reader(&mut reader).expect("replay");
            let mut text = String::new();
            for h in rp.heaps.iter().flatten() {
                for inst in &h.instances {
                    text += &format!("{:?}", inst.stats);
                }
            }
            for m in &rp.env.msegs {
                text += &format!("{:?}", m.stats);
            }
            let h = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
            });
            println!("{} {h:016x} {}", strategy.name(), rp.live_blocks());
        }
        _ => {
            let off = usize::from(args.get(1).map(String::as_str) == Some("mem"));
            let strategy =
                Strategy::parse(args.get(1 + off).map(String::as_str).unwrap_or("aoffcbf"))
                    .expect("strategy");
            let n: usize = arg(&args, 2 + off, 10_000_000);
            let max_live: usize = arg(&args, 3 + off, 50_000);
            let mut g = Gen::new(max_live, 0x1234_5678_9abc_def1);
            let events: Vec<Event> = (0..n).map(|_| g.next_event()).collect();
            let mut rp = Replay::new(Globals::default(), 3, vec![configs(strategy)], 0);
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
    }
}
