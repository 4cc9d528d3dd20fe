//! The free blocks of one address-ordered carrier (`aoff`, `ageffcaoff`: the lowest-addressed
//! free block whose size fits, docs/erts/alloc_util.md §4.3), kept so that first fit is a fixed
//! number of steps.
//!
//! The carrier's address range is cut into buckets of equal size (up to 4,096; 2 KB in an 8 MB
//! carrier). A tree of maxima over them, 32 u16 to a cache line (sizes in 8-byte units,
//! saturated at 256 KB; the few blocks past it are also listed in `big`, which keeps the
//! largest size and first fits past the saturation exact), holds the largest free block that
//! starts in each bucket, each line of buckets, and so on up to one line. First fit descends it
//! from the top: per level one line, the first entry that fits found by compares and a mask,
//! with no data-dependent branch, where a sorted structure's search loops mispredict their exit
//! (the `ChunkMap` this replaces: ~1.5 of aoff's 10 mispredictions an event). Inside a bucket
//! the free blocks are a list in address order through the block records' `lprev`/`lnext`
//! (unused by address-ordered carriers), so a link or unlink never shifts an array; on
//! bench_replay's trace (8 MB carriers, ~1,000 free blocks each) a bucket holds ~0.25 free
//! blocks, so its walks are short.

use crate::freelist::{list_insert_after, list_push_head, list_remove, Block, NIL};

/// At most 2^MAX_DEPTH buckets per carrier (4,096: 2 KB buckets in an 8 MB carrier).
const MAX_DEPTH: u32 = 12;
/// At least 32 buckets (one line); buckets span at least 2^MIN_SHIFT bytes.
const MIN_DEPTH: u32 = 5;
const MIN_SHIFT: u32 = 8;
/// Fan-out of the tree of maxima: one line of 32 u16.
const FAN: usize = 32;
/// Levels of the tree at most: FAN^LEVELS >= 2^MAX_DEPTH buckets.
const LEVELS: usize = 3;

/// Thirty-two maxima, one cache line: a descent step reads one line. Entries are sizes in
/// 8-byte units (block sizes are multiples of 8, docs/erts/alloc_util.md §3.1), saturated at
/// `SAT`, so SSE2's signed 16-bit compare and maximum serve.
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
struct Line([u16; FAN]);

impl Line {
    /// Index of the first entry >= `x` (32 if none): four compares, two packs, two masks,
    /// no branch.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn first_at_least(&self, x: u16) -> usize {
        use std::arch::x86_64::*;
        let p = self.0.as_ptr() as *const __m128i;
        // SAFETY: SSE2 is part of every x86_64 target; the four loads read this line's 64
        // aligned bytes.
        let m = unsafe {
            let y = _mm_set1_epi16(x as i16 - 1); // v >= x: v > x - 1 (x >= 1)
            let q = |j: usize| _mm_cmpgt_epi16(_mm_load_si128(p.add(j)), y);
            let a = _mm_movemask_epi8(_mm_packs_epi16(q(0), q(1))) as u32;
            let b = _mm_movemask_epi8(_mm_packs_epi16(q(2), q(3))) as u32;
            u64::from(a | b << 16)
        };
        (m | 1 << FAN).trailing_zeros() as usize
    }
    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn first_at_least(&self, x: u16) -> usize {
        self.0.iter().position(|&v| v >= x).unwrap_or(FAN)
    }
    /// Largest entry (SSE2's signed 16-bit maximum: entries are at most `SAT`).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn max(&self) -> u16 {
        use std::arch::x86_64::*;
        let p = self.0.as_ptr() as *const __m128i;
        // SAFETY: as in `first_at_least`.
        unsafe {
            let q = |j: usize| _mm_load_si128(p.add(j));
            let m = _mm_max_epi16(_mm_max_epi16(q(0), q(1)), _mm_max_epi16(q(2), q(3)));
            let m = _mm_max_epi16(m, _mm_shuffle_epi32::<0b0100_1110>(m));
            let m = _mm_max_epi16(m, _mm_shuffle_epi32::<0b1011_0001>(m));
            let m = _mm_max_epi16(m, _mm_shufflelo_epi16::<0b1011_0001>(m));
            _mm_cvtsi128_si32(m) as u16
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn max(&self) -> u16 {
        self.0.iter().copied().max().unwrap_or(0)
    }
}

/// The heads of a leaf line's 32 buckets (two cache lines).
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Heads([u32; FAN]);

