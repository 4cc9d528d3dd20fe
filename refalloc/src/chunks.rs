//! An ordered map from unique keys to u64 values, kept as a list of short sorted arrays
//! ("chunks") with each chunk's largest value beside it.
//!
//! It answers what the carrier trees of the aoff family (first key in order whose value is >= x:
//! address-ordered first fit, docs/erts/alloc_util.md §4.3) and the free-block sets of `aobf`
//! (first key >= k: smallest size, then lowest address, §4.2) ask on every alloc and free (the
//! free blocks inside an aoff carrier were a `ChunkMap` too, now src/addrset.rs). The answers are those
//! of a balanced search tree (`tree::MaxTree`, `BTreeSet`); the layout is what makes it fast:
//! a lookup is a binary search over the chunks' first keys and a count inside a chunk, an
//! insertion or removal moves at most `2 * CHUNK` entries of one chunk, and the first-fit
//! search scans the chunk maxima (contiguous u64s) and then one chunk's values, instead of a
//! pointer chase through a tree per operation. The scan of the maxima is linear in
//! `len / CHUNK`: free blocks per instance (aobf) number in the thousands.
//!
//! A chunk is one fixed-size record (keys, values and payloads as arrays) in a slab, placed in
//! order by a directory of (slot, length) pairs: reaching an entry is one load from the
//! directory and then the arrays themselves (no `Vec` header per array, no length stored in the
//! record to wait for), and a split or merge moves directory entries, never chunks. Inside a
//! chunk a key's rank is a count of the smaller keys, not a binary search: its loads do not
//! depend on one another, so the cache misses of a cold chunk overlap.

/// Target chunk length: a chunk splits at twice this and merges with a neighbour under a quarter.
/// 32 rather than 64 since the aoff sets key by u64 with a payload: shorter moves on insert and
/// removal outweigh the longer scan of the maxima (aoff, ageffcaoff, aobf 5-9% faster; 16 gains
/// little more and lengthens that scan for carriers with many free blocks).
const CHUNK: usize = 32;
/// Room of a chunk: it splits when an insertion fills it.
const CAP: usize = 2 * CHUNK;
/// Places past `CAP`: a shift moves a whole window of 8, 16 or 32 entries rather than the exact
/// count, a copy of fixed size (8 and 16: a few vector moves, no `memmove` call); what lands
/// past the entries is junk, never read. 1-3 % faster on aoff and aobf (bench CPU, 4M events,
/// alternated), for chunks half as large again.
const SLACK: usize = 32;
const ROOM: usize = CAP + SLACK;

use std::cell::Cell;

#[derive(Clone, Debug)]
struct Chunk<K, P> {
    keys: [K; ROOM],
    vals: [u64; ROOM],
    /// A payload per entry, moved with it (`()`: none, and no cost).
    pays: [P; ROOM],
}

/// Move the `m` entries at `from` to `to` (one place apart), as a window of fixed size when
/// it fits in the slack.
#[inline(always)]
fn shift<T: Copy>(a: &mut [T; ROOM], from: usize, to: usize, m: usize) {
    match m {
        0 => {}
        1..=8 => a.copy_within(from..from + 8, to),
        9..=16 => a.copy_within(from..from + 16, to),
        17..=32 => a.copy_within(from..from + 32, to),
        _ => a.copy_within(from..from + m, to),
    }
}

/// Largest of the first `n` of `v` (0 if none): four scalar running maxima (`cmov`s) over
/// groups of four, the last group's places past `n` read as 0, rather than the vector loop the
/// compiler makes (SSE2 has no unsigned 64-bit maximum: several instructions a pair) and its
/// tail loop (one more exit to mispredict).
#[inline(always)]
fn max_of(v: &[u64; ROOM], n: usize) -> u64 {
    let mut m = [0u64; 4];
    let mut j = 0;
    while j < n {
        for k in 0..4 {
            let x = if j + k < n { v[j + k] } else { 0 };
            m[k] = m[k].max(x);
        }
        j += 4;
    }
    m[0].max(m[1]).max(m[2].max(m[3]))
}

/// Largest of `v` (0 if empty), as `max_of` (the chunks' maxima: a `Vec`, so the last group
/// is a short loop).
#[inline(always)]
fn top_of(v: &[u64]) -> u64 {
    let mut m = [0u64; 4];
    let mut q = v.chunks_exact(4);
    for c in &mut q {
        for k in 0..4 {
            m[k] = m[k].max(c[k]);
        }
    }
    for (k, &x) in q.remainder().iter().enumerate() {
        m[k] = m[k].max(x);
    }
    m[0].max(m[1]).max(m[2].max(m[3]))
}

