//! The cost per event of the recommender's history replays (advice/predict.py, history.rs
//! `replay`), without Python: `cargo run --release --no-default-features --example history --
//! MODE [REPEAT]` on the calibration of the bench node (tests/bench/bench_recommend.py: churn x
//! 160,000 under `+MBas bf`, scaled to 0.125: one prefix, the turnover family and four
//! stragglers families). Modes: `gen` (the generator into a sink that drops the events), `cal`
//! (the calibration, forked, on 2 threads; `cal1`: on one), `one STRATEGY` (one proposal's pass: the turnover
//! family to its 660,006th event under STRATEGY). Prints `EVENTS SECONDS CPU_SECONDS NS_PER_EVENT`.
use _refalloc::config::{Globals, InstanceConfig, Strategy};
use _refalloc::history::{generate, replay, Params, Sink};
use _refalloc::replay::Replay;
use _refalloc::trace::Event;
use std::time::Instant;

/// CPU seconds of the process, its threads included (getrusage RUSAGE_SELF).
fn cpu() -> f64 {
    let mut ru = Rusage {
        utime: Timeval { s: 0, us: 0 },
        stime: Timeval { s: 0, us: 0 },
        rest: [0; 14],
    };
    unsafe { getrusage(0, &mut ru) };
    let t = |v: &Timeval| v.s as f64 + v.us as f64 / 1e6;
    t(&ru.utime) + t(&ru.stime)
}

#[repr(C)]
struct Timeval {
    s: i64,
    us: i64,
}

#[repr(C)]
struct Rusage {
    utime: Timeval,
    stime: Timeval,
    rest: [i64; 14],
}

extern "C" {
    fn getrusage(who: i32, usage: *mut Rusage) -> i32;
}

fn base() -> Params {
    Params {
        live: 10_001,
        peak: 150_000,
        before: 10_001,
        after: 62_365,
        passes: true,
        stragglers: 0,
        rebuild: false,
        phase: 500,
        lo: 576,
        hi: 1_071,
        allocator: 10,
        type_: 214,
        instances: 2,
        seed: 7,
    }
}

/// The four straggler families the calibration tries beside the base history.
fn stragglers() -> impl Iterator<Item = Params> {
    [0, 250, 500, 750].into_iter().map(|phase| Params {
        stragglers: 76,
        rebuild: true,
        phase,
        after: 20_002,
        ..base()
    })
}

fn model(strategy: Strategy) -> Replay {
    let cfgs = (0..3)
        .map(|ix| {
            let mut c = InstanceConfig::default_for(10, ix);
            c.strategy = strategy;
            c
        })
        .collect();
    Replay::new(Globals::default(), 3, vec![cfgs], 100_000_000)
}

struct Count(u64, u64);

impl Sink for Count {
    fn event(&mut self, ev: &Event) -> std::io::Result<()> {
        self.0 += 1;
        self.1 = self.1.wrapping_add(ev.id ^ ev.size);
        Ok(())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("cal");
    let strategy = match args.get(2).map(String::as_str).unwrap_or("bf") {
        "bf" => Strategy::Bf,
        "ageffcbf" => Strategy::Ageffcbf,
        "aoffcbf" => Strategy::Aoffcbf,
        s => panic!("strategy {s}?"),
    };
    let (t, c) = (Instant::now(), cpu());
    let events = match mode {
        "gen" => {
            let mut s = Count(0, 0);
            generate(base(), &mut s).unwrap();
            for p in stragglers() {
                generate(p, &mut s).unwrap();
            }
            eprintln!("checksum {}", s.1);
            s.0
        }
        "cal" | "cal1" => {
            let mut jobs = vec![(
                base(),
                vec![620_002, 640_002, 660_006, 700_010, 780_018, 869_462],
            )];
            for p in stragglers() {
                jobs.push((p, vec![700_010]));
            }
            let seen = std::sync::Mutex::new(Vec::new());
            let workers = if mode == "cal1" { 1 } else { 2 };
            replay(model(strategy), &jobs, workers, |i, rp| {
                seen.lock().unwrap().push((i, rp.events, rp.live_blocks()))
            })
            .unwrap();
            eprintln!("{:?}", seen.into_inner().unwrap());
            869_462 + 4 * (700_010 - 340_004)
        }
        "one" => {
            let jobs = vec![(base(), vec![620_002, 660_006])];
            replay(model(strategy), &jobs, 2, |_, _| {}).unwrap();
            660_006
        }
        m => panic!("mode {m}?"),
    };
    let (wall, cpu) = (t.elapsed().as_secs_f64(), cpu() - c);
    println!(
        "{events} {wall:.3} {cpu:.3} {:.1}",
        cpu * 1e9 / events as f64
    );
}