/// The tree's entries saturate here (blocks of `BIG` bytes and more: `big` keeps them exact).
const SAT: u16 = i16::MAX as u16;
const BIG: u64 = SAT as u64 * 8;

/// A size as the tree keeps it: 8-byte units, saturated.
#[inline(always)]
fn sat(s: u64) -> u16 {
    debug_assert!(s % 8 == 0, "block size {s} not a multiple of 8");
    (s >> 3).min(u64::from(SAT)) as u16
}

/// What `replace` and `unlink_key` need of a linked block before its record changes.
#[derive(Clone, Copy, Debug)]
pub struct AddrKey {
    addr: u64,
    b: u32,
}

#[derive(Clone, Debug, Default)]
pub struct AddrSet {
    /// Address of bucket 0's start (the first block linked: a fresh carrier's sole free block).
    base: u64,
    /// Bucket k holds the free blocks that start in [base + k << shift, base + (k+1) << shift);
    /// addresses past the last bucket go to it (still in order, so still exact).
    shift: u32,
    /// Lowest-addressed free block of each bucket (NIL: none).
    /// 32 to a line, in lines like the tree's leaves.
    heads: Vec<Heads>,
    /// Buckets - 1.
    last: u32,
    /// The tree of maxima, level by level from the buckets up: level 0 is the buckets' largest
    /// free sizes, an entry of level l + 1 the largest of a line of level l; the top level is
    /// one line. `off[l]` is level l's first line, for the `levels` levels (at most 3: 32^3
    /// buckets); an array in the set itself, so a descent step does not load it from the heap.
    lines: Vec<Line>,
    off: [u32; LEVELS],
    levels: u32,
    /// Largest free size (0 when empty), exact where the tree saturates.
    top: u64,
    /// The linked blocks of `BIG` bytes or more, whose entries saturate: few (at most one per
    /// 256 KB of the carrier), read for `top` and first fits past the saturation.
    big: Vec<u32>,
}

impl AddrSet {
    /// The key of block `b` while it sits at `addr`.
    #[inline(always)]
    pub fn key_at(addr: u64, b: u32) -> AddrKey {
        AddrKey { addr, b }
    }

    /// Buckets for `span` bytes from `base`.
    fn init(&mut self, base: u64, span: u64) {
        let bits = 64 - span.max(1).leading_zeros(); // span < 2^bits
        let depth = bits.saturating_sub(MIN_SHIFT).clamp(MIN_DEPTH, MAX_DEPTH);
        self.base = base;
        self.shift = bits.saturating_sub(depth);
        let nb = 1usize << depth;
        self.heads = vec![Heads([NIL; FAN]); nb / FAN];
        self.last = nb as u32 - 1;
        let (mut n, mut at) = (nb.div_ceil(FAN), 0);
        self.levels = 0;
        loop {
            self.off[self.levels as usize] = at as u32;
            self.levels += 1;
            at += n;
            if n == 1 {
                break;
            }
            n = n.div_ceil(FAN);
        }
        self.lines = vec![Line::default(); at];
    }

    #[inline(always)]
    fn bucket(&self, addr: u64) -> usize {
        let k = addr.saturating_sub(self.base) >> self.shift;
        k.min(u64::from(self.last)) as usize
    }

    /// Bucket `k`'s first block.
    #[inline(always)]
    fn head(&self, k: usize) -> u32 {
        self.heads[k / FAN].0[k % FAN]
    }

    #[inline(always)]
    fn head_mut(&mut self, k: usize) -> &mut u32 {
        &mut self.heads[k / FAN].0[k % FAN]
    }

    /// Bucket `k`'s entry in the tree.
    #[inline(always)]
    fn leaf(&self, k: usize) -> u16 {
        self.lines[k / FAN].0[k % FAN]
    }

    /// Largest free size (0 when empty).
    #[inline(always)]
    pub fn largest(&self) -> u64 {
        self.top
    }

    /// Bucket `k`'s largest size grew to at least `s`: raise it and its ancestors.
    #[inline(always)]
    fn raise(&mut self, k: usize, s: u64) {
        self.top = self.top.max(s);
        let s = sat(s);
        let mut i = k;
        for l in 0..self.levels as usize {
            let e = &mut self.lines[self.off[l] as usize + i / FAN].0[i % FAN];
            if *e >= s {
                return; // so are the ones above
            }
            *e = s;
            i /= FAN;
        }
    }

