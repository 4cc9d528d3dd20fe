//! A pool of small sets of (address, block) that answer their lowest address: the equal-size
//! free blocks of `aobf` and of the `caobf` block order past each size's lowest one
//! (`freelist::AobfTree`, docs/erts/alloc_util.md §4.2: among the blocks of the best size the
//! lowest address wins).
//!
//! What those sets see on bench_replay's trace (20 M events, aobf): 11.6 M insertions and as
//! many removals; 94 % of the removals take the lowest address (an allocation takes what `find`
//! gave), 46 % of the insertions land below every other address and the median lands within
//! the lowest two; no set held more than 127 blocks. So a set is a "run": a short array sorted
//! by descending address, lowest last, in a slab of 64-byte lines. Taking the lowest is
//! `len -= 1`; an insertion or removal moves only the entries below its address, found from
//! the low end. A run is one allocation of 2^k 16-byte entries (the first a header: length
//! and class), so a run of up to 3 blocks is one cache line, and freed runs are reused per
//! class (LIFO, so they stay warm). This replaced a `ChunkMap` per set (a 1.5 KB chunk, a
//! directory and a slot table per set: 3-4 dependent cache lines to reach the lowest entry).
//!
//! Sets past `RUN_MAX` blocks become a `ChunkMap` (pooled) so that a size with thousands of
//! free blocks (other traces) keeps O(log n + chunk) operations rather than O(n) moves; they
//! become a run again when they shrink to `RUN_BACK`.

use crate::chunks::ChunkMap;

pub const NIL: u32 = u32::MAX;

/// A set id with this bit is a `ChunkMap` (index below it), else a run (its header's entry).
const MAP: u32 = 1 << 31;
/// Run classes: class k holds 2^k entries (header included), k in MIN_K..=MAX_K.
const MIN_K: u32 = 2;
const MAX_K: u32 = 8;
/// A run holds at most this many blocks (then the set becomes a map).
const RUN_MAX: usize = (1 << MAX_K) - 1;
/// A map shrunk to this many blocks becomes a run again (a quarter of `RUN_MAX`: a set that
/// hovers around the limit does not convert back and forth).
const RUN_BACK: usize = RUN_MAX / 4;

/// Four entries: (address, block) each, or a run's header ([length | class << 32, next free]).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Line([[u64; 2]; 4]);

#[derive(Clone, Debug)]
pub struct AddrRuns {
    slab: Vec<Line>,
    /// Head of each class's free runs (linked through the header's second word).
    free: [u32; MAX_K as usize + 1],
    maps: Vec<ChunkMap<u64>>,
    spare_maps: Vec<u32>,
}

impl Default for AddrRuns {
    fn default() -> Self {
        AddrRuns {
            slab: Vec::new(),
            free: [NIL; MAX_K as usize + 1],
            maps: Vec::new(),
            spare_maps: Vec::new(),
        }
    }
}

/// A map's key of an address: higher addresses first, so the lowest is the map's last entry
/// and taking it moves no other entry.
#[inline(always)]
fn map_key(addr: u64) -> u64 {
    u64::MAX - addr
}

impl AddrRuns {
    #[inline(always)]
    fn at(&self, i: usize) -> [u64; 2] {
        self.slab[i >> 2].0[i & 3]
    }

    #[inline(always)]
    fn at_mut(&mut self, i: usize) -> &mut [u64; 2] {
        &mut self.slab[i >> 2].0[i & 3]
    }

    /// (length, class) of the run at `s`.
    #[inline(always)]
    fn header(&self, s: u32) -> (usize, u32) {
        let h = self.at(s as usize)[0];
        (h as u32 as usize, (h >> 32) as u32)
    }

    #[inline(always)]
    fn set_len(&mut self, s: u32, len: usize, k: u32) {
        self.at_mut(s as usize)[0] = len as u64 | (k as u64) << 32;
    }

    /// A free run of class k (its header not yet written).
    #[inline(always)]
    fn alloc(&mut self, k: u32) -> u32 {
        let s = self.free[k as usize];
        if s != NIL {
            self.free[k as usize] = self.at(s as usize)[1] as u32;
            return s;
        }
        let s = self.slab.len() * 4;
        assert!(s + (1 << k) < MAP as usize, "run slab past 2^31 entries");
        self.slab
            .resize(self.slab.len() + (1 << k) / 4, Line::default());
        s as u32
    }

