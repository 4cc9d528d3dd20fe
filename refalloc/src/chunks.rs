//! An ordered map from unique keys to u64 values, kept as a list of short sorted arrays
//! ("chunks") with each chunk's largest value beside it.
//!
//! It answers what the free-block sets of `aoff`, `ageffcaoff` (first key in order whose value
//! is >= x: address-ordered first fit, docs/erts/alloc_util.md §4.3) and `aobf` (first key >= k:
//! smallest size, then lowest address, §4.2) ask on every alloc and free. The answers are those
//! of a balanced search tree (`tree::MaxTree`, `BTreeSet`); the layout is what makes it fast:
//! a lookup is a binary search over the chunks' first keys and one inside a chunk, an insertion
//! or removal moves at most `2 * CHUNK` entries of one contiguous array, and the first-fit
//! search scans the chunk maxima (contiguous u64s) and then one chunk's values, instead of a
//! pointer chase through a tree per operation. The scan of the maxima is linear in
//! `len / CHUNK`: free blocks per carrier (aoff) or per instance (aobf) number in the thousands.

/// Target chunk length: a chunk splits at twice this and merges with a neighbour under a quarter.
/// 32 rather than 64 since the aoff sets key by u64 with a payload: shorter moves on insert and
/// removal outweigh the longer scan of the maxima (aoff, ageffcaoff, aobf 5-9% faster; 16 gains
/// little more and lengthens that scan for carriers with many free blocks).
const CHUNK: usize = 32;

use std::cell::Cell;

#[derive(Clone, Debug)]
struct Chunk<K, P> {
    keys: Vec<K>,
    vals: Vec<u64>,
    /// A payload per entry, moved with it (`()`: none, and no cost).
    pays: Vec<P>,
}

impl<K: Copy, P: Copy> Chunk<K, P> {
    fn new() -> Self {
        Chunk {
            keys: Vec::new(),
            vals: Vec::new(),
            pays: Vec::new(),
        }
    }
    fn max(&self) -> u64 {
        self.vals.iter().copied().max().unwrap_or(0)
    }
}

///
/// `P` is a payload carried beside each entry and handed back by the `_p` methods: the
/// address-ordered block sets key by address alone (u64, unique among a carrier's free blocks)
/// and carry the block there, rather than keying by (address, block) as a u128.
#[derive(Clone, Debug)]
pub struct ChunkMap<K, P = ()> {
    chunks: Vec<Chunk<K, P>>,
    /// First key of each chunk. Chunks are never empty, but for a sole chunk, kept with its
    /// room when the map empties (stale first key, maximum 0).
    firsts: Vec<K>,
    /// Largest value of each chunk.
    maxes: Vec<u64>,
    /// Largest value of all (0 when empty): asked after every alloc and free (the aoff
    /// family's carrier largest), rescanned from `maxes` only when the entry that held it
    /// shrinks or goes.
    top: u64,
    len: usize,
    /// (chunk, index) of the last `first_at_least` or `first` answer: the allocation that asked
    /// for it cuts or takes that very entry next (`replace`, `remove`), which then skips both
    /// binary searches. Checked against the key before use, so a stale hint costs nothing.
    hint: Cell<(u32, u32)>,
}

impl<K, P> Default for ChunkMap<K, P> {
    fn default() -> Self {
        ChunkMap {
            chunks: Vec::new(),
            firsts: Vec::new(),
            maxes: Vec::new(),
            top: 0,
            len: 0,
            hint: Cell::new((u32::MAX, 0)),
        }
    }
}