    /// Recompute bucket `k`'s largest size from its list, then its ancestors.
    #[inline(always)]
    fn rescan(&mut self, bl: &[Block], k: usize) {
        let mut m = 0;
        let mut h = self.head(k);
        while h != NIL {
            let x = &bl[h as usize];
            m = m.max(x.size);
            h = x.lnext;
        }
        // A rescan only lowers (a block left or shrank): up to the first entry that keeps its
        // value, or whose changed child was not the largest of its line. Below the saturation
        // only, where equal entries may hide a change of the exact largest size.
        let e = &mut self.lines[k / FAN].0[k % FAN];
        let mut was = *e;
        debug_assert!(sat(m) <= was, "rescan raised a bucket");
        if was == sat(m) && was < SAT {
            return;
        }
        *e = sat(m);
        let mut i = k / FAN; // line of level l - 1 just changed
        for l in 1..self.levels as usize {
            let at = self.off[l] as usize + i / FAN;
            let p = self.lines[at].0[i % FAN];
            if was < p {
                return;
            }
            let v = self.lines[self.off[l - 1] as usize + i].max();
            if p == v && v < SAT {
                return;
            }
            self.lines[at].0[i % FAN] = v;
            was = p;
            i /= FAN;
        }
        // The top line's entry `was` lowered: unless it was the largest, so is the top line's.
        if was < SAT && u64::from(was) * 8 < self.top {
            return;
        }
        let top = self.lines[self.off[self.levels as usize - 1] as usize].max();
        self.top = if top < SAT {
            u64::from(top) * 8
        } else {
            self.big_max(bl)
        };
    }

    /// The largest size of the blocks whose entries saturate.
    #[cold]
    fn big_max(&self, bl: &[Block]) -> u64 {
        self.big
            .iter()
            .map(|&b| bl[b as usize].size)
            .max()
            .unwrap_or(0)
    }

    /// Block `b` leaves `big` if it is there (its size may have changed since it was linked).
    #[inline(always)]
    fn big_remove(&mut self, b: u32) {
        if !self.big.is_empty() {
            self.big_remove_slow(b);
        }
    }

    #[cold]
    fn big_remove_slow(&mut self, b: u32) {
        if let Some(p) = self.big.iter().position(|&x| x == b) {
            self.big.swap_remove(p);
        }
    }

    /// Put `b` in bucket `k`'s list, in address order.
    #[inline(always)]
    fn list_insert(&mut self, bl: &mut [Block], k: usize, b: u32) {
        let a = bl[b as usize].addr;
        let h = self.head(k);
        if h == NIL || bl[h as usize].addr > a {
            list_push_head(bl, self.head_mut(k), b);
            return;
        }
        let mut p = h;
        loop {
            let n = bl[p as usize].lnext;
            if n == NIL || bl[n as usize].addr > a {
                list_insert_after(bl, p, b);
                return;
            }
            p = n;
        }
    }

    /// Take `b` out of bucket `k`'s list.
    #[inline(always)]
    fn list_remove(&mut self, bl: &mut [Block], k: usize, b: u32) {
        list_remove(bl, self.head_mut(k), b);
    }

    /// Add free block `b`. The first block linked sets the buckets: heap.rs `attach_mbc` links
    /// a fresh carrier's sole free block first, so they cover the carrier.
    #[inline(always)]
    pub fn link(&mut self, bl: &mut [Block], b: u32) {
        let (a, s) = (bl[b as usize].addr, bl[b as usize].size);
        if self.lines.is_empty() {
            self.init(a, s);
        }
        if s >= BIG {
            self.big.push(b);
        }
        let k = self.bucket(a);
        self.list_insert(bl, k, b);
        // `s > top`: past the saturation a bucket's entry no longer shows a larger size.
        if sat(s) > self.leaf(k) || s > self.top {
            self.raise(k, s);
        }
    }

    /// Remove linked block `b` (its record as when linked).
    #[inline(always)]
    pub fn unlink(&mut self, bl: &mut [Block], b: u32) {
        let (a, s) = (bl[b as usize].addr, bl[b as usize].size);
        if s >= BIG {
            self.big_remove_slow(b);
        }
        let k = self.bucket(a);
        self.list_remove(bl, k, b);
        if sat(s) >= self.leaf(k) {
            self.rescan(bl, k);
        }
    }

