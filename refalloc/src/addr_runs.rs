//! A pool of small sets of (address, block) that answer their lowest address: the equal-size
//! free blocks of `aobf` and of the `caobf` block order past each size's lowest one
//! (`freelist::AobfTree`, docs/erts/alloc_util.md §4.2: among the blocks of the best size the
//! lowest address wins).
//!
//! What those sets see on bench_replay's trace (20 M events, aobf): 11.6 M insertions and as
//! many removals; 94 % of the removals take the lowest address (an allocation takes what `find`
//! gave), 46 % of the insertions land below every other address and the median lands within
//! the lowest two; no set held more than 127 blocks. So a set is a "run": a short array sorted
//! by descending address, lowest last. Taking the lowest is `len -= 1`; an insertion or a
//! removal moves only the entries below its address, found from the low end. A run is 2^k
//! 16-byte entries in a slab of cache lines (up to 4 blocks: one line); its place, length and
//! class are packed into the set's id, which the caller keeps, so taking or adding the lowest
//! touches only the run's low end. Freed runs are reused per class (LIFO: they stay warm).
//! This replaced a pooled chunked sorted map per set (a 1.5 KB chunk, its directory and the
//! map's record: 3-4 dependent cache lines to reach the lowest entry).
//!
//! A set past `RUN_MAX` blocks becomes an ordered map (`BTreeMap`), so that a size with
//! thousands of free blocks (other traces) keeps O(log n) operations rather than O(n) moves,
//! and a run again when it shrinks to `RUN_BACK`. A set that finds the slab full (the id's line
//! offset has 21 bits: 128 MB of runs) is a map too. Maps are rare (no set of bench_replay's
//! trace reaches one), so they are the standard library's.

use std::collections::BTreeMap;

/// The empty set.
pub const NIL: u32 = u32::MAX;

/// A run's id: line offset (bits 0-20), length - 1 (bits 21-28), class - MIN_K (bits 29-31).
/// Class field 7 marks a map (its index below). NIL is none of them.
const OFF_BITS: u32 = 21;
const LEN_SHIFT: u32 = OFF_BITS;
const K_SHIFT: u32 = 29;
const MAP_TAG: u32 = 7 << K_SHIFT;
/// Run classes: class k holds 2^k entries, k in MIN_K..=MAX_K.
const MIN_K: u32 = 2;
const MAX_K: u32 = 7;
/// A run holds at most this many blocks (then the set becomes a map).
const RUN_MAX: usize = 1 << MAX_K;
/// A map shrunk to this many blocks becomes a run again (a quarter of `RUN_MAX`: a set that
/// hovers around the limit does not convert back and forth).
const RUN_BACK: usize = RUN_MAX / 4;

#[inline(always)]
fn is_map(id: u32) -> bool {
    id & MAP_TAG == MAP_TAG
}

/// (line offset, length, class) of a run's id.
#[inline(always)]
fn unpack(id: u32) -> (usize, usize, u32) {
    (
        (id & ((1 << OFF_BITS) - 1)) as usize,
        ((id >> LEN_SHIFT) & 0xff) as usize + 1,
        (id >> K_SHIFT) + MIN_K,
    )
}

#[inline(always)]
fn pack(off: usize, len: usize, k: u32) -> u32 {
    debug_assert!(off < 1 << OFF_BITS && (1..=RUN_MAX).contains(&len) && k <= MAX_K);
    off as u32 | ((len - 1) as u32) << LEN_SHIFT | (k - MIN_K) << K_SHIFT
}

#[derive(Clone, Debug)]
pub struct AddrRuns {
    /// Entries (address, block), four to a 64-byte line from `skew` on; a free run's first
    /// entry holds the next free run.
    slab: Vec<[u64; 2]>,
    /// Entries before the first line, so that lines are cache lines (kept so when the slab
    /// moves; only speed depends on it).
    skew: u8,
    /// Line offset of each class's first free run (linked through their first entry).
    free: [u32; (MAX_K - MIN_K + 1) as usize],
    /// The sets past `RUN_MAX` (rare: boxed, so that a carrier's free set stays small).
    maps: Option<Box<Maps>>,
    /// Lines the slab may hold: what an id addresses (a test sets less).
    line_limit: u32,
}

