//! Replay a trace through the model: route events to allocator instances, keep the map from
//! trace block ids to model blocks (live blocks only), age the mseg caches, sample footprint.

use crate::config::{BlockOrder, Globals, InstanceConfig};
use crate::heap::{Env, Heap};
use crate::trace::{Event, Op, TraceError, TraceReader};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Block ids are pointers or counters, not attacker-controlled: a multiplicative hash is
/// enough and several times cheaper than SipHash.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Trace block id -> (allocator, model block) for live blocks only.
///
/// Small ids (dense ids, as written by tracers that remap pointers and by the generators) index
/// a vector, which avoids hashing and a cache miss per event; the vector only grows to cover ids
/// below twice the live count (plus a constant), so memory stays proportional to the live set
/// however long the trace. Other ids (raw pointers, ever-growing counters) go to a hash map.
#[derive(Clone, Default)]
pub struct LiveMap {
    dense: Vec<u64>,
    sparse: IdMap<(u8, u32)>,
    len: usize,
}

const DENSE_SLACK: usize = 1 << 16;

impl LiveMap {
    fn pack(v: (u8, u32)) -> u64 {
        (((v.0 as u64) << 32) | v.1 as u64) + 1
    }
    fn unpack(x: u64) -> (u8, u32) {
        let x = x - 1;
        ((x >> 32) as u8, x as u32)
    }
    /// Insert; returns the previous value for this id (a reused id).
    #[inline(always)]
    pub fn insert(&mut self, id: u64, v: (u8, u32)) -> Option<(u8, u32)> {
        // A dense id with no sparse ids about (an id can be in `sparse` with the vector grown
        // past it since): one slot read and written.
        if self.sparse.is_empty() {
            if let Some(x) = self.dense.get_mut(id as usize) {
                let old = *x;
                *x = Self::pack(v);
                if old == 0 {
                    self.len += 1;
                    return None;
                }
                return Some(Self::unpack(old));
            }
        }
        self.insert_slow(id, v)
    }

    /// `insert` of an id past the vector or with sparse ids about.
    #[inline(never)]
    fn insert_slow(&mut self, id: u64, v: (u8, u32)) -> Option<(u8, u32)> {
        let old = self.remove(id);
        self.len += 1;
        let i = id as usize;
        if (id as u128) < (2 * self.len + DENSE_SLACK) as u128 {
            if i >= self.dense.len() {
                let want = (i + 1).max(self.dense.len() * 3 / 2);
                self.dense.resize(want.min(2 * self.len + DENSE_SLACK), 0);
            }
            self.dense[i] = Self::pack(v);
        } else {
            self.sparse.insert(id, v);
        }
        old
    }
    #[inline(always)]
    pub fn remove(&mut self, id: u64) -> Option<(u8, u32)> {
        if let Some(x) = self.dense.get_mut(id as usize) {
            if *x != 0 {
                let v = Self::unpack(*x);
                *x = 0;
                self.len -= 1;
                return Some(v);
            }
        }
        if self.sparse.is_empty() {
            return None;
        }
        self.remove_sparse(id)
    }