    #[inline(always)]
    fn release(&mut self, s: u32, k: u32) {
        self.at_mut(s as usize)[1] = self.free[k as usize] as u64;
        self.free[k as usize] = s;
    }

    /// Number of blocks in set `s` (NIL: the empty set).
    pub fn len(&self, s: u32) -> usize {
        if s == NIL {
            0
        } else if s & MAP != 0 {
            self.maps[(s & !MAP) as usize].len()
        } else {
            self.header(s).0
        }
    }

    /// Add a block at an address not in set `s` (NIL: the empty set); returns the set's id,
    /// which changes when the set moves.
    #[inline(never)]
    pub fn insert(&mut self, s: u32, addr: u64, block: u32) -> u32 {
        if s == NIL {
            let s = self.alloc(MIN_K);
            self.set_len(s, 1, MIN_K);
            *self.at_mut(s as usize + 1) = [addr, block as u64];
            return s;
        }
        if s & MAP != 0 {
            self.maps[(s & !MAP) as usize].insert(map_key(addr), block as u64);
            return s;
        }
        let (len, mut k) = self.header(s);
        let mut s = s;
        if len + 1 == 1 << k {
            if k == MAX_K {
                let m = self.to_map(s, len);
                self.maps[(m & !MAP) as usize].insert(map_key(addr), block as u64);
                return m;
            }
            s = self.grow(s, len, k);
            k += 1;
        }
        // Entries s+1..=s+len by descending address: those below `addr` move up one place
        // (an insertion sort step from the low end, where most insertions land).
        let mut j = s as usize + len;
        while j > s as usize && self.at(j)[0] < addr {
            *self.at_mut(j + 1) = self.at(j);
            j -= 1;
        }
        *self.at_mut(j + 1) = [addr, block as u64];
        self.set_len(s, len + 1, k);
        s
    }

    /// Move a full run of class k into one of class k + 1.
    #[cold]
    fn grow(&mut self, s: u32, len: usize, k: u32) -> u32 {
        let t = self.alloc(k + 1);
        for i in 1..=len {
            *self.at_mut(t as usize + i) = self.at(s as usize + i);
        }
        self.release(s, k);
        t
    }

    /// Move a full run into a map; returns the map's set id.
    #[cold]
    fn to_map(&mut self, s: u32, len: usize) -> u32 {
        let m = self.spare_maps.pop().unwrap_or_else(|| {
            self.maps.push(ChunkMap::default());
            (self.maps.len() - 1) as u32
        });
        for i in 1..=len {
            let [addr, block] = self.at(s as usize + i);
            // Descending addresses: ascending keys, each appended at the map's end.
            self.maps[m as usize].insert(map_key(addr), block);
        }
        self.release(s, MAX_K);
        m | MAP
    }

    /// Move a shrunk map into a run; returns the run's id.
    #[cold]
    fn to_run(&mut self, m: u32) -> u32 {
        let map = &mut self.maps[m as usize];
        let len = map.len();
        debug_assert!(len > 0 && len < 1 << (MAX_K - 1));
        let k = MAX_K - 1;
        let s = self.alloc(k);
        for i in (1..=len).rev() {
            let map = &mut self.maps[m as usize];
            let (key, block) = map.last().expect("a map of len entries");
            map.remove(key);
            *self.at_mut(s as usize + i) = [map_key(key), block];
        }
        self.spare_maps.push(m);
        self.set_len(s, len, k);
        s
    }

    /// Remove the lowest address of a non-empty set: (address, block, the set's id or NIL
    /// when it emptied).
    #[inline(always)]
    pub fn pop_lowest(&mut self, s: u32) -> (u64, u32, u32) {
        if s & MAP != 0 {
            let map = &mut self.maps[(s & !MAP) as usize];
            let (key, block) = map.last().expect("a set is never empty");
            map.remove(key);
            let s = if map.len() <= RUN_BACK {
                self.to_run(s & !MAP)
            } else {
                s
            };
            return (map_key(key), block as u32, s);
        }
        let (len, k) = self.header(s);
        let [addr, block] = self.at(s as usize + len);
        let s = if len == 1 {
            self.release(s, k);
            NIL
        } else {
            self.set_len(s, len - 1, k);
            s
        };
        (addr, block as u32, s)
    }

