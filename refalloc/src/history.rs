//! A node's history from an empty VM, written as a trace (the twin of
//! `beamalloc.refalloc.tracegen.History`, which documents it): per scheduler instance a base set,
//! random churn, a spike, a drop back to the base set (keeping survivors at random, or the base
//! set and a few stragglers evenly spread over the spike), then churn after the drop that
//! replaces blocks at random or each live block once per pass. The recommender writes several
//! such histories per prediction (advice/predict.py), so they are generated here, not in Python.
use crate::trace::{Event, Op, TraceWriter};
use std::fs::File;
use std::io::BufWriter;

/// The parameters of one history (per instance, as in `tracegen.History`).
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub live: u64,
    pub peak: u64,
    pub before: u64,
    pub after: u64,
    /// true: each live block once per pass, in a random order; false: any live block.
    pub passes: bool,
    /// 0: the drop keeps `live` blocks at random. N > 0: it keeps the base set (the first
    /// `live - N` blocks made) and N stragglers evenly spread in the spike's allocation order
    /// (a queue drained but for a few messages still referred to), and the churn after the drop
    /// replaces the base set only: the stragglers stay.
    pub stragglers: u64,
    /// With stragglers: the churn after the drop rebuilds the base set whole, as a process
    /// rebuilds a list whose old version goes only at its next full garbage collection: the
    /// `after` new blocks are all made (pass after pass over the base slots) before the
    /// `after` oldest blocks of the base set and the earlier passes are freed, in the order
    /// they were made. Else one block is freed and one made at a time.
    pub rebuild: bool,
    /// Where each straggler sits in its stride of the spike, in thousandths (500: its middle):
    /// the map shows how many pin the spike's carriers, not where.
    pub phase: u64,
    pub lo: u64,
    pub hi: u64,
    pub allocator: u64,
    pub type_: u64,
    pub instances: u64,
    pub seed: u64,
}

/// splitmix64: small, deterministic for a seed, good enough to draw sizes and victims.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 11) as u128 * n as u128) >> 53) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

struct Gen<W: std::io::Write> {
    w: TraceWriter<W>,
    rng: Rng,
    p: Params,
    t: u64,
    next_id: u64,
    /// Per instance, its live blocks (id, user size).
    live: Vec<Vec<(u64, u64)>>,
}

impl<W: std::io::Write> Gen<W> {
    fn event(&mut self, op: Op, k: usize, size: u64, id: u64) -> std::io::Result<()> {
        self.t += 1000;
        let ix = k as u64 + 1;
        self.w.write(&Event {
            t_ns: self.t,
            op,
            allocator: self.p.allocator,
            instance: ix,
            type_: self.p.type_,
            size,
            id,
            new_id: 0,
            thread: ix,
        })
    }

    /// A new block of instance `k`: (id, size).
    fn alloc(&mut self, k: usize) -> std::io::Result<(u64, u64)> {
        let size = self.p.lo + self.rng.next() % (self.p.hi - self.p.lo + 1);
        let id = self.next_id;
        self.next_id += 1;
        self.event(Op::Alloc, k, size, id)?;
        Ok((id, size))
    }

    /// Free the block in slot `j` of instance `k` and put a new one there.
    fn replace(&mut self, k: usize, j: usize) -> std::io::Result<()> {
        let (id, size) = self.live[k][j];
        self.event(Op::Free, k, size, id)?;
        self.live[k][j] = self.alloc(k)?;
        Ok(())
    }
}

