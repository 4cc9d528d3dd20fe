//! Replay a trace through the model: route events to allocator instances, keep the map from
//! trace block ids to model blocks (live blocks only), age the mseg caches, sample footprint.

use crate::config::{Globals, InstanceConfig};
use crate::heap::{Env, Heap};
use crate::trace::{Event, Op, TraceError};
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
    live: IdMap<(u8, u32)>,
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
            live: IdMap::default(),
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
            Op::Free => match self.live.remove(&ev.id) {
                Some((pa, pb)) => {
                    if let Some(h) = self.heaps[pa as usize].as_mut() {
                        h.free(env, pb);
                    }
                }
                None => self.anomalies.unknown_free += 1,
            },
            Op::Realloc => {
                let ix = Self::instance(heap, ev.instance);
                let nb = match self.live.remove(&ev.id) {
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

    pub fn live_blocks(&self) -> usize {
        self.live.len()
    }
}
