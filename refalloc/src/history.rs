//! A node's history from an empty VM, written as a trace (the twin of
//! `beamalloc.refalloc.tracegen.History`, which documents it): per scheduler instance a base set,
//! random churn, a spike, a drop back to the base set (keeping survivors at random, or the base
//! set and a few stragglers evenly spread over the spike), then churn after the drop that
//! replaces blocks at random or each live block once per pass. The recommender writes several
//! such histories per prediction (advice/predict.py), so they are generated here, not in Python.
use crate::replay::{prefetch, Lookahead, Replay};
use crate::trace::{Event, Op, TraceError, TraceWriter};
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

/// How many frees ahead the generator asks for the slot a free reads (`Gen::rest`).
const AHEAD: usize = 16;

/// splitmix64: small, deterministic for a seed, good enough to draw sizes and victims.
#[derive(Clone)]
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

/// Where a history's events go: a trace file, or a model fed as they are made (`replay`).
pub trait Sink {
    fn event(&mut self, ev: &Event) -> std::io::Result<()>;
}

impl<W: std::io::Write> Sink for TraceWriter<W> {
    fn event(&mut self, ev: &Event) -> std::io::Result<()> {
        self.write(ev)
    }
}

/// The generator's state between events: cloned where histories part (`replay`).
#[derive(Clone)]
struct Gen {
    rng: Rng,
    p: Params,
    t: u64,
    next_id: u64,
    /// Per instance, its live blocks (id, user size).
    live: Vec<Vec<(u64, u64)>>,
}

impl Gen {
    fn new(p: Params) -> Gen {
        Gen {
            rng: Rng(p.seed),
            p: Params {
                hi: p.hi.max(p.lo),
                ..p
            },
            t: 0,
            next_id: 1,
            // each list grows to the peak: made that large at once, not copied as it grows
            live: vec![
                Vec::with_capacity(p.peak.min(1 << 24) as usize);
                p.instances.max(1) as usize
            ],
        }
    }