#[derive(Clone, Debug, Default)]
struct Maps {
    /// Address -> block.
    maps: Vec<BTreeMap<u64, u32>>,
    spare: Vec<u32>,
}

impl Default for AddrRuns {
    fn default() -> Self {
        AddrRuns {
            slab: Vec::new(),
            skew: 0,
            free: [NIL; (MAX_K - MIN_K + 1) as usize],
            maps: None,
            line_limit: 1 << OFF_BITS,
        }
    }
}

impl AddrRuns {
    /// Index of entry i of the run at line offset `off`.
    #[inline(always)]
    fn ix(&self, off: usize, i: usize) -> usize {
        self.skew as usize + 4 * off + i
    }

    #[inline(always)]
    fn at(&self, off: usize, i: usize) -> [u64; 2] {
        self.slab[self.ix(off, i)]
    }

    #[inline(always)]
    fn at_mut(&mut self, off: usize, i: usize) -> &mut [u64; 2] {
        let i = self.ix(off, i);
        &mut self.slab[i]
    }

    /// The entries of a run of class k.
    #[inline(always)]
    fn run_mut(&mut self, off: usize, k: u32) -> &mut [[u64; 2]] {
        let i = self.ix(off, 0);
        &mut self.slab[i..i + (1 << k)]
    }

    /// Line offset of a free run of class k, or None when the id could not address it.
    #[inline(always)]
    fn alloc(&mut self, k: u32) -> Option<usize> {
        let off = self.free[(k - MIN_K) as usize];
        if off != NIL {
            self.free[(k - MIN_K) as usize] = self.at(off as usize, 0)[0] as u32;
            return Some(off as usize);
        }
        self.new_run(k)
    }

    /// A run of class k past the last line: the slab grows (3 spare entries, room for any
    /// skew), and if it moved to another place in a cache line, its lines move with it.
    #[cold]
    fn new_run(&mut self, k: u32) -> Option<usize> {
        let off = self.slab.len().saturating_sub(3) / 4;
        let lines = (1 << k) / 4;
        if off + lines > self.line_limit as usize {
            return None;
        }
        let old = self.skew as usize;
        self.slab.resize(4 * (off + lines) + 3, [0; 2]);
        let new = (64 - self.slab.as_ptr() as usize % 64) % 64 / 16;
        if new != old {
            self.slab.copy_within(old..old + 4 * off, new);
            self.skew = new as u8;
        }
        Some(off)
    }

    #[inline(always)]
    fn release(&mut self, off: usize, k: u32) {
        *self.at_mut(off, 0) = [self.free[(k - MIN_K) as usize] as u64, 0];
        self.free[(k - MIN_K) as usize] = off as u32;
    }

    #[inline(always)]
    fn map(&mut self, id: u32) -> &mut BTreeMap<u64, u32> {
        &mut self.maps.as_mut().expect("a map's pool").maps[(id & !MAP_TAG) as usize]
    }

    /// Number of blocks in set `id`.
    pub fn len(&self, id: u32) -> usize {
        if id == NIL {
            0
        } else if is_map(id) {
            self.maps.as_ref().expect("a map's pool").maps[(id & !MAP_TAG) as usize].len()
        } else {
            unpack(id).1
        }
    }

    /// Add a block at an address below every address of set `id` (NIL: the empty set);
    /// returns the set's new id.
    #[inline(always)]
    pub fn push_lowest(&mut self, id: u32, addr: u64, block: u32) -> u32 {
        if id != NIL && !is_map(id) {
            let (off, len, k) = unpack(id);
            if len < 1 << k {
                debug_assert!(self.at(off, len - 1)[0] > addr);
                *self.at_mut(off, len) = [addr, block as u64];
                return pack(off, len + 1, k);
            }
        }
        self.insert_slow(id, addr, block)
    }