    #[inline(never)]
    fn remove_sparse(&mut self, id: u64) -> Option<(u8, u32)> {
        let v = self.sparse.remove(&id);
        if v.is_some() {
            self.len -= 1;
        }
        v
    }
    #[inline]
    pub fn get(&self, id: u64) -> Option<(u8, u32)> {
        match self.dense.get(id as usize) {
            Some(&x) if x != 0 => Some(Self::unpack(x)),
            _ if self.sparse.is_empty() => None,
            _ => self.sparse.get(&id).copied(),
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Ask for the slot of a dense id (a hint: see `Replay::run_reader`).
    #[inline(always)]
    fn prefetch(&self, id: u64) {
        if let Some(x) = self.dense.get(id as usize) {
            prefetch(x);
        }
    }
}

/// Ask the CPU to bring `x`'s cache line in. A hint: it never faults and changes no result.
#[inline(always)]
pub(crate) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` reads nothing architecturally; the pointer comes from a reference.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(x as *const T as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// How many events `run_reader` reads ahead of the model. An event's live-map slot is asked for
/// when it is read, its model block (found through that slot) half-way, the block's physical
/// neighbours (which a free coalesces with) a quarter before it is applied, so the cache misses
/// of many random frees overlap instead of queueing: the replay of a large live set is bound by
/// them, not by arithmetic.
const AHEAD: usize = 16;

/// What `Lookahead` asks for of an event's block, in the order it asks: the block's record,
/// then its physical neighbours' records (read from the block's). Asking for the free
/// neighbours' size-table slots as well, 2 events ahead, cost more than it hid (bf, aoffcbf).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ahead {
    Block,
    Neighbours,
}

/// Allocator numbers 1..=12 (docs/erts/alloc_util.md §1).
pub const MAX_ALLOC_NO: usize = 12;
/// Larger than any allocation a 64-bit machine can satisfy (x86_64 gives a process 128 TiB of
/// address space); refusing it up front also keeps every size computation far from overflow.
pub const MAX_BLOCK_SIZE: u64 = 1 << 47;
/// mseg_cache_check runs about once a second (§3.7).
const CACHE_TICK_NS: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub t_ns: u64,
    pub carriers_size: u64,
    pub blocks_size: u64,
    pub mseg_cached: u64,
}

/// Events the model could not apply as given (lost or foreign events in real traces).
#[derive(Clone, Debug, Default)]
pub struct Anomalies {
    pub unknown_free: u64,
    pub unknown_realloc: u64,
    pub reused_id: u64,
    pub no_allocator: u64,
}

#[derive(Clone)]
pub struct Replay {
    pub env: Env,
    pub heaps: Vec<Option<Heap>>,
    live: LiveMap,
    pub anomalies: Anomalies,
    pub events: u64,
    /// Why the replay stopped early: an event no machine could serve. Later events are ignored.
    pub failure: Option<String>,
    pub series: Vec<Sample>,
    sample_every_ns: u64,
    next_sample: u64,
    next_tick: u64,
    /// The first trace time at which `clock` has work: min(next_tick, next_sample).
    next_due: u64,
}

impl Replay {
    /// `allocators[n]` holds the instance configs of allocator number n (empty = disabled).
    pub fn new(
        globals: Globals,
        mseg_instances: usize,
        allocators: Vec<Vec<InstanceConfig>>,
        sample_every_ns: u64,
    ) -> Self {
        let mut env = Env::new(globals, mseg_instances);
        let mut heaps: Vec<Option<Heap>> = (0..=MAX_ALLOC_NO).map(|_| None).collect();
        for cfgs in allocators {
            if let Some(first) = cfgs.first() {
                let n = first.alloc_no as usize;
                if n <= MAX_ALLOC_NO {
                    heaps[n] = Some(Heap::new(&mut env, cfgs));
                }
            }
        }
        Replay {
            env,
            heaps,
            live: LiveMap::default(),
            anomalies: Anomalies::default(),
            events: 0,
            failure: None,
            series: Vec::new(),
            sample_every_ns,
            next_sample: 0,
            next_tick: CACHE_TICK_NS,
            next_due: 0,
        }
    }

    fn instance(heap: &Heap, ix: u64) -> u32 {
        // Unknown instances (e.g. dirty instances without +Mdai) fall back to 0 (§2.4).
        if (ix as usize) < heap.instances.len() {
            ix as u32
        } else {
            0
        }
    }

    #[inline(always)]
    pub fn apply(&mut self, ev: &Event) {
        if self.failure.is_some() {
            return;
        }
        self.events += 1;
        if ev.size > MAX_BLOCK_SIZE && ev.op != Op::Free {
            self.too_large(ev);
            return;
        }
        // One compare on the per-event path: the mseg ticks and footprint samples are due
        // every second / `sample_every_ns` of trace time, not every event.
        if ev.t_ns >= self.next_due {
            self.clock(ev.t_ns);
        }
        self.apply_placed(ev);
        if self.env.space.exhausted {
            self.out_of_space();
        }
    }

    #[cold]
    #[inline(never)]
    fn too_large(&mut self, ev: &Event) {
        self.failure = Some(format!(
            "event {}: {} bytes asked for, more than the 128 TiB a 64-bit process can map",
            self.events, ev.size
        ));
    }

    #[cold]
    #[inline(never)]
    fn out_of_space(&mut self) {
        self.failure = Some(format!(
            "event {}: the live carriers outgrow the 128 TiB a 64-bit process can map \
             (a real VM aborts here: \"Cannot allocate\")",
            self.events
        ));
    }

    /// Age the mseg caches (§3.7) and take the footprint samples due at `t_ns`, then set
    /// `next_due` to the first trace time that needs this again.
    #[inline(never)]
    fn clock(&mut self, t_ns: u64) {
        while t_ns >= self.next_tick {
            if self.env.msegs.iter().all(|m| m.cached_segments() == 0) {
                // Nothing left to age: the remaining ticks up to this event only count
                // (a long gap in trace time must not cost a loop turn per second).
                let ticks = (t_ns - self.next_tick) / CACHE_TICK_NS + 1;
                for m in self.env.msegs.iter_mut() {
                    m.stats.check_cache += ticks;
                }
                // Saturating: a trace's clock may run to 2^64-1 ns (584 years) and no further.
                self.next_tick = self
                    .next_tick
                    .saturating_add(ticks.saturating_mul(CACHE_TICK_NS));
                break;
            }
            for m in self.env.msegs.iter_mut() {
                m.age(&mut self.env.space);
            }
            self.next_tick = self.next_tick.saturating_add(CACHE_TICK_NS);
        }
        if self.sample_every_ns > 0 && t_ns >= self.next_sample {
            self.sample(t_ns);
            self.next_sample =
                (t_ns - t_ns % self.sample_every_ns).saturating_add(self.sample_every_ns);
        }
        self.next_due = if self.sample_every_ns > 0 {
            self.next_tick.min(self.next_sample)
        } else {
            self.next_tick
        };
    }

    #[inline(always)]
    fn apply_placed(&mut self, ev: &Event) {
        let a = ev.allocator as usize;
        let Some(heap) = self.heaps.get_mut(a).and_then(|h| h.as_mut()) else {
            self.anomalies.no_allocator += 1;
            return;
        };
        let env = &mut self.env;
        match ev.op {
            Op::Alloc => {
                let ix = Self::instance(heap, ev.instance);
                let b = heap.alloc(env, ix, ev.size);
                if let Some((pa, pb)) = self.live.insert(ev.id, (a as u8, b)) {
                    self.anomalies.reused_id += 1;
                    if let Some(h) = self.heaps[pa as usize].as_mut() {
                        h.free(&mut self.env, pb);
                    }
                }
            }
            Op::Free => match self.live.remove(ev.id) {
                Some((pa, pb)) => {
                    if let Some(h) = self.heaps[pa as usize].as_mut() {
                        h.free(env, pb);
                    }
                }
                None => self.anomalies.unknown_free += 1,
            },
            Op::Realloc => {
                let ix = Self::instance(heap, ev.instance);
                let nb = match self.live.remove(ev.id) {
                    Some((pa, pb)) if pa as usize == a => heap.realloc(env, ix, pb, ev.size),
                    Some((pa, pb)) => {
                        if let Some(h) = self.heaps[pa as usize].as_mut() {
                            h.free(env, pb);
                        }
                        let heap = self.heaps[a].as_mut().expect("checked above");
                        heap.alloc(&mut self.env, ix, ev.size)
                    }
                    None => {
                        self.anomalies.unknown_realloc += 1;
                        heap.alloc(env, ix, ev.size)
                    }
                };
                self.live.insert(ev.new_id, (a as u8, nb));
            }
        }
    }

    /// Ask for the model block a free or realloc will touch, or (`neighbours`) the blocks
    /// beside it (a hint, see AHEAD).
    #[inline(always)]
    fn prefetch_block(&self, ev: &Event, what: Ahead) {
        if ev.op == Op::Alloc {
            return;
        }
        if let Some((a, b)) = self.live.get(ev.id) {
            if let Some(Some(h)) = self.heaps.get(a as usize) {
                h.prefetch_block(b, what);
            }
        }
    }

    pub fn sample(&mut self, t_ns: u64) {
        let mut s = Sample {
            t_ns,
            ..Default::default()
        };
        for h in self.heaps.iter().flatten() {
            s.carriers_size += h.carriers_size();
            s.blocks_size += h.blocks_size();
        }
        s.mseg_cached = self.env.msegs.iter().map(|m| m.cached_size()).sum();
        self.series.push(s);
    }

    pub fn run<I: Iterator<Item = Result<Event, TraceError>>>(
        &mut self,
        events: I,
    ) -> Result<(), TraceError> {
        let mut last = 0;
        for ev in events {
            if self.failure.is_some() {
                break; // the model's failure comes first
            }
            let ev = ev?;
            last = ev.t_ns;
            self.apply(&ev);
        }
        self.finish(last, "trace")
    }

    /// `run` for a trace file: the reader's fast loop, AHEAD events ahead of the model where
    /// that pays (`Lookahead::for_model`).
    pub fn run_reader<R: std::io::Read>(
        &mut self,
        reader: &mut TraceReader<R>,
    ) -> Result<(), TraceError> {
        self.run_reader_at(reader, &[], |_| {})
    }

    /// `run_reader`, calling `at` with the model as it stands after each of `checkpoints`
    /// (event counts, ascending) is applied: one pass gives the end state of every prefix of
    /// the trace. The state after N events does not depend on what follows them, so a history
    /// that extends another by more churn (advice/predict.py) costs one replay, not one per
    /// length. With checkpoints the replay stops at the last one (the rest is not read); one
    /// past the last event is never called.
    pub fn run_reader_at<R: std::io::Read>(
        &mut self,
        reader: &mut TraceReader<R>,
        checkpoints: &[u64],
        mut at: impl FnMut(&Replay),
    ) -> Result<(), TraceError> {
        let mut next = checkpoints.iter().copied().peekable();
        // `events` counts applied events; a checkpoint 0 is the empty model.
        while next.peek() == Some(&0) {
            next.next();
            at(self);
        }
        if !checkpoints.is_empty() && next.peek().is_none() {
            return Ok(());
        }
        let mut ahead = Lookahead::for_model(self);
        let read = if checkpoints.is_empty() {
            // The plain replay: no checkpoint to look for after each event.
            reader.for_each_event_while(|ev| {
                ahead.push(self, ev);
                true
            })
        } else {
            reader.for_each_event_while(|ev| {
                let before = self.events;
                ahead.push(self, ev);
                if self.events != before && next.peek() == Some(&self.events) {
                    while next.next_if_eq(&self.events).is_some() {}
                    at(self);
                    return next.peek().is_some();
                }
                true
            })
        };
        // The events still held by the lookahead, one by one for the checkpoints among them.
        let last = ahead.drain_each(self, |rp| {
            if next.peek() == Some(&rp.events) {
                while next.next_if_eq(&rp.events).is_some() {}
                at(rp);
            }
        });
        // The model's failure came first: events after it were not applied.
        self.finish(last, reader.where_())?;
        read
    }

    pub(crate) fn finish(&mut self, last_t: u64, where_: &str) -> Result<(), TraceError> {
        if let Some(f) = &self.failure {
            return Err(TraceError(format!("{where_}: {f}")));
        }
        self.sample(last_t);
        Ok(())
    }

    /// Panics unless the model is consistent: every block inside its carrier, blocks tiling
    /// each carrier with free neighbours coalesced, carriers of all allocators disjoint, and
    /// each allocator's carriers_size and blocks_size the sums of what it holds. For the
    /// property tests and the fuzz targets.
    pub fn check_invariants(&self) {
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for h in self.heaps.iter().flatten() {
            let (mut carriers_size, mut blocks_size) = (0, 0);
            for (c, cr) in h.live_carriers() {
                carriers_size += cr.size;
                spans.push((cr.addr, cr.addr + cr.size));
                let blocks = h.carrier_blocks(c);
                let mut prev_free = false;
                for (i, &b) in blocks.iter().enumerate() {
                    let x = h.block(b);
                    assert_eq!(x.carrier, c);
                    assert!(
                        x.addr >= cr.addr && x.addr + x.size <= cr.addr + cr.size,
                        "block inside carrier"
                    );
                    if let Some(&next) = blocks.get(i + 1) {
                        assert_eq!(x.addr + x.size, h.block(next).addr, "blocks tile");
                    }
                    assert!(!(prev_free && x.free), "free neighbours are coalesced");
                    prev_free = x.free;
                    if !x.free {
                        blocks_size += x.size;
                    }
                }
            }
            assert_eq!(
                h.carriers_size(),
                carriers_size,
                "carriers_size = sum of carriers"
            );
            assert_eq!(h.blocks_size(), blocks_size, "blocks_size = sum of blocks");
            assert!(blocks_size <= carriers_size, "usage <= 1");
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "carriers overlap: {w:?}");
        }
    }

    pub fn live_blocks(&self) -> usize {
        self.live.len()
    }

    /// The (allocator, block) a live trace id maps to.
    pub fn block_of(&self, id: u64) -> Option<(u8, u32)> {
        self.live.get(id)
    }
}

/// Events on their way into the model, AHEAD of it (see AHEAD): `push` each event in trace
/// order, then `drain`; the model sees the same events in the same order as with `apply`.
///
/// Reading ahead pays only where a carrier keeps its free blocks by address (aoff,
/// ageffcaoff): a free merges with its neighbours through their addresses, the keys of the
/// carrier's address tree, so their records are wanted early. Elsewhere, with the model's data
/// in the last-level cache, the asking costs more than it hides (12 to 17 ns an event with
/// everything in cache; on 20 M events, 50 000 live, CPU: bf 1.46 -> 1.33 s, af 1.41 -> 1.38 s
/// without it, aoff 2.70 -> 3.22 s), and `for_model` turns it off until the live set outgrows
/// `READ_AHEAD_LIVE`: then only one event is held, its live-map slot asked for while the one
/// before it is applied (bf 1.15 -> 1.09 s, af 1.12 -> 1.01 s; asking for the block record as
/// well, two events held, gained nothing more).
/// Live blocks above which every strategy reads ahead: the recommender's histories (up to
/// advice/predict.py HISTORY_BLOCKS, 300,000 peak blocks; refalloc/examples/history.rs `cal1`,
/// the bench node's calibration under bf) take 120-133 ns an event reading ahead against
/// 228-255 without it; bench_replay's 50,000 live blocks are faster without.
const READ_AHEAD_LIVE: usize = 1 << 16;

pub(crate) struct Lookahead {
    ring: [Event; AHEAD],
    n: usize,
    last: u64,
    read_ahead: bool,
}

impl Lookahead {
    /// Reading ahead (for callers that do not know their model's strategies).
    pub(crate) fn new() -> Self {
        Lookahead {
            ring: [Event::default(); AHEAD],
            n: 0,
            last: 0,
            read_ahead: true,
        }
    }

    /// Reading ahead only if some instance of `rp` keeps its carriers' free blocks by address
    /// (aoff, ageffcaoff).
    pub(crate) fn for_model(rp: &Replay) -> Self {
        let read_ahead = rp.heaps.iter().flatten().any(|h| {
            h.instances
                .iter()
                .any(|i| i.cfg.strategy.block_order() == Some(BlockOrder::Addr))
        });
        Lookahead {
            read_ahead,
            ..Self::new()
        }
    }

    #[inline(always)]
    pub(crate) fn push(&mut self, rp: &mut Replay, ev: &Event) {
        self.last = ev.t_ns;
        if !self.read_ahead {
            // One event held back: its live-map slot is asked for while the one before it is
            // applied.
            rp.live.prefetch(ev.id);
            if self.n > 0 {
                rp.apply(&self.ring[0]);
            }
            self.ring[0] = *ev;
            self.n = 1;
            // Past the last-level cache reading ahead pays again, whatever the strategy: once
            // on, it stays on (the ring starts empty, so the switch changes no event's order).
            if rp.live.len() > READ_AHEAD_LIVE {
                rp.apply(&self.ring[0]);
                self.n = 0;
                self.read_ahead = true;
            }
            return;
        }
        let n = self.n;
        rp.live.prefetch(ev.id);
        // ring[(n + k) % AHEAD] holds the event read AHEAD - k pushes ago, applied k pushes on.
        if n >= AHEAD / 2 {
            rp.prefetch_block(&self.ring[(n + AHEAD / 2) % AHEAD], Ahead::Block);
        }
        if n >= 3 * AHEAD / 4 {
            rp.prefetch_block(&self.ring[(n + AHEAD / 4) % AHEAD], Ahead::Neighbours);
        }
        let slot = &mut self.ring[n % AHEAD];
        if n >= AHEAD {
            rp.apply(slot);
        }
        *slot = *ev;
        self.n = n + 1;
    }

    /// Apply the events still held; returns the time of the last event pushed.
    pub(crate) fn drain(&mut self, rp: &mut Replay) -> u64 {
        self.drain_each(rp, |_| {})
    }

    /// `drain`, calling `each` after every event it applies.
    pub(crate) fn drain_each(&mut self, rp: &mut Replay, mut each: impl FnMut(&Replay)) -> u64 {
        for i in self.n.saturating_sub(AHEAD)..self.n {
            rp.apply(&self.ring[i % AHEAD]);
            each(rp);
        }
        self.n = 0;
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::{LiveMap, Replay};
    use crate::config::{Globals, InstanceConfig};
    use crate::trace::{Event, Op};
    use std::collections::HashMap;

    /// A binary_alloc event on instance 0 (new_id is used by reallocs only).
    fn ev(t_ns: u64, op: Op, size: u64, id: u64) -> Event {
        Event {
            t_ns,
            op,
            allocator: 10,
            instance: 0,
            type_: 214,
            size,
            id,
            new_id: id + 1,
            thread: 0,
        }
    }

    #[test]
    fn long_gaps_in_trace_time_are_skipped_not_looped() {
        let cfgs = vec![InstanceConfig::default_for(10, 0)];
        let mut rp = Replay::new(Globals::default(), 1, vec![cfgs], 0);
        // A cached SBC segment is aged out at the first tick, then 10^9 ticks pass at once.
        rp.apply(&ev(0, Op::Alloc, 600_000, 1));
        rp.apply(&ev(1, Op::Free, 0, 1));
        assert_eq!(rp.env.msegs[0].cached_segments(), 1);
        rp.apply(&ev(1_000_000_000_000_000_000, Op::Alloc, 100, 2));
        let m = &rp.env.msegs[0];
        assert_eq!(m.cached_segments(), 0);
        assert_eq!(m.stats.check_cache, 1_000_000_000);
        assert_eq!(m.stats.destroy, 1);
    }

    #[test]
    fn sizes_no_machine_can_map_stop_the_replay_with_a_message() {
        for op in [Op::Alloc, Op::Realloc] {
            let cfgs = vec![InstanceConfig::default_for(10, 0)];
            let mut rp = Replay::new(Globals::default(), 1, vec![cfgs], 0);
            let events = [
                ev(0, Op::Alloc, 100, 1),
                ev(1, op, u64::MAX, 1),
                ev(2, Op::Free, 0, 1),
            ];
            let err = rp.run(events.into_iter().map(Ok)).unwrap_err().0;
            assert_eq!(
                err,
                "trace: event 2: 18446744073709551615 bytes asked for, more than the 128 TiB a \
                 64-bit process can map"
            );
            assert_eq!(rp.events, 2, "events after the failure are not applied");
            assert_eq!(rp.live_blocks(), 1);
        }
    }

    #[test]
    fn outgrowing_the_address_space_is_an_error_not_a_panic() {
        // 20 TiB blocks: top-down, two fit between the brk heap's room and the mmap base, four
        // below the brk heap, the seventh nowhere; with a super carrier, segments are carved
        // bottom-up from 64 TiB and the second runs into the brk heap.
        for (scs, fails_at) in [(0, 7), (1 << 30, 2)] {
            let cfgs = vec![InstanceConfig::default_for(10, 0)];
            let g = Globals {
                scs,
                ..Globals::default()
            };
            let mut rp = Replay::new(g, 1, vec![cfgs], 0);
            let events = (1..=9).map(|i| Ok(ev(i, Op::Alloc, 20 << 40, 10 * i)));
            let err = rp.run(events).unwrap_err().0;
            let want = format!("trace: event {fails_at}: the live carriers outgrow");
            assert!(err.starts_with(&want), "{err}");
            assert_eq!(rp.events, fails_at);
        }
    }

    /// What a checkpoint and an end state are compared on: per instance its stats and live
    /// carriers, the mseg caches, the live blocks.
    /// A model of allocator 10 on three instances under `strategy`, with 256 KiB largest
    /// multiblock carriers so that a test's few thousand blocks fill many.
    fn three_instances(strategy: crate::config::Strategy) -> Replay {
        let cfgs = (0..3)
            .map(|i| {
                let mut c = InstanceConfig::default_for(10, i);
                c.strategy = strategy;
                c.lmbcs = 256 << 10;
                c
            })
            .collect();
        Replay::new(Globals::default(), 3, vec![cfgs], 1_000_000)
    }

    fn state(rp: &Replay) -> String {
        let mut out = format!("events {} live {}\n", rp.events, rp.live_blocks());
        for h in rp.heaps.iter().flatten() {
            for i in &h.instances {
                out += &format!(
                    "{:?} {:?} {:?}\n",
                    i.stats.mbcs, i.stats.sbcs, i.stats.calls
                );
            }
            for (c, cr) in h.live_carriers() {
                out += &format!("{c} {} {} {} {}\n", cr.addr, cr.size, cr.used, cr.in_pool);
            }
        }
        for m in &rp.env.msegs {
            out += &format!("{:?} {}\n", m.stats, m.cached_segments());
        }
        out
    }

    /// A history that extends another by more churn after the drop (history.rs) holds the
    /// other as its prefix, and the model after that prefix is the other's end state, under
    /// every strategy: so one replay with checkpoints stands for all of them
    /// (advice/predict.py, the histories tried).
    #[test]
    fn a_checkpoint_is_the_end_state_of_the_prefix() {
        use crate::config::Strategy;
        use crate::history::{write, Params};
        use crate::trace::TraceReader;
        let dir = std::env::temp_dir();
        let tag = std::process::id();
        let path = |after: u64| {
            let p = dir.join(format!("refalloc-cp-{tag}-{after}.batr"));
            p.to_str().unwrap().to_owned()
        };
        let p = |after| Params {
            after,
            ..Params::small(3)
        };
        let counts: Vec<u64> = [0, 150, 300, 1_200]
            .iter()
            .map(|&a| write(&path(a), "{\"schedulers\":2}", p(a)).unwrap())
            .collect();
        // Aoff reads ahead (`Lookahead::for_model`), the others apply each event as read.
        for strategy in [
            Strategy::Bf,
            Strategy::Aoffcbf,
            Strategy::Ageffcbf,
            Strategy::Aoff,
        ] {
            let rp = || three_instances(strategy);
            let mut at = Vec::new();
            let mut long = rp();
            let mut reader = TraceReader::open(&path(1_200)).unwrap();
            long.run_reader_at(&mut reader, &counts[..3], |r| at.push(state(r)))
                .unwrap();
            assert_eq!(at.len(), 3);
            for (i, &a) in [0, 150, 300].iter().enumerate() {
                let mut short = rp();
                short
                    .run_reader(&mut TraceReader::open(&path(a)).unwrap())
                    .unwrap();
                assert_eq!(at[i], state(&short), "{strategy:?} after {a}");
            }
            // it stopped at the last checkpoint (the lookahead's events applied, no more)
            assert!(
                long.events <= counts[2] + super::AHEAD as u64,
                "{}",
                long.events
            );
        }
        for a in [0, 150, 300, 1_200] {
            std::fs::remove_file(path(a)).unwrap();
        }
    }

    /// Reading ahead or not, the model sees the same events in the same order: the end state
    /// of a trace pushed through a reading-ahead `Lookahead` is that of `run_reader`, which
    /// reads ahead only for the address-ordered strategies, under every strategy.
    #[test]
    fn reading_ahead_or_not_gives_the_same_model() {
        use super::Lookahead;
        use crate::config::Strategy;
        use crate::history::{write, Params};
        use crate::trace::TraceReader;
        // a small live set (never read ahead but for aoff), and one past READ_AHEAD_LIVE at
        // its peak (every strategy switches to reading ahead mid-stream)
        for (k, peak) in [(0, 4_000), (1, super::READ_AHEAD_LIVE as u64 + 4_000)] {
            let path =
                std::env::temp_dir().join(format!("refalloc-ra-{}-{k}.batr", std::process::id()));
            let path = path.to_str().unwrap().to_owned();
            let p = Params {
                peak,
                ..Params::small(5)
            };
            write(&path, "{\"schedulers\":2}", p).unwrap();
            for strategy in Strategy::ALL {
                let rp = || three_instances(strategy);
                let mut direct = rp();
                direct
                    .run_reader(&mut TraceReader::open(&path).unwrap())
                    .unwrap();
                let mut ahead = rp();
                let mut la = Lookahead::new();
                TraceReader::open(&path)
                    .unwrap()
                    .for_each_event_while(|ev| {
                        la.push(&mut ahead, ev);
                        true
                    })
                    .unwrap();
                la.drain(&mut ahead);
                assert!(ahead.events > 2_000);
                assert_eq!(state(&ahead), state(&direct), "{strategy:?} peak {peak}");
            }
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn live_map_agrees_with_a_hash_map_for_dense_and_sparse_ids() {
        let mut m = LiveMap::default();
        let mut want: HashMap<u64, (u8, u32)> = HashMap::new();
        let mut next = crate::tests::xorshift(99u64);
        for i in 0..200_000u32 {
            let s = next();
            // dense small ids, counters that outgrow the vector, and pointer-like ids
            let id = match s % 3 {
                0 => s % 5000,
                1 => i as u64 * 3,
                _ => 0x7f00_0000_0000 + (s % 100_000) * 16,
            };
            if s % 5 < 3 {
                assert_eq!(m.insert(id, (10, i)), want.insert(id, (10, i)));
            } else {
                assert_eq!(m.remove(id), want.remove(&id));
            }
            assert_eq!(m.len(), want.len());
        }
        assert!(m.dense.len() <= 2 * m.len() + super::DENSE_SLACK);
    }
}