/// Where the i-th chunk is and how many entries it holds.
#[derive(Clone, Copy, Debug)]
struct Dir {
    slot: u32,
    len: u32,
}

/// Rank of `key` among sorted `keys`: how many are smaller.
#[inline(always)]
fn rank<K: Ord>(keys: &[K], key: &K) -> usize {
    keys.iter().map(|k| usize::from(k < key)).sum()
}

impl<K: Copy + Default, P: Copy + Default> Chunk<K, P> {
    fn new() -> Self {
        Chunk {
            keys: [K::default(); ROOM],
            vals: [0; ROOM],
            pays: [P::default(); ROOM],
        }
    }
    fn max(&self, n: usize) -> u64 {
        max_of(&self.vals, n)
    }
    /// Open a gap at `p` of the `n` entries and put the entry there (the chunk has room).
    #[inline(always)]
    fn insert(&mut self, n: usize, p: usize, key: K, val: u64, pay: P) {
        shift(&mut self.keys, p, p + 1, n - p);
        shift(&mut self.vals, p, p + 1, n - p);
        shift(&mut self.pays, p, p + 1, n - p);
        self.keys[p] = key;
        self.vals[p] = val;
        self.pays[p] = pay;
    }
    /// Close the entry at `p` of the `n` entries; returns its value.
    #[inline(always)]
    fn remove(&mut self, n: usize, p: usize) -> u64 {
        let val = self.vals[p];
        shift(&mut self.keys, p + 1, p, n - p - 1);
        shift(&mut self.vals, p + 1, p, n - p - 1);
        shift(&mut self.pays, p + 1, p, n - p - 1);
        val
    }
    /// Put entries [from, from + n) of `other` at `at`.
    fn copy_from(&mut self, at: usize, other: &Self, from: usize, n: usize) {
        self.keys[at..at + n].copy_from_slice(&other.keys[from..from + n]);
        self.vals[at..at + n].copy_from_slice(&other.vals[from..from + n]);
        self.pays[at..at + n].copy_from_slice(&other.pays[from..from + n]);
    }
}

/// Two distinct slots of a slab, borrowed at once.
fn two<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    debug_assert_ne!(a, b);
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &mut x[b])
    }
}

///
/// `P` is a payload carried beside each entry and handed back by the `_p` methods: the
/// address-ordered block sets key by address alone (u64, unique among a carrier's free blocks)
/// and carry the block there, rather than keying by (address, block) as a u128.
#[derive(Clone, Debug)]
pub struct ChunkMap<K, P = ()> {
    /// The chunks' records; `dir` says which slot holds the i-th chunk, `spare` which are
    /// unused.
    slots: Vec<Chunk<K, P>>,
    spare: Vec<u32>,
    dir: Vec<Dir>,
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
    /// searches. Checked against the key before use, so a stale hint costs nothing.
    hint: Cell<(u32, u32)>,
}

impl<K, P> Default for ChunkMap<K, P> {
    fn default() -> Self {
        ChunkMap {
            slots: Vec::new(),
            spare: Vec::new(),
            dir: Vec::new(),
            firsts: Vec::new(),
            maxes: Vec::new(),
            top: 0,
            len: 0,
            hint: Cell::new((u32::MAX, 0)),
        }
    }
}