    fn event(
        &mut self,
        s: &mut impl Sink,
        op: Op,
        k: usize,
        size: u64,
        id: u64,
    ) -> std::io::Result<()> {
        self.t += 1000;
        let ix = k as u64 + 1;
        s.event(&Event {
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
    fn alloc(&mut self, s: &mut impl Sink, k: usize) -> std::io::Result<(u64, u64)> {
        let size = self.p.lo + self.rng.next() % (self.p.hi - self.p.lo + 1);
        let id = self.next_id;
        self.next_id += 1;
        self.event(s, Op::Alloc, k, size, id)?;
        Ok((id, size))
    }

    /// Free the block in slot `j` of instance `k` and put a new one there.
    fn replace(&mut self, s: &mut impl Sink, k: usize, j: usize) -> std::io::Result<()> {
        let (id, size) = self.live[k][j];
        self.event(s, Op::Free, k, size, id)?;
        self.live[k][j] = self.alloc(s, k)?;
        Ok(())
    }

    /// The base set, the churn before the spike and the spike: the events every history of one
    /// `prefix_key` shares (the drop and what follows it draw nothing before it).
    fn prefix(&mut self, s: &mut impl Sink) -> std::io::Result<()> {
        let (p, n) = (self.p, self.live.len());
        for _ in 0..p.live {
            for k in 0..n {
                let b = self.alloc(s, k)?;
                self.live[k].push(b);
            }
        }
        for _ in 0..p.before {
            for k in 0..n {
                let j = self.rng.below(self.live[k].len());
                self.replace(s, k, j)?;
            }
        }
        for _ in p.live..p.peak {
            for k in 0..n {
                let b = self.alloc(s, k)?;
                self.live[k].push(b);
            }
        }
        Ok(())
    }

    /// The drop and the churn after it, under `self.p` (stragglers, rebuild, phase, after,
    /// passes: the parameters the prefix does not read).
    fn rest(&mut self, s: &mut impl Sink) -> std::io::Result<()> {
        let (p, n) = (self.p, self.live.len());
        let stragglers = p.stragglers.min(p.live) as usize;
        if stragglers == 0 {
            // The victims drawn up front (the draws are all this loop takes of the generator)
            // so that each one's slot is asked for AHEAD frees before it is read: the live
            // lists outgrow the caches, and a miss per free was a tenth of the calibration.
            let lens: Vec<usize> = self.live.iter().map(Vec::len).collect();
            let steps = (p.peak - p.live) as usize;
            let mut victims = Vec::with_capacity(steps * n);
            for step in 0..steps {
                for len in &lens {
                    victims.push(self.rng.below(len - step));
                }
            }
            for (i, &j) in victims.iter().enumerate() {
                if let Some(&ahead) = victims.get(i + AHEAD) {
                    if let Some(b) = self.live[(i + AHEAD) % n].get(ahead) {
                        prefetch(b);
                    }
                }
                let k = i % n;
                let (id, size) = self.live[k].swap_remove(j);
                self.event(s, Op::Free, k, size, id)?;
            }
        } else {
            // Slots in allocation order: the base set (its slots keep their place through the
            // churn before), then the spike; the base and every stride-th of the rest stay.
            let base = p.live as usize - stragglers;
            let mut freed: Vec<Vec<(u64, u64)>> = Vec::with_capacity(n);
            for k in 0..n {
                let all = std::mem::take(&mut self.live[k]);
                let spike = all.len() - base;
                let mut keep = vec![false; all.len()];
                keep[..base].iter_mut().for_each(|x| *x = true);
                for i in 0..stragglers {
                    let at = (i as u64 * 1000 + p.phase.min(999)) * spike as u64;
                    keep[base + (at / (1000 * stragglers as u64)) as usize] = true;
                }
                let (kept, mut gone): (Vec<_>, Vec<_>) =
                    all.into_iter().zip(keep).partition(|&(_, k)| k);
                self.rng.shuffle(&mut gone);
                self.live[k] = kept.into_iter().map(|(b, _)| b).collect();
                freed.push(gone.into_iter().map(|(b, _)| b).collect());
            }
            for i in 0..freed.iter().map(Vec::len).max().unwrap_or(0) {
                for (k, list) in freed.iter().enumerate() {
                    if let Some(b) = list.get(i + AHEAD) {
                        prefetch(b); // read in order, but evicted by the model since made
                    }
                    if let Some(&(id, size)) = list.get(i) {
                        self.event(s, Op::Free, k, size, id)?;
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
                olds.push(self.live[k][..base].to_vec());
            }
            for _ in 0..p.after {
                for (k, old) in olds.iter_mut().enumerate() {
                    if base > 0 {
                        let b = self.alloc(s, k)?;
                        old.push(b);
                    }
                }
            }
            let gone = (p.after as usize).min(olds.iter().map(Vec::len).max().unwrap_or(0));
            for i in 0..gone {
                for (k, old) in olds.iter().enumerate() {
                    if let Some(&(id, size)) = old.get(i) {
                        self.event(s, Op::Free, k, size, id)?;
                    }
                }
            }
            for (k, old) in olds.into_iter().enumerate() {
                let mut live = old[gone.min(old.len())..].to_vec();
                live.extend_from_slice(&self.live[k][base..]);
                self.live[k] = live;
            }
            return Ok(());
        }
        // A pass: the live slots in a random order, each replaced once (a new block keeps the slot).
        let mut order: Vec<Vec<usize>> = vec![Vec::new(); n];
        for _ in 0..p.after {
            for (k, pass) in order.iter_mut().enumerate() {
                // The stragglers sit at the end of the live slots and are never replaced.
                let len = self.live[k].len() - stragglers.min(self.live[k].len());
                if len == 0 {
                    continue;
                }
                let j = if p.passes {
                    if pass.is_empty() {
                        *pass = (0..len).collect();
                        self.rng.shuffle(pass);
                    }
                    pass.pop().unwrap_or(0)
                } else {
                    self.rng.below(len)
                };
                self.replace(s, k, j)?;
            }
        }
        Ok(())
    }
}

/// Write the history to `path`, under `header_json`; returns the event count.
pub fn write(path: &str, header_json: &str, p: Params) -> std::io::Result<u64> {
    let mut w = TraceWriter::new(BufWriter::new(File::create(path)?), header_json)?;
    let mut g = Gen::new(p);
    g.prefix(&mut w)?;
    g.rest(&mut w)?;
    let count = w.count;
    w.finish()?;
    Ok(count)
}

/// Feed the whole history to `s` (a bench measures the generator alone through a sink that
/// drops the events: refalloc/examples/history.rs).
pub fn generate(p: Params, s: &mut impl Sink) -> std::io::Result<()> {
    let mut g = Gen::new(p);
    g.prefix(s)?;
    g.rest(s)
}

/// What the prefix of a history reads: histories equal in it share their events up to the drop.
fn prefix_key(p: &Params) -> [u64; 9] {
    [
        p.live,
        p.peak,
        p.before,
        p.lo,
        p.hi.max(p.lo),
        p.allocator,
        p.type_,
        p.instances.max(1),
        p.seed,
    ]
}

/// A model fed a history's events as they are made, calling `at` after each of `checkpoints`
/// (ascending event counts, each once) as `Replay::run_reader_at` does; it stops the history
/// (a `Done` error) once the last is met.
struct Feed<'a, F: FnMut(&Replay)> {
    rp: &'a mut Replay,
    ahead: Lookahead,
    checkpoints: &'a [u64],
    next: usize,
    at: F,
}

/// The error kind a `Feed` stops the generator with: not a failure.
const DONE: std::io::ErrorKind = std::io::ErrorKind::Interrupted;

impl<F: FnMut(&Replay)> Feed<'_, F> {
    fn due(&mut self, events: u64) -> bool {
        let mut hit = false;
        while self.checkpoints.get(self.next) == Some(&events) {
            self.next += 1;
            hit = true;
        }
        hit
    }

    fn finished(&self) -> bool {
        self.next >= self.checkpoints.len()
    }

    /// The events the lookahead still holds, applied one by one for the checkpoints among them.
    fn drain(&mut self) {
        let (cps, mut next, at) = (self.checkpoints, self.next, &mut self.at);
        self.ahead.drain_each(self.rp, |rp| {
            let mut hit = false;
            while cps.get(next) == Some(&rp.events) {
                next += 1;
                hit = true;
            }
            if hit {
                at(rp);
            }
        });
        self.next = next;
    }
}

impl<F: FnMut(&Replay)> Sink for Feed<'_, F> {
    fn event(&mut self, ev: &Event) -> std::io::Result<()> {
        if self.finished() {
            return Err(DONE.into());
        }
        let before = self.rp.events;
        self.ahead.push(self.rp, ev);
        if self.rp.events != before && self.due(self.rp.events) {
            (self.at)(self.rp);
        }
        Ok(())
    }
}

/// `done` as the end of a generator fed to a model: Ok where a Feed stopped it.
fn fed(done: std::io::Result<()>) -> Result<(), TraceError> {
    match done {
        Err(e) if e.kind() != DONE => Err(TraceError(e.to_string())),
        _ => Ok(()),
    }
}

/// Run `f` on each item on up to `workers` threads; results in the items' order.
fn parallel<T: Send, R: Send>(items: Vec<T>, workers: usize, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let n = items.len();
    let workers = workers.clamp(1, n.max(1));
    if workers == 1 {
        return items.into_iter().map(f).collect();
    }
    let todo = std::sync::Mutex::new(items.into_iter().enumerate());
    let out = std::sync::Mutex::new((0..n).map(|_| None).collect::<Vec<Option<R>>>());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let item = todo.lock().unwrap().next();
                let Some((i, x)) = item else { break };
                let r = f(x);
                out.lock().unwrap()[i] = Some(r);
            });
        }
    });
    out.into_inner()
        .unwrap()
        .into_iter()
        .map(|r| r.expect("every item run"))
        .collect()
}