    /// Remove the block of `key` (its size may have changed since; its list links have not).
    #[inline(always)]
    pub fn unlink_key(&mut self, bl: &mut [Block], key: AddrKey) {
        self.big_remove(key.b);
        let k = self.bucket(key.addr);
        self.list_remove(bl, k, key.b);
        self.rescan(bl, k);
    }

    /// Free block `new` takes the place in address order of the block of `old` (cut at its end
    /// or merged with a free neighbour: no free block lies between the two addresses).
    #[inline(always)]
    pub fn replace(&mut self, bl: &mut [Block], old: AddrKey, new: u32) {
        let (a, s) = (bl[new as usize].addr, bl[new as usize].size);
        self.big_remove(old.b);
        if s >= BIG {
            self.big.push(new);
        }
        let (ko, k) = (self.bucket(old.addr), self.bucket(a));
        if ko != k {
            self.list_remove(bl, ko, old.b);
            self.rescan(bl, ko);
            self.list_insert(bl, k, new);
            if sat(s) > self.leaf(k) || s > self.top {
                self.raise(k, s);
            }
            return;
        }
        if old.b != new {
            let (p, n) = (bl[old.b as usize].lprev, bl[old.b as usize].lnext);
            bl[new as usize].lprev = p;
            bl[new as usize].lnext = n;
            if p == NIL {
                *self.head_mut(k) = new;
            } else {
                bl[p as usize].lnext = new;
            }
            if n != NIL {
                bl[n as usize].lprev = new;
            }
        }
        if sat(s) >= self.leaf(k) {
            self.raise(k, s);
            if sat(s) == SAT {
                // A saturated block may have been cut and stayed saturated, which the tree
                // cannot show: the exact largest again, from the few saturated blocks.
                self.top = self.big_max(bl);
            }
        } else {
            // The old size may have been the bucket's largest.
            self.rescan(bl, k);
        }
    }

    /// The lowest-addressed free block of at least `x` bytes.
    #[inline(always)]
    pub fn find(&self, bl: &[Block], x: u64) -> Option<u32> {
        if self.top < x {
            return None;
        }
        // Entries >= ceil(x / 8) are the sizes >= x (sizes are multiples of 8).
        let q = x.div_ceil(8).max(1);
        if q >= u64::from(SAT) {
            return self.find_big(bl, x);
        }
        let q = q as u16;
        let mut i = 0;
        for l in (1..self.levels as usize).rev() {
            i = i * FAN + self.lines[self.off[l] as usize + i].first_at_least(q);
        }
        // Leaf line i's heads are known now: ask for them beside the leaf line rather than
        // after it.
        let hs = &self.heads[i].0;
        crate::replay::prefetch(&hs[0]);
        crate::replay::prefetch(&hs[FAN / 2]);
        i = i * FAN + self.lines[i].first_at_least(q);
        let mut h = self.head(i);
        while bl[h as usize].size < x {
            h = bl[h as usize].lnext;
        }
        Some(h)
    }