    /// Add a block at an address not in set `id` (NIL: the empty set); returns the set's new
    /// id. Most land at the low end: that is done here, the rest out of line.
    #[inline(always)]
    pub fn insert(&mut self, id: u32, addr: u64, block: u32) -> u32 {
        if id != NIL && !is_map(id) {
            let (off, len, k) = unpack(id);
            if len < 1 << k && self.at(off, len - 1)[0] > addr {
                *self.at_mut(off, len) = [addr, block as u64];
                return pack(off, len + 1, k);
            }
        }
        self.insert_slow(id, addr, block)
    }

    #[inline(never)]
    fn insert_slow(&mut self, id: u32, addr: u64, block: u32) -> u32 {
        if id == NIL {
            let Some(off) = self.alloc(MIN_K) else {
                return self.new_map(addr, block);
            };
            *self.at_mut(off, 0) = [addr, block as u64];
            return pack(off, 1, MIN_K);
        }
        if is_map(id) {
            self.map(id).insert(addr, block);
            return id;
        }
        let (mut off, len, mut k) = unpack(id);
        if len == 1 << k {
            let grown = if k < MAX_K { self.alloc(k + 1) } else { None };
            let Some(to) = grown else {
                let id = self.to_map(off, len, k);
                self.map(id).insert(addr, block);
                return id;
            };
            for i in 0..len {
                *self.at_mut(to, i) = self.at(off, i);
            }
            self.release(off, k);
            (off, k) = (to, k + 1);
        }
        // Entries 0..len by descending address: those below `addr` move up one place (an
        // insertion sort step from the low end).
        let run = self.run_mut(off, k);
        let mut j = len;
        while j > 0 && run[j - 1][0] < addr {
            run[j] = run[j - 1];
            j -= 1;
        }
        run[j] = [addr, block as u64];
        pack(off, len + 1, k)
    }

    /// A new map holding one block; returns its id.
    #[cold]
    fn new_map(&mut self, addr: u64, block: u32) -> u32 {
        let pool = self.maps.get_or_insert_default();
        let m = pool.spare.pop().unwrap_or_else(|| {
            pool.maps.push(BTreeMap::new());
            (pool.maps.len() - 1) as u32
        });
        assert!(m < !MAP_TAG, "more maps than set ids");
        pool.maps[m as usize].insert(addr, block);
        m | MAP_TAG
    }

    /// Move a run into a map; returns the map's id.
    #[cold]
    fn to_map(&mut self, off: usize, len: usize, k: u32) -> u32 {
        let [addr, block] = self.at(off, 0);
        let id = self.new_map(addr, block as u32);
        for i in 1..len {
            let [addr, block] = self.at(off, i);
            self.map(id).insert(addr, block as u32);
        }
        self.release(off, k);
        id
    }

    /// After a removal from map `id`: a run again if it shrank to `RUN_BACK` (and one can be
    /// had); returns the set's id.
    #[inline(always)]
    fn shrunk_map(&mut self, id: u32) -> u32 {
        let len = self.map(id).len();
        if len > RUN_BACK {
            return id;
        }
        self.to_run(id, len)
    }

    #[cold]
    fn to_run(&mut self, id: u32, len: usize) -> u32 {
        let k = MAX_K - 1;
        if len == 0 {
            self.maps
                .as_mut()
                .expect("a map's pool")
                .spare
                .push(id & !MAP_TAG);
            return NIL;
        }
        let Some(off) = self.alloc(k) else {
            return id;
        };
        // Lowest first: a run's entries are by descending address, lowest last.
        for i in (0..len).rev() {
            let (addr, block) = self.map(id).pop_first().expect("a map of len entries");
            *self.at_mut(off, i) = [addr, block as u64];
        }
        self.maps
            .as_mut()
            .expect("a map's pool")
            .spare
            .push(id & !MAP_TAG);
        pack(off, len, k)
    }

    /// Remove the lowest address of a non-empty set: (address, block, the set's new id, NIL
    /// when it emptied).
    #[inline(always)]
    pub fn pop_lowest(&mut self, id: u32) -> (u64, u32, u32) {
        if is_map(id) {
            return self.pop_map(id);
        }
        let (off, len, k) = unpack(id);
        let [addr, block] = self.at(off, len - 1);
        let id = if len == 1 {
            self.release(off, k);
            NIL
        } else {
            pack(off, len - 1, k)
        };
        (addr, block as u32, id)
    }