/// Replay histories in `model` (a fresh model; each history runs on its own copy) without
/// writing them: `at(history, model)` after each of its `checkpoints` (ascending event counts),
/// as `Replay::run_reader_at` calls it on the history's trace, which this equals event for
/// event. Histories that share their prefix (`prefix_key`: all but the drop and what follows)
/// replay it once, and each goes on from a copy of the model and the generator at its end: the
/// recommender's calibration tries five histories of one prefix (advice/predict.py). The
/// copies run on up to `workers` threads. Err: a model failure, or a checkpoint past the end of
/// its history (the first such, by history).
pub fn replay(
    model: Replay,
    histories: &[(Params, Vec<u64>)],
    workers: usize,
    at: impl Fn(usize, &Replay) + Sync,
) -> Result<(), TraceError> {
    let hs: Vec<_> = histories.iter().map(|(p, c)| (0, *p, c.clone())).collect();
    replay_under(vec![model], &hs, workers, at)
}

/// `replay` of histories each in one of `models` (`(model, params, checkpoints)`; several flag
/// sets): the passes of every model share the threads, so a calibration and a proposal's pass
/// (advice/predict.py) run side by side where each alone would leave a core idle.
pub fn replay_under(
    models: Vec<Replay>,
    histories: &[(usize, Params, Vec<u64>)],
    workers: usize,
    at: impl Fn(usize, &Replay) + Sync,
) -> Result<(), TraceError> {
    if histories
        .iter()
        .any(|(m, _, cps)| *m >= models.len() || cps.windows(2).any(|w| w[0] > w[1]))
    {
        return Err(TraceError(
            "checkpoints must be in ascending order, each history in a model given".into(),
        ));
    }
    // the groups of one model and prefix, in order of first appearance
    type Key = (usize, [u64; 9]);
    let mut groups: Vec<(Key, Vec<usize>)> = Vec::new();
    for (i, (m, p, _)) in histories.iter().enumerate() {
        let key = (*m, prefix_key(p));
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    // The prefix of each group once, with the checkpoints its members place inside it.
    let items: Vec<_> = groups
        .iter()
        .map(|((m, _), members)| (members, models[*m].clone()))
        .collect();
    drop(models);
    let prefixes = parallel(
        items,
        workers,
        |(members, mut rp): (&Vec<usize>, Replay)| {
            let mut g = Gen::new(histories[members[0]].1);
            let mut cps: Vec<u64> = members
                .iter()
                .flat_map(|&i| histories[i].2.iter().copied())
                .collect();
            cps.sort_unstable();
            cps.dedup();
            let mut feed = Feed {
                rp: &mut rp,
                ahead: Lookahead::new(),
                checkpoints: &cps,
                next: 0,
                at: |rp: &Replay| {
                    for &i in members {
                        if histories[i].2.contains(&rp.events) {
                            at(i, rp);
                        }
                    }
                },
            };
            let done = g.prefix(&mut feed);
            if !feed.finished() {
                feed.drain();
            }
            fed(done)?;
            Ok((rp, g))
        },
    );
    // A model is not Sync (its caches are Cells): each job copies its prefix under a lock, but
    // the last job of a prefix takes it: a copy is fresh pages, faulted in, then grown again
    // by the history after the fork (a proposal's one pass, 660,006 events of the bench node:
    // 0.124 s CPU with the copy, 0.097 s without). A copy equals what it copies: which job
    // takes the prefix changes no result.
    type Shared = std::sync::Mutex<(Option<(Replay, Gen)>, usize)>;
    let prefixes: Vec<Shared> = prefixes
        .into_iter()
        .map(|r| r.map(|x| std::sync::Mutex::new((Some(x), 0))))
        .collect::<Result<_, _>>()?;
    let mut jobs = Vec::new();
    for ((_, members), prefix) in groups.iter().zip(&prefixes) {
        let events = prefix
            .lock()
            .unwrap()
            .0
            .as_ref()
            .map_or(0, |(rp, _)| rp.events);
        for &i in members {
            // the checkpoints past the prefix; those within it were met in it
            let cps = &histories[i].2;
            let from = cps.partition_point(|&c| c <= events);
            if from < cps.len() {
                jobs.push((i, prefix, from));
                prefix.lock().unwrap().1 += 1;
            }
        }
    }
    let ends = parallel(
        jobs,
        workers,
        |(i, prefix, from): (usize, &Shared, usize)| {
            let (_, p, cps) = &histories[i];
            let cps = &cps[from..];
            let (mut rp, mut g) = {
                let mut shared = prefix.lock().unwrap();
                shared.1 -= 1;
                if shared.1 == 0 {
                    shared.0.take()
                } else {
                    shared.0.clone()
                }
                .expect("a prefix is taken by its last job only")
            };
            g.p = Gen::new(*p).p;
            let mut feed = Feed {
                rp: &mut rp,
                ahead: Lookahead::new(),
                checkpoints: cps,
                next: 0,
                at: |rp: &Replay| at(i, rp),
            };
            let done = g.rest(&mut feed);
            if !feed.finished() {
                feed.drain();
            }
            let met = feed.next;
            fed(done)?;
            match cps.get(met) {
                None => Ok(()),
                Some(c) => Err(TraceError(rp.failure.clone().unwrap_or_else(|| {
                    format!("history {i}: checkpoint {c} past its {} events", rp.events)
                }))),
            }
        },
    );
    ends.into_iter().collect()
}

#[cfg(test)]
impl Params {
    /// A small history for tests (history.rs's and replay.rs's): 300 blocks live, a spike to
    /// 4,000, passes, no stragglers, blocks of 560-1,040 bytes of allocator 10 on 2 instances.
    pub(crate) fn small(seed: u64) -> Params {
        Params {
            live: 300,
            peak: 4_000,
            before: 300,
            after: 2_000,
            passes: true,
            stragglers: 0,
            rebuild: false,
            phase: 500,
            lo: 560,
            hi: 1_040,
            allocator: 10,
            type_: 214,
            instances: 2,
            seed,
        }
    }
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
            ..Params::small(7)
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

    /// What a test compares of a model: every allocator's instance statistics and carriers,
    /// the mseg instances, the footprint series, the events applied.
    fn state(rp: &Replay) -> String {
        let mut out = format!(
            "events {} live {} series {:?}\n",
            rp.events,
            rp.live_blocks(),
            rp.series
        );
        for h in rp.heaps.iter().flatten() {
            for i in &h.instances {
                out += &format!("{:?}\n", i.stats);
            }
            let cs: Vec<_> = h.live_carriers().map(|(_, c)| (c.addr, c.size)).collect();
            out += &format!("{} {} {cs:?}\n", h.carriers_size(), h.blocks_size());
        }
        for m in &rp.env.msegs {
            out += &format!("{:?} {}\n", m.stats, m.cached_size());
        }
        out
    }

    /// Histories replayed without a file, forked at their shared prefix on two threads, give
    /// the model their written traces give at every checkpoint: the fork is exact.
    #[test]
    fn forked_histories_equal_their_traces_replayed() {
        use crate::config::{Globals, InstanceConfig};
        let model = || {
            let cfgs = (0..3)
                .map(|ix| InstanceConfig::default_for(10, ix))
                .collect();
            Replay::new(Globals::default(), 3, vec![cfgs], 1_000_000)
        };
        let base = Params {
            after: 500,
            ..params(true)
        };
        let hs = [
            base,
            Params {
                after: 900,
                passes: false,
                ..base
            },
            Params {
                stragglers: 10,
                phase: 250,
                ..base
            },
            Params {
                stragglers: 10,
                rebuild: true,
                after: 380,
                ..base
            },
            Params { seed: 8, ..base }, // another prefix: its own group
        ];
        let mut jobs = Vec::new();
        let mut want = Vec::new();
        for (n, p) in hs.iter().enumerate() {
            let name = format!("refalloc-history-fork-{}-{n}.batr", std::process::id());
            let path = std::env::temp_dir().join(name).to_str().unwrap().to_owned();
            let total = write(&path, "{\"schedulers\":2}", *p).unwrap();
            // one checkpoint inside the prefix, one after the drop, the end
            let cps = vec![1_000, 2 * (2 * p.peak - p.live + 2 * p.before), total];
            let mut got = Vec::new();
            let mut rp = model();
            let mut r = TraceReader::open(&path).unwrap();
            rp.run_reader_at(&mut r, &cps, |rp| got.push(state(rp)))
                .unwrap();
            std::fs::remove_file(&path).unwrap();
            want.push(got);
            jobs.push((*p, cps));
        }
        let seen = std::sync::Mutex::new(vec![Vec::new(); hs.len()]);
        replay(model(), &jobs, 2, |i, rp| {
            seen.lock().unwrap()[i].push(state(rp))
        })
        .unwrap();
        let seen = seen.into_inner().unwrap();
        for (i, (w, s)) in want.iter().zip(&seen).enumerate() {
            assert_eq!(w.len(), 3);
            assert!(w == s, "history {i} differs");
        }
        // a checkpoint past a history's end is an error, not a silent short answer
        let past = vec![(base, vec![10_000_000])];
        assert!(replay(model(), &past, 1, |_, _| {}).is_err());
    }

    /// Histories under several models in one call give what each model's own call gives, and
    /// a history naming no model given is refused.
    #[test]
    fn models_replayed_together_are_each_replayed_alone() {
        use crate::config::{Globals, InstanceConfig, Strategy};
        let model = |strategy| {
            let cfgs = (0..3)
                .map(|ix| {
                    let mut c = InstanceConfig::default_for(10, ix);
                    c.strategy = strategy;
                    c
                })
                .collect();
            Replay::new(Globals::default(), 3, vec![cfgs], 1_000_000)
        };
        let base = params(true);
        let strag = Params {
            stragglers: 10,
            rebuild: true,
            ..base
        };
        let end = |p: &Params| 2 * (2 * p.peak - p.live + 2 * p.before + 2 * p.after);
        let hs = [
            (0, base, vec![1_000, end(&base)]),
            (1, base, vec![end(&base)]),
            (1, strag, vec![500, end(&strag)]),
        ];
        let strategies = [Strategy::Bf, Strategy::Ageffcbf];
        let seen = std::sync::Mutex::new(vec![Vec::new(); hs.len()]);
        replay_under(strategies.map(model).to_vec(), &hs, 2, |i, rp| {
            seen.lock().unwrap()[i].push(state(rp))
        })
        .unwrap();
        for (i, (m, p, cps)) in hs.iter().enumerate() {
            let alone = std::sync::Mutex::new(Vec::new());
            replay(model(strategies[*m]), &[(*p, cps.clone())], 1, |_, rp| {
                alone.lock().unwrap().push(state(rp))
            })
            .unwrap();
            assert!(
                seen.lock().unwrap()[i] == alone.into_inner().unwrap(),
                "history {i}"
            );
        }
        assert!(seen.into_inner().unwrap()[1] != Vec::<String>::new());
        let stray = [(2, base, vec![1_000])];
        assert!(replay_under(strategies.map(model).to_vec(), &stray, 1, |_, _| {}).is_err());
    }
}
