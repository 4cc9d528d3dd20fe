//! Replay a trace through the model: route events to allocator instances, keep the map from
//! trace block ids to model blocks (live blocks only), age the mseg caches, sample footprint.

use crate::config::{Globals, InstanceConfig};
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
#[derive(Default)]
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
    #[inline]
    pub fn insert(&mut self, id: u64, v: (u8, u32)) -> Option<(u8, u32)> {
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
    #[inline]
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
}

/// Allocator numbers 1..=12 (alloc_util.md §1).
pub const MAX_ALLOC_NO: usize = 12;
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

pub struct Replay {
    pub env: Env,
    pub heaps: Vec<Option<Heap>>,
    live: LiveMap,
    pub anomalies: Anomalies,
    pub events: u64,
    pub series: Vec<Sample>,
    sample_every_ns: u64,
    next_sample: u64,
    next_tick: u64,
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
            series: Vec::new(),
            sample_every_ns,
            next_sample: 0,
            next_tick: CACHE_TICK_NS,
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

    pub fn apply(&mut self, ev: &Event) {
        self.events += 1;
        while ev.t_ns >= self.next_tick {
            if self.env.msegs.iter().all(|m| m.cached_segments() == 0) {
                // Nothing left to age: the remaining ticks up to this event only count
                // (a long gap in trace time must not cost a loop turn per second).
                let ticks = (ev.t_ns - self.next_tick) / CACHE_TICK_NS + 1;
                for m in self.env.msegs.iter_mut() {
                    m.stats.check_cache += ticks;
                }
                self.next_tick += ticks * CACHE_TICK_NS;
                break;
            }
            for m in self.env.msegs.iter_mut() {
                m.age(&mut self.env.space);
            }
            self.next_tick += CACHE_TICK_NS;
        }
        if self.sample_every_ns > 0 && ev.t_ns >= self.next_sample {
            self.sample(ev.t_ns);
            self.next_sample = ev.t_ns - ev.t_ns % self.sample_every_ns + self.sample_every_ns;
        }
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
            let ev = ev?;
            last = ev.t_ns;
            self.apply(&ev);
        }
        self.sample(last);
        Ok(())
    }

    /// `run` for a trace file: the reader's fast loop.
    pub fn run_reader<R: std::io::Read>(
        &mut self,
        reader: &mut TraceReader<R>,
    ) -> Result<(), TraceError> {
        let mut last = 0;
        reader.for_each_event(|ev| {
            last = ev.t_ns;
            self.apply(ev);
        })?;
        self.sample(last);
        Ok(())
    }

    pub fn live_blocks(&self) -> usize {
        self.live.len()
    }

    /// The (allocator, block) a live trace id maps to.
    pub fn block_of(&self, id: u64) -> Option<(u8, u32)> {
        self.live.get(id)
    }
}

#[cfg(test)]
mod tests {
    use super::{LiveMap, Replay};
    use crate::config::{Globals, InstanceConfig};
    use crate::trace::{Event, Op};

    #[test]
    fn long_gaps_in_trace_time_are_skipped_not_looped() {
        let cfgs = vec![InstanceConfig::default_for(10, 0)];
        let mut rp = Replay::new(Globals::default(), 1, vec![cfgs], 0);
        let ev = |t_ns, op, size, id| Event {
            t_ns,
            op,
            allocator: 10,
            instance: 0,
            type_: 214,
            size,
            id,
            new_id: 0,
            thread: 0,
        };
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
    use std::collections::HashMap;

    #[test]
    fn live_map_agrees_with_a_hash_map_for_dense_and_sparse_ids() {
        let mut m = LiveMap::default();
        let mut want: HashMap<u64, (u8, u32)> = HashMap::new();
        let mut s = 99u64;
        for i in 0..200_000u32 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
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