    #[cold]
    fn pop_map(&mut self, id: u32) -> (u64, u32, u32) {
        let (addr, block) = self.map(id).pop_first().expect("a set is never empty");
        (addr, block, self.shrunk_map(id))
    }

    /// Remove an address present in set `id`; returns the set's new id (NIL when it emptied).
    #[inline(never)]
    pub fn remove(&mut self, id: u32, addr: u64) -> u32 {
        if is_map(id) {
            self.map(id)
                .remove(&addr)
                .expect("removal of an absent address");
            return self.shrunk_map(id);
        }
        let (off, len, k) = unpack(id);
        if len == 1 {
            debug_assert_eq!(self.at(off, 0)[0], addr);
            self.release(off, k);
            return NIL;
        }
        // Find it from the low end, moving the lower entries up over it.
        let run = self.run_mut(off, k);
        let mut j = len - 1;
        let mut carry = run[j];
        while carry[0] != addr {
            assert!(j > 0, "removal of an absent address");
            j -= 1;
            carry = std::mem::replace(&mut run[j], carry);
        }
        pack(off, len - 1, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Random streams of insertions, removals and pops on many sets at once (so runs are
    /// freed, reused and grown in between), some sets growing past `RUN_MAX` into maps and
    /// shrinking back, each checked against an ordered set of (address, block).
    fn check(mut pool: AddrRuns, seed: u64) -> AddrRuns {
        let mut rnd = crate::tests::xorshift(seed);
        let nsets = 40;
        let mut ids = vec![NIL; nsets];
        let mut want: Vec<BTreeSet<(u64, u32)>> = vec![BTreeSet::new(); nsets];
        let mut next_block = 0u32;
        for step in 0..300_000u64 {
            let i = (rnd() % nsets as u64) as usize;
            // Set i's target size: small for most, past RUN_MAX for a few, in phases.
            let phase = step / 50_000;
            let target = match (i + phase as usize) % 8 {
                0 => 2 * RUN_MAX + 40,
                1 => RUN_MAX + 3,
                2 => 40,
                _ => 4,
            };
            let n = want[i].len();
            let op = rnd() % 8;
            if n == 0 || (n < target && op < 5) {
                // Addresses: below the set's lowest often, anywhere otherwise.
                let low = want[i].first().map(|&(a, _)| a);
                let addr = match low {
                    Some(a) if op < 2 && a > 64 => a - 8 * (1 + rnd() % 4),
                    _ => 8 * (rnd() % (1 << 18)),
                };
                if want[i].iter().any(|&(a, _)| a == addr) {
                    continue;
                }
                ids[i] = if low.is_some_and(|a| addr < a) && op < 1 {
                    pool.push_lowest(ids[i], addr, next_block)
                } else {
                    pool.insert(ids[i], addr, next_block)
                };
                want[i].insert((addr, next_block));
                next_block += 1;
            } else if op < 6 {
                let (addr, block, s) = pool.pop_lowest(ids[i]);
                ids[i] = s;
                assert_eq!(Some((addr, block)), want[i].pop_first(), "step {step}");
            } else {
                let nth = (rnd() % n as u64) as usize;
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
        pool
    }

    #[test]
    fn runs_agree_with_ordered_sets() {
        // A carrier's free set (`heap::FreeSet`) is as large as its largest kind.
        assert!(std::mem::size_of::<crate::freelist::AobfTree>() <= 144);
        let pool = check(AddrRuns::default(), 99);
        assert!(pool.maps.unwrap().maps.len() >= 2, "some sets became maps");
    }

    /// With a slab that fills up, sets that cannot have a run are maps.
    #[test]
    fn runs_agree_with_ordered_sets_when_the_slab_is_full() {
        let pool = AddrRuns {
            line_limit: 100,
            ..AddrRuns::default()
        };
        let pool = check(pool, 7);
        assert!(pool.slab.len() <= 4 * 100 + 3, "lines past the limit");
        assert!(
            pool.maps.unwrap().maps.len() > 8,
            "sets the slab had no room for became maps"
        );
    }
}
