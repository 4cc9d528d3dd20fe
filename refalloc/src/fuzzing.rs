//! The fuzz targets' bodies (refalloc/fuzz/README.md), here so that `cargo test` replays every
//! input the fuzzers ever failed on (fuzz/regressions/) without a nightly toolchain.

use crate::config::{Globals, InstanceConfig, Strategy};
use crate::replay::{Replay, MAX_ALLOC_NO};
use crate::trace::{Event, TraceReader, MAGIC, VERSION};

fn read_all(data: &[u8], checked_only: bool) -> Vec<Result<Event, String>> {
    let mut out = Vec::new();
    let mut r = match TraceReader::new(data, "fz") {
        Ok(r) => r,
        Err(e) => return vec![Err(e.0)],
    };
    r.set_checked_only(checked_only);
    for e in r {
        let stop = e.is_err();
        out.push(e.map_err(|e| e.0));
        assert!(out.len() <= data.len(), "more events than bytes");
        if stop {
            break;
        }
    }
    out
}

/// Any bytes through the trace reader: no panic, no more events than bytes, and the fast
/// decoder gives exactly what the checked one gives (same events, same error at the same point),
/// through the iterator and through `for_each_event` (the replay's loop).
pub fn read_trace(data: &[u8]) {
    let fast = read_all(data, false);
    assert_eq!(fast, read_all(data, true));
    if let Ok(mut r) = TraceReader::new(data, "fz") {
        let mut seen = Vec::new();
        if let Err(e) = r.for_each_event(|e| seen.push(Ok(*e))) {
            seen.push(Err(e.0));
        }
        assert_eq!(fast, seen);
    }
}

type CsvRead = (Vec<Result<Event, String>>, Vec<(String, u64, u64)>);

fn read_csv_all(data: &[u8], checked_only: bool) -> CsvRead {
    let mut r = match crate::csv::CsvReader::new(data, "fz").and_then(|mut r| {
        r.read_columns()?;
        Ok(r)
    }) {
        Ok(r) => r,
        Err(e) => return (vec![Err(e.0)], Vec::new()),
    };
    r.checked_only = checked_only;
    let mut out = Vec::new();
    loop {
        match r.next_event() {
            Ok(Some(e)) => out.push(Ok(e)),
            Ok(None) => break,
            Err(e) => {
                out.push(Err(e.0));
                break;
            }
        }
        assert!(out.len() <= data.len(), "more events than bytes");
    }
    (out, r.types.added)
}

/// Any bytes through the CSV reader: no panic, and its fast paths (`fast_row`, `row`) give
/// exactly what its full path gives (same events, same new type names, same error).
pub fn read_csv(data: &[u8]) {
    assert_eq!(read_csv_all(data, false), read_csv_all(data, true));
}

fn configs(c: &[u8; 4]) -> (Globals, Vec<Vec<InstanceConfig>>) {
    let strategy = Strategy::ALL[c[0] as usize % Strategy::ALL.len()];
    let globals = Globals {
        scs: if c[1] & 1 != 0 { 1 << 30 } else { 0 },
        mcs: (c[1] >> 1 & 7) as usize,
        ..Globals::default()
    };
    let allocators = (1..=MAX_ALLOC_NO as u32)
        .map(|n| {
            (0..3)
                .map(|ix| {
                    let mut cfg = InstanceConfig::default_for(n, ix);
                    cfg.strategy = strategy;
                    cfg.atags = c[1] & 0x10 != 0;
                    cfg.main_carrier = c[1] & 0x20 != 0;
                    // Small thresholds and carriers so short inputs reach SBCs, carrier growth,
                    // shrinking and the pool.
                    cfg.sbct = 256 << (c[2] & 15);
                    cfg.mmbcs = 4096 << (c[2] >> 4 & 7);
                    cfg.smbcs = 16384 << (c[3] & 3);
                    cfg.lmbcs = cfg.smbcs << (c[3] >> 2 & 3);
                    cfg.mbcgs = 1 + (c[3] >> 4 & 7) as u64;
                    if ix > 0 && c[3] & 0x80 != 0 {
                        cfg.cp = Some('B');
                        cfg.acul = 60;
                        cfg.acnl = 1000;
                        cfg.acfml = 0;
                    }
                    cfg
                })
                .collect()
        })
        .collect();
    (globals, allocators)
}

/// Any event sequence through the carrier model: no panic, and the model's invariants hold at
/// the end (`Replay::check_invariants`). The first 4 bytes pick the configuration (strategy,
/// pool, atags, super carrier, block and carrier sizes); the rest are trace records after a
/// fixed header, so that every input reaches the replay rather than the magic check.
pub fn replay_trace(data: &[u8]) {
    let Some((c, records)) = data.split_first_chunk::<4>() else {
        return;
    };
    let mut trace = Vec::with_capacity(16 + records.len());
    trace.extend_from_slice(MAGIC);
    trace.extend_from_slice(&VERSION.to_le_bytes());
    trace.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // flags 0, header length 0
    trace.extend_from_slice(records);
    let (globals, allocators) = configs(c);
    let mut rp = Replay::new(globals, 2, allocators, 1_000_000);
    let Ok(mut reader) = TraceReader::new(&trace[..], "fz") else {
        return;
    };
    let _ = rp.run_reader(&mut reader);
    rp.check_invariants();
}

#[cfg(test)]
mod tests {
    /// The read_csv target's two checks (fuzz/fuzz_targets/read_csv.rs).
    fn read_csv(data: &[u8]) {
        super::read_csv(data);
        crate::csv::rows_agree(data);
    }

    /// Every input a fuzzer failed on, kept under fuzz/regressions/<target>/ (read_csv's also
    /// holds hand-made rows at the edges of its fast paths).
    #[test]
    fn fuzz_regressions_pass() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
        let mut n = 0;
        for (target, run) in [
            ("read_trace", super::read_trace as fn(&[u8])),
            ("replay_trace", super::replay_trace),
            ("read_csv", read_csv),
        ] {
            for f in std::fs::read_dir(root.join(target)).unwrap() {
                let path = f.unwrap().path();
                run(&std::fs::read(&path).unwrap());
                n += 1;
            }
        }
        assert!(n > 0);
    }
}