impl<K: Ord + Copy + Default, P: Copy + Default> ChunkMap<K, P> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The i-th chunk in order and its length.
    #[inline(always)]
    fn chunk(&self, i: usize) -> (&Chunk<K, P>, usize) {
        let d = self.dir[i];
        (&self.slots[d.slot as usize], d.len as usize)
    }

    #[inline(always)]
    fn chunk_mut(&mut self, i: usize) -> (&mut Chunk<K, P>, usize) {
        let d = self.dir[i];
        (&mut self.slots[d.slot as usize], d.len as usize)
    }

    /// A fresh chunk's slot.
    fn new_slot(&mut self) -> u32 {
        self.spare.pop().unwrap_or_else(|| {
            self.slots.push(Chunk::new());
            (self.slots.len() - 1) as u32
        })
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
        if let Some(d) = self.dir.get(hi as usize) {
            if hp < d.len && self.slots[d.slot as usize].keys[hp as usize] == key {
                return Some((hi as usize, hp as usize));
            }
        }
        if self.dir.is_empty() {
            return None;
        }
        let i = self.chunk_for(key);
        let (c, n) = self.chunk(i);
        let p = rank(&c.keys[..n], &key);
        (p < n && c.keys[p] == key).then_some((i, p))
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
        if self.dir.is_empty() {
            let s = self.new_slot();
            self.slots[s as usize].insert(0, 0, key, val, pay);
            self.dir.push(Dir { slot: s, len: 1 });
            self.firsts.push(key);
            self.maxes.push(val);
            return;
        }
        let i = self.chunk_for(key);
        let (c, n) = self.chunk_mut(i);
        let p = rank(&c.keys[..n], &key);
        debug_assert!(p == n || c.keys[p] != key, "insert of a present key");
        c.insert(n, p, key, val, pay);
        self.dir[i].len += 1;
        if p == 0 {
            self.firsts[i] = key;
        }
        // n == 0: the kept sole chunk, whose maximum is 0 already.
        self.maxes[i] = self.maxes[i].max(val);
        if n + 1 == CAP {
            self.split(i);
        }
    }

    /// Chunk `i` (full) gives its upper half to a new chunk after it.
    fn split(&mut self, i: usize) {
        let s = self.new_slot();
        let o = self.dir[i].slot as usize;
        let (lo, hi) = two(&mut self.slots, o, s as usize);
        hi.copy_from(0, lo, CHUNK, CAP - CHUNK);
        let (lmax, hmax, hfirst) = (lo.max(CHUNK), hi.max(CAP - CHUNK), hi.keys[0]);
        self.dir[i].len = CHUNK as u32;
        self.maxes[i] = lmax;
        let d = Dir {
            slot: s,
            len: (CAP - CHUNK) as u32,
        };
        self.dir.insert(i + 1, d);
        self.firsts.insert(i + 1, hfirst);
        self.maxes.insert(i + 1, hmax);
    }

    /// Remove `key`; returns its value if it was present.
    #[inline]
    pub fn remove(&mut self, key: K) -> Option<u64> {
        let (i, p) = self.locate(key)?;
        let val = self.remove_at(i, p);
        if val == self.top {
            self.top = top_of(&self.maxes);
        }
        Some(val)
    }

    /// Remove the entry at (chunk, index); returns its value. Leaves `top` to the caller.
    #[inline(always)]
    fn remove_at(&mut self, i: usize, p: usize) -> u64 {
        self.len -= 1;
        let mi = self.maxes[i];
        let (c, n) = self.chunk_mut(i);
        let val = c.remove(n, p);
        let n = n - 1;
        if n == 0 {
            self.dir[i].len = 0;
            if self.dir.len() == 1 {
                self.maxes[0] = 0;
                return val;
            }
            let d = self.dir.remove(i);
            self.spare.push(d.slot);
            self.firsts.remove(i);
            self.maxes.remove(i);
            return val;
        }
        let first = c.keys[0];
        if val == mi {
            self.maxes[i] = c.max(n);
        }
        self.dir[i].len = n as u32;
        if p == 0 {
            self.firsts[i] = first;
        }
        if n < CHUNK / 4 {
            // Merge with a neighbour that has room, so chunks stay long.
            if i + 1 < self.dir.len() && self.dir[i + 1].len as usize <= CHUNK {
                self.merge_next(i);
            } else if i > 0 && self.dir[i - 1].len as usize <= CHUNK {
                self.merge_next(i - 1);
            }
        }
        val
    }

    /// Chunk `i` takes over chunk `i + 1`.
    fn merge_next(&mut self, i: usize) {
        let d = self.dir.remove(i + 1);
        self.firsts.remove(i + 1);
        let m = self.maxes.remove(i + 1);
        let at = self.dir[i].len as usize;
        let (dst, src) = two(&mut self.slots, self.dir[i].slot as usize, d.slot as usize);
        dst.copy_from(at, src, 0, d.len as usize);
        self.dir[i].len += d.len;
        self.spare.push(d.slot);
        self.maxes[i] = self.maxes[i].max(m);
    }

    /// Set the value of a present key.
    pub fn update(&mut self, key: K, val: u64) {
        let (i, p) = self.locate(key).expect("update of an absent key");
        let mi = self.maxes[i];
        let (c, n) = self.chunk_mut(i);
        let old = std::mem::replace(&mut c.vals[p], val);
        self.maxes[i] = if val >= mi {
            val
        } else if old == mi {
            c.max(n)
        } else {
            mi
        };
        self.retop(old, val);
    }

    /// Put `new` (with `val`) in the place of the present key `old`. `new` must sort where
    /// `old` did (no other key between them), so nothing moves: a free block that is cut or
    /// merged keeps its place in address order.
    #[inline]
    pub fn replace(&mut self, old: K, new: K, val: u64) {
        self.replace_p(old, new, val, P::default())
    }

    /// `replace` with the payload of `new`.
    #[inline]
    pub fn replace_p(&mut self, old: K, new: K, val: u64, pay: P) {
        let (i, p) = self.locate(old).expect("replace of an absent key");
        let next_first = self.firsts.get(i + 1).copied();
        let mi = self.maxes[i];
        let (c, n) = self.chunk_mut(i);
        debug_assert!(p == 0 || c.keys[p - 1] < new, "replace out of order");
        debug_assert!(p + 1 >= n || new < c.keys[p + 1], "replace out of order");
        debug_assert!(
            p + 1 < n || next_first.is_none_or(|k| new < k),
            "replace out of order"
        );
        let _ = next_first;
        c.pays[p] = pay;
        c.keys[p] = new;
        let was = std::mem::replace(&mut c.vals[p], val);
        self.maxes[i] = if val >= mi {
            val
        } else if was == mi {
            c.max(n)
        } else {
            mi
        };
        if p == 0 {
            self.firsts[i] = new;
        }
        self.retop(was, val);
    }

    /// `top` after an entry's value went from `was` to `val` (`maxes` already updated).
    #[inline(always)]
    fn retop(&mut self, was: u64, val: u64) {
        if val >= self.top {
            self.top = val;
        } else if was == self.top {
            self.top = top_of(&self.maxes);
        }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: K) -> Option<u64> {
        let (i, p) = self.locate(key)?;
        Some(self.chunk(i).0.vals[p])
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
        let (c, n) = self.chunk(i);
        let p = c.vals[..n].iter().position(|&v| v >= x)?;
        self.hint.set((i as u32, p as u32));
        Some((c.keys[p], c.vals[p], c.pays[p]))
    }

    /// First entry whose key is >= `key`.
    #[inline]
    pub fn first_from(&self, key: K) -> Option<(K, u64)> {
        if self.dir.is_empty() {
            return None;
        }
        let i = self.chunk_for(key);
        let (c, n) = self.chunk(i);
        let p = rank(&c.keys[..n], &key);
        let (c, p) = if p < n {
            (c, p)
        } else if i + 1 < self.dir.len() {
            (self.chunk(i + 1).0, 0)
        } else {
            return None;
        };
        Some((c.keys[p], c.vals[p]))
    }

    /// The entry with the smallest key.
    #[inline]
    pub fn first(&self) -> Option<(K, u64)> {
        let d = self.dir.first()?;
        if d.len == 0 {
            return None;
        }
        let c = &self.slots[d.slot as usize];
        self.hint.set((0, 0)); // aobf takes the block it found next
        Some((c.keys[0], c.vals[0]))
    }

    /// The entry with the largest key.
    #[inline]
    pub fn last(&self) -> Option<(K, u64)> {
        let i = self.dir.len().checked_sub(1)?;
        let (c, n) = self.chunk(i);
        let n = n.checked_sub(1)?;
        // aobf takes the block it found next: its removal then moves no entry.
        self.hint.set((i as u32, n as u32));
        Some((c.keys[n], c.vals[n]))
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
        let mut next = crate::tests::xorshift(4242u64);
        // Key ranges small enough to fill, split, empty and merge chunks many times.
        for step in 0..40_000u64 {
            let s = next();
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
        assert_eq!(m.dir.len() + m.spare.len(), m.slots.len());
        for i in 0..m.dir.len() {
            let (c, n) = m.chunk(i);
            assert!(n > 0 || m.dir.len() == 1);
            assert!(n < CAP);
            if n == 0 {
                continue;
            }
            assert!(c.keys[..n].windows(2).all(|w| w[0] < w[1]));
            assert_eq!(m.firsts[i], c.keys[0]);
            assert_eq!(m.maxes[i], c.max(n));
        }
        assert_eq!(m.top, m.maxes.iter().copied().max().unwrap_or(0));
    }

    /// `max_of` reads only the first `n` places: larger junk past them (what a shift leaves
    /// in a chunk's slack) never counts.
    #[test]
    fn max_of_ignores_the_places_past_n() {
        let mut next = crate::tests::xorshift(99u64);
        for n in 0..=CAP {
            let s = next();
            let mut v = [u64::MAX; ROOM];
            for (j, x) in v[..n].iter_mut().enumerate() {
                *x = (s >> (j % 40)) % 100_000;
            }
            assert_eq!(
                max_of(&v, n),
                v[..n].iter().copied().max().unwrap_or(0),
                "n {n}"
            );
        }
    }

    /// The aoff family's carrier index was a `MaxTree` (treap) before it was a `ChunkMap`: on
    /// random streams of carrier keys ((primary << 32) | carrier) both give the same first fit.
    #[test]
    fn carrier_first_fit_answers_as_the_treap_did() {
        use crate::tree::MaxTree;
        let mut m: ChunkMap<u128> = ChunkMap::default();
        let mut t = MaxTree::new();
        let mut live: BTreeMap<u128, u64> = BTreeMap::new();
        let mut next = crate::tests::xorshift(77u64);
        for step in 0..60_000u64 {
            let s = next();
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