/// Write the history to `path`, under `header_json`; returns the event count.
pub fn write(path: &str, header_json: &str, p: Params) -> std::io::Result<u64> {
    let f = BufWriter::new(File::create(path)?);
    let n = p.instances.max(1) as usize;
    let mut g = Gen {
        w: TraceWriter::new(f, header_json)?,
        rng: Rng(p.seed),
        p: Params {
            hi: p.hi.max(p.lo),
            ..p
        },
        t: 0,
        next_id: 1,
        live: vec![Vec::new(); n],
    };
    for _ in 0..p.live {
        for k in 0..n {
            let b = g.alloc(k)?;
            g.live[k].push(b);
        }
    }
    for _ in 0..p.before {
        for k in 0..n {
            let j = g.rng.below(g.live[k].len());
            g.replace(k, j)?;
        }
    }
    for _ in p.live..p.peak {
        for k in 0..n {
            let b = g.alloc(k)?;
            g.live[k].push(b);
        }
    }
    let stragglers = p.stragglers.min(p.live) as usize;
    if stragglers == 0 {
        for _ in p.live..p.peak {
            for k in 0..n {
                let j = g.rng.below(g.live[k].len());
                let (id, size) = g.live[k].swap_remove(j);
                g.event(Op::Free, k, size, id)?;
            }
        }
    } else {
        // Slots in allocation order: the base set (its slots keep their place through the
        // churn before), then the spike; the base and every stride-th of the rest stay.
        let base = p.live as usize - stragglers;
        let mut freed: Vec<Vec<(u64, u64)>> = Vec::with_capacity(n);
        for k in 0..n {
            let all = std::mem::take(&mut g.live[k]);
            let spike = all.len() - base;
            let mut keep = vec![false; all.len()];
            keep[..base].iter_mut().for_each(|x| *x = true);
            for i in 0..stragglers {
                let at = (i as u64 * 1000 + p.phase.min(999)) * spike as u64;
                keep[base + (at / (1000 * stragglers as u64)) as usize] = true;
            }
            let (kept, mut gone): (Vec<_>, Vec<_>) =
                all.into_iter().zip(keep).partition(|&(_, k)| k);
            g.rng.shuffle(&mut gone);
            g.live[k] = kept.into_iter().map(|(b, _)| b).collect();
            freed.push(gone.into_iter().map(|(b, _)| b).collect());
        }
        for i in 0..freed.iter().map(Vec::len).max().unwrap_or(0) {
            for (k, list) in freed.iter().enumerate() {
                if let Some(&(id, size)) = list.get(i) {
                    g.event(Op::Free, k, size, id)?;
                }
            }
        }
    }
    if stragglers > 0 && p.rebuild {
        // The base set sits before the stragglers in each live list (the partition kept the
        // allocation order): the new blocks go after it, then the oldest `after` go.
        let base = p.live as usize - stragglers;
        let mut olds: Vec<Vec<(u64, u64)>> = Vec::with_capacity(n);
        for k in 0..n {
            olds.push(g.live[k][..base].to_vec());
        }
        for _ in 0..p.after {
            for (k, old) in olds.iter_mut().enumerate() {
                if base > 0 {
                    let b = g.alloc(k)?;
                    old.push(b);
                }
            }
        }
        let gone = (p.after as usize).min(olds.iter().map(Vec::len).max().unwrap_or(0));
        for i in 0..gone {
            for (k, old) in olds.iter().enumerate() {
                if let Some(&(id, size)) = old.get(i) {
                    g.event(Op::Free, k, size, id)?;
                }
            }
        }
        for (k, old) in olds.into_iter().enumerate() {
            let mut live = old[gone.min(old.len())..].to_vec();
            live.extend_from_slice(&g.live[k][base..]);
            g.live[k] = live;
        }
        let count = g.w.count;
        g.w.finish()?;
        return Ok(count);
    }
    // A pass: the live slots in a random order, each replaced once (a new block keeps the slot).
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); n];
    for _ in 0..p.after {
        for (k, pass) in order.iter_mut().enumerate() {
            // The stragglers sit at the end of the live slots and are never replaced.
            let len = g.live[k].len() - stragglers.min(g.live[k].len());
            if len == 0 {
                continue;
            }
            let j = if p.passes {
                if pass.is_empty() {
                    *pass = (0..len).collect();
                    g.rng.shuffle(pass);
                }
                pass.pop().unwrap_or(0)
            } else {
                g.rng.below(len)
            };
            g.replace(k, j)?;
        }
    }
    let count = g.w.count;
    g.w.finish()?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceReader;
    use std::collections::HashMap;

    fn params(passes: bool) -> Params {
        Params {
            live: 200,
            peak: 2_000,
            before: 100,
            after: 400,
            passes,
            stragglers: 0,
            rebuild: false,
            phase: 500,
            lo: 560,
            hi: 1_040,
            allocator: 10,
            type_: 214,
            instances: 2,
            seed: 7,
        }
    }

    /// Every free is of a block the history made on the same instance; the live set ends at
    /// `live` per instance; a pass replaces each survivor of the drop exactly once.
    #[test]
    fn a_history_frees_only_its_own_blocks_and_ends_at_the_live_set() {
        for passes in [false, true] {
            let name = format!("refalloc-history-{}-{passes}.batr", std::process::id());
            let path = std::env::temp_dir().join(name).to_str().unwrap().to_owned();
            let p = params(passes);
            let n = write(&path, "{\"schedulers\":2}", p).unwrap();
            let mut live: HashMap<u64, u64> = HashMap::new();
            let mut order = Vec::new();
            let mut r = TraceReader::open(&path).unwrap();
            r.for_each_event(|e| match e.op {
                Op::Alloc => {
                    assert!((p.lo..=p.hi).contains(&e.size));
                    assert!(live.insert(e.id, e.instance).is_none());
                }
                _ => {
                    assert_eq!(live.remove(&e.id), Some(e.instance));
                    order.push(e.id);
                }
            })
            .unwrap();
            std::fs::remove_file(&path).unwrap();
            assert_eq!(n, 2 * (2 * p.peak - p.live + 2 * p.before + 2 * p.after));
            assert_eq!(live.len() as u64, 2 * p.live);
            if passes {
                // The first pass after the drop (its first 2 x live frees) frees 2 x live
                // distinct blocks made before the drop: every survivor, once.
                let pass = &order[order.len() - 2 * p.after as usize..][..2 * p.live as usize];
                let mut ids = pass.to_vec();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), pass.len());
                assert!(ids.iter().all(|&id| id <= 2 * (p.peak + p.before)));
            }
        }
    }

    /// A stragglers drop keeps the base set and N blocks evenly spread over the spike, and the
    /// churn after it never frees a straggler.
    #[test]
    fn a_stragglers_drop_keeps_the_base_and_evenly_spread_stragglers() {
        let name = format!("refalloc-history-strag-{}.batr", std::process::id());
        let path = std::env::temp_dir().join(name).to_str().unwrap().to_owned();
        let p = Params {
            stragglers: 10,
            before: 0,
            ..params(true)
        };
        write(&path, "{\"schedulers\":2}", p).unwrap();
        let mut live: HashMap<u64, u64> = HashMap::new();
        let mut r = TraceReader::open(&path).unwrap();
        r.for_each_event(|e| match e.op {
            Op::Alloc => {
                live.insert(e.id, e.instance);
            }
            _ => {
                assert_eq!(live.remove(&e.id), Some(e.instance));
            }
        })
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(live.len() as u64, 2 * p.live);
        // Ids are made in lock step over 2 instances: the spike's run from 2 * live + 1.
        let mut spike: Vec<u64> = live.keys().copied().filter(|&id| id > 2 * p.live).collect();
        spike.retain(|&id| id <= 2 * p.peak);
        spike.sort_unstable();
        assert_eq!(spike.len(), 2 * p.stragglers as usize);
        let gaps: Vec<u64> = spike.windows(2).map(|w| w[1] - w[0]).collect();
        let stride = 2 * (p.peak - p.live + p.stragglers) / p.stragglers;
        assert!(
            gaps.iter().all(|&d| d == 1 || d.abs_diff(stride) <= 2),
            "{gaps:?}"
        );
    }

    /// A rebuilt base set: every new block is made before the first old one goes, the oldest
    /// `after` blocks go (the base set, then the earlier passes), the stragglers stay, and the
    /// live set ends at `live` per instance, the last pass's blocks and the stragglers.
    #[test]
    fn a_rebuild_makes_the_new_set_before_the_old_goes() {
        let name = format!("refalloc-history-rebuild-{}.batr", std::process::id());
        let path = std::env::temp_dir().join(name).to_str().unwrap().to_owned();
        let p = Params {
            stragglers: 10,
            rebuild: true,
            before: 0,
            ..params(true)
        };
        let base = p.live - p.stragglers;
        let p = Params {
            after: 2 * base,
            ..p
        };
        let n = write(&path, "{\"schedulers\":2}", p).unwrap();
        assert_eq!(n, 2 * (2 * p.peak - p.live + 2 * p.after));
        let mut live: HashMap<u64, u64> = HashMap::new();
        let mut events = Vec::new();
        let mut r = TraceReader::open(&path).unwrap();
        r.for_each_event(|e| {
            match e.op {
                Op::Alloc => assert!(live.insert(e.id, e.instance).is_none()),
                _ => assert_eq!(live.remove(&e.id), Some(e.instance)),
            }
            events.push((e.op, e.id));
        })
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        // after the drop: 2 x after allocations, then 2 x after frees
        let tail = &events[events.len() - 4 * p.after as usize..];
        let (made, gone) = tail.split_at(2 * p.after as usize);
        assert!(made.iter().all(|&(op, _)| op == Op::Alloc));
        assert!(gone.iter().all(|&(op, _)| op != Op::Alloc));
        // the base set (ids up to 2 x base) and the first pass go; the second pass stays
        let first_new = made[0].1;
        assert!(gone
            .iter()
            .all(|&(_, id)| id <= 2 * base || id < first_new + 2 * base));
        assert_eq!(live.len() as u64, 2 * p.live);
        assert_eq!(
            live.keys()
                .filter(|&&id| id >= first_new + 2 * base)
                .count() as u64,
            2 * base
        );
    }

    /// Phase 0 keeps the first block of each stride: the spike's first block is a straggler
    /// (binspike keeps the 0th, 2000th, ... of its burst).
    #[test]
    fn phase_zero_keeps_the_first_block_of_each_stride() {
        let name = format!("refalloc-history-phase-{}.batr", std::process::id());
        let path = std::env::temp_dir().join(name).to_str().unwrap().to_owned();
        let p = Params {
            stragglers: 10,
            phase: 0,
            before: 0,
            after: 0,
            ..params(true)
        };
        write(&path, "{\"schedulers\":2}", p).unwrap();
        let mut live: HashMap<u64, u64> = HashMap::new();
        let mut r = TraceReader::open(&path).unwrap();
        r.for_each_event(|e| match e.op {
            Op::Alloc => {
                live.insert(e.id, e.instance);
            }
            _ => {
                live.remove(&e.id);
            }
        })
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        // the base set is the first live - stragglers blocks of each instance, in lock step
        let first = 2 * (p.live - p.stragglers) + 1;
        assert!(live.contains_key(&first) && live.contains_key(&(first + 1)));
        let stride = 2 * (p.peak - p.live + p.stragglers) / p.stragglers;
        assert!(live.contains_key(&(first + stride)));
    }
}