    /// Remove an address present in set `s`; returns the set's id or NIL when it emptied.
    #[inline(never)]
    pub fn remove(&mut self, s: u32, addr: u64) -> u32 {
        if s & MAP != 0 {
            let map = &mut self.maps[(s & !MAP) as usize];
            map.remove(map_key(addr))
                .expect("removal of an absent address");
            return if map.len() <= RUN_BACK {
                self.to_run(s & !MAP)
            } else {
                s
            };
        }
        let (len, k) = self.header(s);
        if len == 1 {
            debug_assert_eq!(self.at(s as usize + 1)[0], addr);
            self.release(s, k);
            return NIL;
        }
        // Find it from the low end, moving the lower entries up over it.
        let mut j = s as usize + len;
        let mut carry = self.at(j);
        while carry[0] != addr {
            j -= 1;
            assert!(j > s as usize, "removal of an absent address");
            carry = std::mem::replace(self.at_mut(j), carry);
        }
        self.set_len(s, len - 1, k);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn rnd(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    /// Random streams of insertions, removals and pops on many sets at once (so runs are
    /// freed, reused and grown in between), some sets growing past `RUN_MAX` into maps and
    /// shrinking back, each checked against an ordered set of (address, block).
    #[test]
    fn runs_agree_with_ordered_sets() {
        let mut r = 99u64;
        let mut pool = AddrRuns::default();
        let nsets = 40;
        let mut ids = vec![NIL; nsets];
        let mut want: Vec<BTreeSet<(u64, u32)>> = vec![BTreeSet::new(); nsets];
        let mut next_block = 0u32;
        for step in 0..400_000u64 {
            let i = (rnd(&mut r) % nsets as u64) as usize;
            // Set i's target size: small for most, past RUN_MAX for a few, in phases.
            let phase = step / 50_000;
            let target = match (i + phase as usize) % 8 {
                0 => 2 * RUN_MAX + 40,
                1 => RUN_MAX + 3,
                2 => 40,
                _ => 4,
            };
            let n = want[i].len();
            let op = rnd(&mut r) % 8;
            if n == 0 || (n < target && op < 5) {
                // Addresses: the low end of the set often, anywhere otherwise.
                let addr = if op < 2 {
                    want[i]
                        .first()
                        .map_or(1 << 20, |&(a, _)| a)
                        .saturating_sub(8 * (1 + rnd(&mut r) % 4))
                } else {
                    8 * (rnd(&mut r) % (1 << 18))
                };
                if want[i].iter().any(|&(a, _)| a == addr) {
                    continue;
                }
                ids[i] = pool.insert(ids[i], addr, next_block);
                want[i].insert((addr, next_block));
                next_block += 1;
            } else if op < 6 {
                let (addr, block, s) = pool.pop_lowest(ids[i]);
                ids[i] = s;
                assert_eq!(Some((addr, block)), want[i].pop_first(), "step {step}");
            } else {
                let nth = (rnd(&mut r) % n as u64) as usize;
                let &(addr, block) = want[i].iter().nth(nth).unwrap();
                ids[i] = pool.remove(ids[i], addr);
                want[i].remove(&(addr, block));
            }
            assert_eq!(pool.len(ids[i]), want[i].len(), "step {step}");
            assert_eq!(ids[i] == NIL, want[i].is_empty(), "step {step}");
        }
        // Drain all: every set gives its blocks back lowest first.
        for i in 0..nsets {
            while let Some((addr, block)) = want[i].pop_first() {
                let (a, b, s) = pool.pop_lowest(ids[i]);
                assert_eq!((a, b), (addr, block));
                ids[i] = s;
            }
            assert_eq!(ids[i], NIL);
        }
        assert!(pool.maps.len() >= 2, "some sets became maps");
    }
}