impl<K: Ord + Copy, P: Copy + Default> ChunkMap<K, P> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk that holds `key` or would: the last whose first key is <= key (0 if none).
    #[inline(always)]
    fn chunk_for(&self, key: K) -> usize {
        self.firsts.partition_point(|f| *f <= key).saturating_sub(1)
    }

    /// (chunk, index) of a present key: the hint's if it holds the key, else searched.
    #[inline(always)]
    fn locate(&self, key: K) -> Option<(usize, usize)> {
        let (hi, hp) = self.hint.get();
        if let Some(c) = self.chunks.get(hi as usize) {
            if c.keys.get(hp as usize) == Some(&key) {
                return Some((hi as usize, hp as usize));
            }
        }
        let i = self.chunk_for(key);
        let p = self.chunks.get(i)?.keys.binary_search(&key).ok()?;
        Some((i, p))
    }

    /// Insert a key that is not present.
    #[inline]
    pub fn insert(&mut self, key: K, val: u64) {
        self.insert_p(key, val, P::default())
    }

    /// `insert` with a payload.
    #[inline]
    pub fn insert_p(&mut self, key: K, val: u64, pay: P) {
        self.len += 1;
        self.top = self.top.max(val);
        if self.chunks.is_empty() {
            let mut c = Chunk::new();
            c.keys.push(key);
            c.vals.push(val);
            c.pays.push(pay);
            self.chunks.push(c);
            self.firsts.push(key);
            self.maxes.push(val);
            return;
        }
        let i = self.chunk_for(key);
        let c = &mut self.chunks[i];
        if c.keys.is_empty() {
            self.maxes[i] = 0; // the kept sole chunk
        }
        let p = c.keys.partition_point(|k| *k < key);
        debug_assert!(c.keys.get(p) != Some(&key), "insert of a present key");
        c.keys.insert(p, key);
        c.vals.insert(p, val);
        c.pays.insert(p, pay);
        if p == 0 {
            self.firsts[i] = key;
        }
        self.maxes[i] = self.maxes[i].max(val);
        if c.keys.len() >= 2 * CHUNK {
            let mut upper = Chunk::new();
            upper.keys.extend(c.keys.drain(CHUNK..));
            upper.vals.extend(c.vals.drain(CHUNK..));
            upper.pays.extend(c.pays.drain(CHUNK..));
            self.maxes[i] = c.max();
            self.firsts.insert(i + 1, upper.keys[0]);
            self.maxes.insert(i + 1, upper.max());
            self.chunks.insert(i + 1, upper);
        }
    }

    /// Remove `key`; returns its value if it was present.
    #[inline]
    pub fn remove(&mut self, key: K) -> Option<u64> {
        if self.chunks.is_empty() {
            return None;
        }
        let (i, p) = self.locate(key)?;
        let val = self.remove_at(i, p);
        if val == self.top {
            self.top = self.maxes.iter().copied().max().unwrap_or(0);
        }
        Some(val)
    }

    /// Remove the entry at (chunk, index); returns its value. Leaves `top` to the caller.
    #[inline(always)]
    fn remove_at(&mut self, i: usize, p: usize) -> u64 {
        let c = &mut self.chunks[i];
        c.keys.remove(p);
        let val = c.vals.remove(p);
        c.pays.remove(p);
        self.len -= 1;
        if c.keys.is_empty() {
            if self.chunks.len() == 1 {
                self.maxes[0] = 0;
                return val;
            }
            self.chunks.remove(i);
            self.firsts.remove(i);
            self.maxes.remove(i);
            return val;
        }
        if p == 0 {
            self.firsts[i] = c.keys[0];
        }
        if val == self.maxes[i] {
            self.maxes[i] = c.max();
        }
        if c.keys.len() < CHUNK / 4 {
            // Merge with a neighbour that has room, so chunks stay long.
            if i + 1 < self.chunks.len() && self.chunks[i + 1].keys.len() <= CHUNK {
                self.merge_next(i);
            } else if i > 0 && self.chunks[i - 1].keys.len() <= CHUNK {
                self.merge_next(i - 1);
            }
        }
        val
    }

    /// Chunk `i` takes over chunk `i + 1`.
    fn merge_next(&mut self, i: usize) {
        let next = self.chunks.remove(i + 1);
        self.firsts.remove(i + 1);
        let m = self.maxes.remove(i + 1);
        let c = &mut self.chunks[i];
        c.keys.extend_from_slice(&next.keys);
        c.vals.extend_from_slice(&next.vals);
        c.pays.extend_from_slice(&next.pays);
        self.maxes[i] = self.maxes[i].max(m);
    }

    /// Set the value of a present key.
    pub fn update(&mut self, key: K, val: u64) {
        let (i, p) = self.locate(key).expect("update of an absent key");
        let c = &mut self.chunks[i];
        let old = std::mem::replace(&mut c.vals[p], val);
        if val >= self.maxes[i] {
            self.maxes[i] = val;
        } else if old == self.maxes[i] {
            self.maxes[i] = c.max();
        }
        self.retop(old, val);
    }

    /// Put `new` (with `val`) in the place of the present key `old`. `new` must sort where
    /// `old` did (no other key between them), so nothing moves: a free block that is cut or
    /// merged keeps its place in address order (freelist.rs `AddrTree::replace`).
    #[inline]
    pub fn replace(&mut self, old: K, new: K, val: u64) {
        self.replace_p(old, new, val, P::default())
    }

    /// `replace` with the payload of `new`.
    #[inline]
    pub fn replace_p(&mut self, old: K, new: K, val: u64, pay: P) {
        let (i, p) = self.locate(old).expect("replace of an absent key");
        let c = &mut self.chunks[i];
        c.pays[p] = pay;
        debug_assert!(p == 0 || c.keys[p - 1] < new, "replace out of order");
        debug_assert!(
            c.keys.get(p + 1).is_none_or(|k| new < *k),
            "replace out of order"
        );
        debug_assert!(
            p + 1 < c.keys.len() || self.firsts.get(i + 1).is_none_or(|k| new < *k),
            "replace out of order"
        );
        c.keys[p] = new;
        let was = std::mem::replace(&mut c.vals[p], val);
        if p == 0 {
            self.firsts[i] = new;
        }
        if val >= self.maxes[i] {
            self.maxes[i] = val;
        } else if was == self.maxes[i] {
            self.maxes[i] = c.max();
        }
        self.retop(was, val);
    }

    /// `top` after an entry's value went from `was` to `val` (`maxes` already updated).
    #[inline(always)]
    fn retop(&mut self, was: u64, val: u64) {
        if val >= self.top {
            self.top = val;
        } else if was == self.top {
            self.top = self.maxes.iter().copied().max().unwrap_or(0);
        }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: K) -> Option<u64> {
        let c = self.chunks.get(self.chunk_for(key))?;
        let p = c.keys.binary_search(&key).ok()?;
        Some(c.vals[p])
    }

    /// Largest value (0 when empty).
    #[inline]
    pub fn max(&self) -> u64 {
        self.top
    }

    /// First key in order whose value is >= `x`.
    #[inline]
    pub fn first_at_least(&self, x: u64) -> Option<(K, u64)> {
        self.first_at_least_p(x).map(|(k, v, _)| (k, v))
    }

    /// `first_at_least` with the entry's payload.
    #[inline]
    pub fn first_at_least_p(&self, x: u64) -> Option<(K, u64, P)> {
        let i = self.maxes.iter().position(|&m| m >= x)?;
        let c = &self.chunks[i];
        let p = c.vals.iter().position(|&v| v >= x)?;
        self.hint.set((i as u32, p as u32));
        Some((c.keys[p], c.vals[p], c.pays[p]))
    }

    /// First entry whose key is >= `key`.
    #[inline]
    pub fn first_from(&self, key: K) -> Option<(K, u64)> {
        let i = self.chunk_for(key);
        let c = self.chunks.get(i)?;
        let p = c.keys.partition_point(|k| *k < key);
        let (c, p) = if p < c.keys.len() {
            (c, p)
        } else {
            (self.chunks.get(i + 1)?, 0)
        };
        Some((c.keys[p], c.vals[p]))
    }

    /// The entry with the smallest key.
    #[inline]
    pub fn first(&self) -> Option<(K, u64)> {
        let c = self.chunks.first()?;
        let k = *c.keys.first()?;
        self.hint.set((0, 0)); // aobf takes the block it found next
        Some((k, c.vals[0]))
    }

    /// The entry with the largest key.
    #[inline]
    pub fn last(&self) -> Option<(K, u64)> {
        let c = self.chunks.last()?;
        Some((*c.keys.last()?, *c.vals.last()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn agrees_with_an_ordered_map() {
        // The payload of key k is k * 7: it must move with its entry through every change.
        let mut m: ChunkMap<u64, u32> = ChunkMap::default();
        let mut want: BTreeMap<u64, u64> = BTreeMap::new();
        let mut s = 4242u64;
        // Key ranges small enough to fill, split, empty and merge chunks many times.
        for step in 0..40_000u64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let span = [3000, 300, 3000, 3][(step / 10_000 % 4) as usize];
            let k = s % span;
            let v = (s >> 20) % 1000;
            match (s >> 40) % 4 {
                0 | 1 if !want.contains_key(&k) => {
                    m.insert_p(k, v, k as u32 * 7);
                    want.insert(k, v);
                }
                2 if want.contains_key(&k) => {
                    m.update(k, v);
                    want.insert(k, v);
                }
                3 if want.contains_key(&k) && step % 2 == 0 => {
                    // Replace by the nearest free key at or below the next present key.
                    let hi = want
                        .range(k + 1..)
                        .next()
                        .map(|(&n, _)| n)
                        .unwrap_or(span + 8);
                    let lo = want
                        .range(..k)
                        .next_back()
                        .map(|(&n, _)| n + 1)
                        .unwrap_or(0);
                    let nk = lo + (s >> 8) % (hi - lo);
                    m.replace_p(k, nk, v, nk as u32 * 7);
                    want.remove(&k);
                    want.insert(nk, v);
                }
                _ => assert_eq!(m.remove(k), want.remove(&k), "step {step}"),
            }
            assert_eq!(m.len(), want.len());
            let q = (s >> 30) % 1000;
            let first = want.iter().find(|(_, &v)| v >= q).map(|(&k, &v)| (k, v));
            assert_eq!(m.first_at_least(q), first, "step {step}");
            if let Some((k, _, pay)) = m.first_at_least_p(q) {
                assert_eq!(pay, k as u32 * 7, "step {step}");
            }
            let from = want.range(q % span..).next().map(|(&k, &v)| (k, v));
            assert_eq!(m.first_from(q % span), from, "step {step}");
            assert_eq!(m.max(), want.values().copied().max().unwrap_or(0));
            assert_eq!(m.last(), want.iter().next_back().map(|(&k, &v)| (k, v)));
            assert_eq!(m.first(), want.iter().next().map(|(&k, &v)| (k, v)));
            assert_eq!(m.get(k), want.get(&k).copied());
        }
        for (i, c) in m.chunks.iter().enumerate() {
            assert!(!c.keys.is_empty() || m.chunks.len() == 1);
            assert!(c.keys.len() < 2 * CHUNK);
            if c.keys.is_empty() {
                continue;
            }
            assert_eq!(m.firsts[i], c.keys[0]);
            assert_eq!(m.maxes[i], c.max());
        }
        assert_eq!(m.top, m.maxes.iter().copied().max().unwrap_or(0));
    }

    /// The aoff family's carrier index was a `MaxTree` (treap) before it was a `ChunkMap`: on
    /// random streams of carrier keys ((primary << 32) | carrier) both give the same first fit.
    #[test]
    fn carrier_first_fit_answers_as_the_treap_did() {
        use crate::tree::MaxTree;
        let mut m: ChunkMap<u128> = ChunkMap::default();
        let mut t = MaxTree::new();
        let mut live: BTreeMap<u128, u64> = BTreeMap::new();
        let mut s = 77u64;
        for step in 0..60_000u64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Up to ~300 carriers, as in a large node; more churn in the second half.
            let c = s % if step < 30_000 { 40 } else { 300 };
            let key = (((s >> 12) % 1_000_000) as u128) << 32 | c as u128;
            let largest = (s >> 24) % 9_000_000 / 8 * 8;
            let present = live
                .keys()
                .find(|k| (**k & 0xffff_ffff) as u64 == c)
                .copied();
            match (present, (s >> 50) % 4) {
                (None, _) => {
                    m.insert(key, largest);
                    t.insert(key, largest);
                    live.insert(key, largest);
                }
                (Some(k), 0) => {
                    assert_eq!(m.remove(k).is_some(), t.remove(k));
                    live.remove(&k);
                }
                (Some(k), _) => {
                    m.update(k, largest);
                    t.update(k, largest);
                    live.insert(k, largest);
                }
            }
            let q = (s >> 33) % 9_000_000;
            assert_eq!(m.first_at_least(q), t.first_at_least(q), "step {step}");
            assert_eq!(m.max(), t.max(), "step {step}");
            assert_eq!(m.len(), t.len());
        }
    }
}