    /// `find` past the saturation: every block that fits is in `big`.
    #[cold]
    fn find_big(&self, bl: &[Block], x: u64) -> Option<u32> {
        self.big
            .iter()
            .filter(|&&b| bl[b as usize].size >= x)
            .min_by_key(|&&b| bl[b as usize].addr)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn block(addr: u64, size: u64) -> Block {
        Block {
            addr,
            size,
            carrier: 0,
            prev: NIL,
            next: NIL,
            free: true,
            lprev: NIL,
            lnext: NIL,
        }
    }

    /// Sizes past the tree's saturation (`BIG`; the review's two cases were found at 2^31,
    /// the saturation then): a block cut but still saturated, and a larger block linked into a
    /// bucket that holds a saturated one, leave `largest` exact.
    #[test]
    fn saturated_sizes_keep_the_largest_exact() {
        let base = 0x7f00_0000_0000u64;
        // A 16 GiB carrier (4 MiB buckets): the sole free block cut, twice, in place.
        let mut bl = vec![block(base, 1 << 34)];
        let mut set = AddrSet::default();
        set.link(&mut bl, 0);
        for size in [3 << 32, 1 << 32, 1 << 20] {
            let key = AddrSet::key_at(base, 0);
            bl[0].size = size;
            set.replace(&mut bl, key, 0);
            assert_eq!(set.largest(), size);
            assert_eq!(set.find(&bl, size + 1), None);
        }
        // A 16 TiB carrier (4 GiB buckets): a 3 GiB block, then a 3.5 GiB one in its bucket.
        let mut bl = vec![block(base, 1 << 44)];
        let mut set = AddrSet::default();
        set.link(&mut bl, 0);
        let key = AddrSet::key_at(base, 0);
        bl[0].size = 3 << 30;
        set.replace(&mut bl, key, 0);
        bl.push(block(base + (1 << 31) + (1 << 30), 7 << 29));
        set.link(&mut bl, 1);
        assert_eq!(set.largest(), 7 << 29);
        assert_eq!(set.find(&bl, 7 << 29), Some(1));
    }

    /// Random links, unlinks (by record and by key), replaces (same block grown, another block
    /// at an address of the same rank, across buckets too) and first fits, against a map from
    /// address to (size, block) searched linearly.
    #[test]
    fn first_fit_agrees_with_a_linear_search() {
        // (span, seed, most free blocks at once): few blocks past 2^31 bytes make the one cut
        // or merged often the largest; buckets of 2^31 and more hold several saturated sizes.
        for (span, seed, cap) in [
            (1u64 << 23, 7u64, usize::MAX),
            (1 << 12, 11, usize::MAX),
            (304, 13, usize::MAX),
            (1 << 30, 17, usize::MAX),
            (1 << 34, 19, usize::MAX),
            (1 << 36, 23, 6),
            (1 << 44, 29, 6),
        ] {
            let mut rnd = crate::tests::xorshift(seed);
            let base = 0x7f00_0000_0000u64;
            let mut bl = vec![block(base, span)];
            let mut set = AddrSet::default();
            set.link(&mut bl, 0);
            let mut want: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
            want.insert(base, (span, 0));
            for step in 0..60_000u64 {
                let r = rnd();
                // Addresses a little past the range too (the last bucket takes them).
                let addr = base + (r >> 8) % (span + span / 8 + 1);
                match r % 8 {
                    0..=2 if !want.contains_key(&addr) && want.len() < cap => {
                        // Sizes are multiples of 8 (§3.1); some about the saturation.
                        let size = match step / 7_000 % 4 {
                            3 => BIG - 64 + rnd() % 128 / 8 * 8,
                            c => 8 + rnd() % [64, 4096, span][c as usize] / 8 * 8,
                        };
                        bl.push(block(addr, size));
                        let b = (bl.len() - 1) as u32;
                        set.link(&mut bl, b);
                        want.insert(addr, (size, b));
                    }
                    3 | 4 => {
                        if let Some((&a, &(_, b))) = want.range(addr..).next() {
                            if r % 2 == 0 {
                                set.unlink(&mut bl, b);
                            } else {
                                let key = AddrSet::key_at(a, b);
                                bl[b as usize].size = rnd(); // changed since: not read
                                set.unlink_key(&mut bl, key);
                            }
                            want.remove(&a);
                        }
                    }
                    5 => {
                        // Replace: a new address between the neighbours in order.
                        if let Some((&a, &(_, b))) = want.range(addr..).next() {
                            let lo = want.range(..a).next_back().map_or(base, |(&p, _)| p + 1);
                            let hi = want
                                .range(a + 1..)
                                .next()
                                .map_or(base + 2 * span, |(&n, _)| n);
                            // Half the time at the same address: a block cut at its end.
                            let na = if rnd() % 2 == 0 {
                                a
                            } else {
                                lo + rnd() % (hi - lo)
                            };
                            let size = 8 + rnd() % span / 8 * 8;
                            let key = AddrSet::key_at(a, b);
                            let nb = if rnd() % 2 == 0 {
                                bl[b as usize].addr = na;
                                bl[b as usize].size = size;
                                b
                            } else {
                                bl[b as usize].size = rnd(); // cut: changed, not read
                                bl.push(block(na, size));
                                (bl.len() - 1) as u32
                            };
                            set.replace(&mut bl, key, nb);
                            want.remove(&a);
                            want.insert(na, (size, nb));
                        }
                    }
                    _ => {}
                }
                let x = match (r >> 40) % 5 {
                    4 => BIG - 16 + rnd() % 32,
                    c => 1 + rnd() % [8, 600, span, 2 * span][c as usize],
                };
                let exp = want.values().find(|v| v.0 >= x).map(|v| v.1);
                assert_eq!(set.find(&bl, x), exp, "span {span} step {step} x {x}");
                let top = want.values().map(|v| v.0).max().unwrap_or(0);
                assert_eq!(set.largest(), top, "span {span} step {step}");
            }
        }
    }
}
