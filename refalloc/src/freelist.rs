//! Free-block structures of the placement strategies (docs/erts/alloc_util.md §4).
//!
//! Blocks live in an arena (`Vec<Block>`); lists of equal-size blocks and gf/af buckets are
//! intrusive (`lprev`/`lnext` in the block), so unlinking any free block is O(1) plus the tree.

use crate::addr_runs::AddrRuns;
use std::collections::BTreeMap;

pub const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct Block {
    pub addr: u64,
    pub size: u64,
    pub carrier: u32,
    /// Physical neighbours in the carrier (boundary tags, §3.5).
    pub prev: u32,
    pub next: u32,
    pub free: bool,
    /// Links in an equal-size list or a gf/af bucket.
    pub lprev: u32,
    pub lnext: u32,
}

/// Equal-size free blocks: the tree node plus a list, most recently linked at the head (§4.1).
#[derive(Clone, Copy, Debug)]
pub struct SizeClass {
    pub node: u32,
    pub head: u32,
}

/// Intrusive lists of free blocks through `lprev`/`lnext` (also addrset.rs's buckets).
#[inline(always)]
pub(crate) fn list_push_head(bl: &mut [Block], head: &mut u32, b: u32) {
    bl[b as usize].lprev = NIL;
    bl[b as usize].lnext = *head;
    if *head != NIL {
        bl[*head as usize].lprev = b;
    }
    *head = b;
}

#[inline(always)]
pub(crate) fn list_insert_after(bl: &mut [Block], after: u32, b: u32) {
    let n = bl[after as usize].lnext;
    bl[b as usize].lprev = after;
    bl[b as usize].lnext = n;
    bl[after as usize].lnext = b;
    if n != NIL {
        bl[n as usize].lprev = b;
    }
}

#[inline(always)]
pub(crate) fn list_remove(bl: &mut [Block], head: &mut u32, b: u32) {
    let (p, n) = (bl[b as usize].lprev, bl[b as usize].lnext);
    if p != NIL {
        bl[p as usize].lnext = n;
    } else {
        *head = n;
    }
    if n != NIL {
        bl[n as usize].lprev = p;
    }
}

/// Free block sizes below this are kept in a bitmap-indexed table, 8-byte classes (block sizes
/// are multiples of 8, §3.1); larger ones in an ordered map.
const SMALL_LIMIT: u64 = 64 * 1024;
const SMALL_CLASSES: usize = (SMALL_LIMIT / 8) as usize;
const SMALL_WORDS: usize = SMALL_CLASSES / 64;

/// Free block sizes, each with a value of `V`: it behaves as the size-keyed red-black tree of
/// §4.1 (only "smallest size >= x" and the value of each size matter), but small sizes are a
/// direct table with a two-level bitmap of the non-empty ones: finding the next non-empty size
/// is a couple of word scans instead of a tree descent.
#[derive(Clone, Debug)]
struct SizeTable<V> {
    /// Indexed by size / 8; valid where `bits` has the bit set. Grows to the largest class seen.
    small: Vec<V>,
    bits: Box<[u64; SMALL_WORDS]>,
    /// Bit w set iff `bits[w]` is non-zero.
    summary: [u64; SMALL_WORDS / 64],
    large: BTreeMap<u64, V>,
    /// The largest size present (0 when empty): asked after every alloc and free (aoff family).
    largest: u64,
}

impl<V> Default for SizeTable<V> {
    fn default() -> Self {
        SizeTable {
            small: Vec::new(),
            bits: Box::new([0; SMALL_WORDS]),
            summary: [0; SMALL_WORDS / 64],
            large: BTreeMap::new(),
            largest: 0,
        }
    }
}

impl<V: Copy + Default> SizeTable<V> {
    /// The size's small class, if it has one.
    #[inline(always)]
    fn class(size: u64) -> Option<usize> {
        assert!(
            size.is_multiple_of(8),
            "block sizes are multiples of 8 (§3.1)"
        );
        (size < SMALL_LIMIT).then_some((size / 8) as usize)
    }

    #[inline(always)]
    fn set_bit(&mut self, k: usize) {
        self.bits[k / 64] |= 1 << (k % 64);
        self.summary[k / 4096] |= 1 << (k / 64 % 64);
    }

    #[inline(always)]
    fn clear_bit(&mut self, k: usize) {
        self.bits[k / 64] &= !(1 << (k % 64));
        if self.bits[k / 64] == 0 {
            self.summary[k / 4096] &= !(1 << (k / 64 % 64));
        }
    }

    #[inline(always)]
    fn has(&self, k: usize) -> bool {
        self.bits[k / 64] & (1 << (k % 64)) != 0
    }

    /// First non-empty small class >= k.
    #[inline(always)]
    fn next_class(&self, k: usize) -> Option<usize> {
        if k >= SMALL_CLASSES {
            return None;
        }
        let w = k / 64;
        let here = self.bits[w] & (!0u64 << (k % 64));
        if here != 0 {
            return Some(w * 64 + here.trailing_zeros() as usize);
        }
        // Later non-empty words, from the summary.
        let w1 = w + 1;
        if w1 >= SMALL_WORDS {
            return None;
        }
        let mut sw = w1 / 64;
        let mut mask = !0u64 << (w1 % 64);
        while sw < self.summary.len() {
            let m = self.summary[sw] & mask;
            if m != 0 {
                let w = sw * 64 + m.trailing_zeros() as usize;
                return Some(w * 64 + self.bits[w].trailing_zeros() as usize);
            }
            sw += 1;
            mask = !0;
        }
        None
    }

    /// The value of a present size.
    #[inline(always)]
    fn get_mut(&mut self, size: u64) -> Option<&mut V> {
        match Self::class(size) {
            Some(k) => self.has(k).then(|| &mut self.small[k]),
            None => self.large.get_mut(&size),
        }
    }

    /// Enter a size that is not present.
    #[inline(always)]
    fn insert(&mut self, size: u64, v: V) {
        self.largest = self.largest.max(size);
        match Self::class(size) {
            Some(k) => {
                if k >= self.small.len() {
                    let want = (k + 1).max(2 * self.small.len()).min(SMALL_CLASSES);
                    self.small.resize(want, V::default());
                }
                self.small[k] = v;
                self.set_bit(k);
            }
            None => {
                self.large.insert(size, v);
            }
        }
    }

    #[inline(always)]
    fn remove(&mut self, size: u64) {
        match Self::class(size) {
            Some(k) => self.clear_bit(k),
            None => {
                self.large.remove(&size);
            }
        }
        if size == self.largest {
            self.largest = self.scan_largest();
        }
    }

    /// The value of the smallest size >= `size`.
    #[inline(always)]
    fn at_least(&self, size: u64) -> Option<V> {
        Some(match self.next_class(size.div_ceil(8) as usize) {
            Some(k) => self.small[k],
            None => *self.large.range(size..).next()?.1,
        })
    }

    fn scan_largest(&self) -> u64 {
        if let Some((&size, _)) = self.large.last_key_value() {
            return size;
        }
        for sw in (0..self.summary.len()).rev() {
            if self.summary[sw] != 0 {
                let w = sw * 64 + 63 - self.summary[sw].leading_zeros() as usize;
                let k = w * 64 + 63 - self.bits[w].leading_zeros() as usize;
                return k as u64 * 8;
            }
        }
        0
    }
}

impl Default for SizeClass {
    fn default() -> Self {
        SizeClass {
            node: NIL,
            head: NIL,
        }
    }
}

/// Sizes with equal-size lists: `bf` and the `cbf` block order (§4.1).
#[derive(Clone, Debug, Default)]
pub struct BfTree {
    sizes: SizeTable<SizeClass>,
}

impl BfTree {
    #[inline(always)]
    pub fn link(&mut self, bl: &mut [Block], b: u32) {
        let size = bl[b as usize].size;
        match self.sizes.get_mut(size) {
            None => self.sizes.insert(size, SizeClass { node: b, head: NIL }),
            // A new equal-size block goes right after the tree node (§4.1).
            Some(sc) => list_push_head(bl, &mut sc.head, b),
        }
    }

    #[inline(always)]
    pub fn unlink(&mut self, bl: &mut [Block], b: u32) {
        let size = bl[b as usize].size;
        let sc = self
            .sizes
            .get_mut(size)
            .expect("unlink of an unlinked block");
        if sc.node == b {
            // `replace()`: the list head is promoted into the tree node's place.
            if sc.head == NIL {
                self.sizes.remove(size);
            } else {
                let h = sc.head;
                list_remove(bl, &mut sc.head, h);
                sc.node = h;
            }
        } else {
            list_remove(bl, &mut sc.head, b);
        }
    }

    /// Smallest size >= `size`. `node_first`: aoffcbf takes the tree node first, bf takes the
    /// most recently linked list block first and the node last (§4.1, §4.3, §9.10).
    #[inline(always)]
    pub fn find(&self, size: u64, node_first: bool) -> Option<u32> {
        let sc = self.sizes.at_least(size)?;
        Some(if node_first || sc.head == NIL {
            sc.node
        } else {
            sc.head
        })
    }

    #[inline(always)]
    pub fn largest(&self) -> u64 {
        self.sizes.largest
    }
}

/// (size, address) order: `aobf` and the `caobf` block order (§4.2). The sizes are a
/// `SizeTable` like bf's. Each size keeps its lowest-addressed block inline (what `find`
/// returns: nothing else is read on a search) and the others, if any, in a set of `rest` (an
/// `AddrRuns` pool: a short array by address, src/addr_runs.rs says why). Most sizes hold a
/// single free block and never touch the pool.
#[derive(Clone, Debug, Default)]
pub struct AobfTree {
    sizes: SizeTable<AobfClass>,
    rest: AddrRuns,
}

/// The free blocks of one size: the lowest-addressed inline, the rest in set `rest` (NIL:
/// none).
#[derive(Clone, Copy, Debug)]
struct AobfClass {
    addr: u64,
    block: u32,
    rest: u32,
}

impl Default for AobfClass {
    fn default() -> Self {
        AobfClass {
            addr: 0,
            block: NIL,
            rest: NIL,
        }
    }
}

impl AobfTree {
    #[inline(always)]
    pub fn link(&mut self, bl: &[Block], b: u32) {
        let x = &bl[b as usize];
        let Some(cl) = self.sizes.get_mut(x.size) else {
            let cl = AobfClass {
                addr: x.addr,
                block: b,
                rest: NIL,
            };
            self.sizes.insert(x.size, cl);
            return;
        };
        if x.addr < cl.addr {
            // The new block is the lowest: the inline one joins the rest, below all of them.
            cl.rest = self.rest.push_lowest(cl.rest, cl.addr, cl.block);
            (cl.addr, cl.block) = (x.addr, b);
        } else {
            cl.rest = self.rest.insert(cl.rest, x.addr, b);
        }
    }
    #[inline(always)]
    pub fn unlink(&mut self, bl: &[Block], b: u32) {
        let x = &bl[b as usize];
        let cl = self
            .sizes
            .get_mut(x.size)
            .expect("unlink of an unlinked block");
        if cl.rest == NIL {
            debug_assert_eq!(cl.block, b, "unlink of an unlinked block");
            self.sizes.remove(x.size);
        } else if cl.block == b {
            // The lowest of the rest comes inline.
            (cl.addr, cl.block, cl.rest) = self.rest.pop_lowest(cl.rest);
        } else {
            cl.rest = self.rest.remove(cl.rest, x.addr);
        }
    }
    #[inline(always)]
    pub fn find(&self, size: u64) -> Option<u32> {
        Some(self.sizes.at_least(size)?.block)
    }
    #[inline(always)]
    pub fn largest(&self) -> u64 {
        self.sizes.largest
    }
}

/// `gf` (§4.4): 256 segregated LIFO buckets, search depth `mbsd`.
#[derive(Clone, Debug)]
pub struct GoodFit {
    heads: Vec<u32>,
    nonempty: [u64; 4],
    sbct: u64,
    mbsd: u64,
}

const GF_BUCKETS: usize = 256;

impl GoodFit {
    pub fn new(sbct: u64, mbsd: u64) -> Self {
        GoodFit {
            heads: vec![NIL; GF_BUCKETS],
            nonempty: [0; 4],
            sbct,
            mbsd: mbsd.max(1),
        }
    }

    /// Bucket index: four ranges of 64 buckets (§4.4): 8-B steps from 40, 128-B steps from 552,
    /// 768-B steps from 8744, then a step derived from sbct; the last bucket takes the rest.
    fn bucket(&self, size: u64) -> usize {
        let (a, b, c) = (40u64, 552u64, 8744u64);
        let d = 57896u64;
        let ix = if size < b {
            (size.saturating_sub(a)) / 8
        } else if size < c {
            64 + (size - b) / 128
        } else if size < d {
            128 + (size - c) / 768
        } else {
            let step_raw = (3 * (self.sbct.saturating_sub(d + 1)) / 63).div_ceil(2);
            let step = 768u64.max(step_raw.div_ceil(8) * 8);
            192 + (size - d) / step
        };
        (ix as usize).min(GF_BUCKETS - 1)
    }

    #[inline(always)]
    pub fn link(&mut self, bl: &mut [Block], b: u32) {
        let i = self.bucket(bl[b as usize].size);
        list_push_head(bl, &mut self.heads[i], b);
        self.nonempty[i / 64] |= 1 << (i % 64);
    }

    #[inline(always)]
    pub fn unlink(&mut self, bl: &mut [Block], b: u32) {
        let i = self.bucket(bl[b as usize].size);
        list_remove(bl, &mut self.heads[i], b);
        if self.heads[i] == NIL {
            self.nonempty[i / 64] &= !(1 << (i % 64));
        }
    }

    fn next_nonempty(&self, from: usize) -> Option<usize> {
        (from..GF_BUCKETS).find(|&i| self.nonempty[i / 64] & (1 << (i % 64)) != 0)
    }

    /// First non-empty bucket >= the request's: in its own bucket an exact fit returns at once,
    /// else the smallest fitting of the first `mbsd`; if none fits, the smallest of the first
    /// `mbsd` blocks of the next non-empty bucket. (Not modelled: avoiding the "last aux MBC".)
    #[inline(always)]
    pub fn find(&self, bl: &[Block], size: u64) -> Option<u32> {
        let own = self.bucket(size);
        let mut i = self.next_nonempty(own)?;
        loop {
            let mut best: Option<u32> = None;
            let mut b = self.heads[i];
            let mut seen = 0;
            while b != NIL && seen < self.mbsd {
                let s = bl[b as usize].size;
                if s == size {
                    return Some(b);
                }
                if s >= size && best.is_none_or(|x| s < bl[x as usize].size) {
                    best = Some(b);
                }
                b = bl[b as usize].lnext;
                seen += 1;
            }
            if best.is_some() {
                return best;
            }
            i = self.next_nonempty(i + 1)?;
        }
    }
}

/// `af` (§4.5): one list; a block goes to the head if >= the head, else second; only the head
/// is ever considered.
#[derive(Clone, Debug, Default)]
pub struct AFit {
    head: u32,
}

impl AFit {
    pub fn new() -> Self {
        AFit { head: NIL }
    }
    #[inline(always)]
    pub fn link(&mut self, bl: &mut [Block], b: u32) {
        if self.head == NIL || bl[b as usize].size >= bl[self.head as usize].size {
            list_push_head(bl, &mut self.head, b);
        } else {
            list_insert_after(bl, self.head, b);
        }
    }
    #[inline(always)]
    pub fn unlink(&mut self, bl: &mut [Block], b: u32) {
        list_remove(bl, &mut self.head, b);
    }
    #[inline(always)]
    pub fn find(&self, bl: &[Block], size: u64) -> Option<u32> {
        (self.head != NIL && bl[self.head as usize].size >= size).then_some(self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map-only BfTree this one replaced, as the reference.
    #[derive(Default)]
    struct MapBf(BTreeMap<u64, SizeClass>);

    impl MapBf {
        fn link(&mut self, bl: &mut [Block], b: u32) {
            let size = bl[b as usize].size;
            match self.0.get_mut(&size) {
                None => {
                    self.0.insert(size, SizeClass { node: b, head: NIL });
                }
                Some(sc) => list_push_head(bl, &mut sc.head, b),
            }
        }
        fn unlink(&mut self, bl: &mut [Block], b: u32) {
            let size = bl[b as usize].size;
            let sc = self.0.get_mut(&size).unwrap();
            if sc.node == b {
                if sc.head == NIL {
                    self.0.remove(&size);
                } else {
                    let h = sc.head;
                    list_remove(bl, &mut sc.head, h);
                    sc.node = h;
                }
            } else {
                list_remove(bl, &mut sc.head, b);
            }
        }
        fn find(&self, size: u64, node_first: bool) -> Option<u32> {
            let (_, sc) = self.0.range(size..).next()?;
            Some(if node_first || sc.head == NIL {
                sc.node
            } else {
                sc.head
            })
        }
        fn largest(&self) -> u64 {
            self.0.keys().next_back().copied().unwrap_or(0)
        }
    }

    #[test]
    fn bf_tree_agrees_with_an_ordered_map() {
        let block = |size| Block {
            addr: 0,
            size,
            carrier: 0,
            prev: NIL,
            next: NIL,
            free: false,
            lprev: NIL,
            lnext: NIL,
        };
        // Sizes around the table's limit, its word and summary boundaries, and far above.
        fn size(rnd: &mut impl FnMut() -> u64) -> u64 {
            let r = rnd();
            8 * match r % 4 {
                0 => 1 + r / 4 % 64,
                1 => 1 + r / 4 % 9000,
                2 => SMALL_CLASSES as u64 - 3 + r / 4 % 6,
                _ => 1 + r / 4 % 100_000,
            }
        }
        let mut rnd = crate::tests::xorshift(77u64);
        let n = 3000;
        let sizes: Vec<u64> = (0..n).map(|_| size(&mut rnd)).collect();
        let mut bl_a: Vec<Block> = sizes.iter().map(|&z| block(z)).collect();
        let mut bl_b = bl_a.clone();
        let (mut a, mut b) = (BfTree::default(), MapBf::default());
        let mut linked = vec![false; n as usize];
        for step in 0..60_000u64 {
            let i = (rnd() % n) as usize;
            if linked[i] {
                a.unlink(&mut bl_a, i as u32);
                b.unlink(&mut bl_b, i as u32);
            } else {
                a.link(&mut bl_a, i as u32);
                b.link(&mut bl_b, i as u32);
            }
            linked[i] = !linked[i];
            let q = size(&mut rnd);
            for node_first in [false, true] {
                assert_eq!(a.find(q, node_first), b.find(q, node_first), "step {step}");
            }
            assert_eq!(a.largest(), b.largest(), "step {step}");
        }
    }

    /// `AobfTree` finds the smallest size >= the request, lowest address first, as an ordered
    /// set of (size, address) does (§4.2), through inline minima, map pops and map reuse.
    #[test]
    fn aobf_tree_agrees_with_an_ordered_set() {
        use std::collections::BTreeSet;
        let mut rnd = crate::tests::xorshift(4711u64);
        let n = 4000u64;
        // Few sizes (long equal-size runs, as small blocks give) and many (mostly singletons).
        let bl: Vec<Block> = (0..n)
            .map(|i| {
                let r = rnd();
                let size = 8 * if i % 2 == 0 {
                    1 + r % 12
                } else {
                    1 + r % 20_000
                };
                Block {
                    addr: 16 * i,
                    size,
                    carrier: 0,
                    prev: NIL,
                    next: NIL,
                    free: false,
                    lprev: NIL,
                    lnext: NIL,
                }
            })
            .collect();
        let mut t = AobfTree::default();
        let mut want: BTreeSet<(u64, u64, u32)> = BTreeSet::new();
        let mut linked = vec![false; n as usize];
        for step in 0..80_000u64 {
            let i = (rnd() % n) as usize;
            let x = &bl[i];
            if linked[i] {
                t.unlink(&bl, i as u32);
                want.remove(&(x.size, x.addr, i as u32));
            } else {
                t.link(&bl, i as u32);
                want.insert((x.size, x.addr, i as u32));
            }
            linked[i] = !linked[i];
            let q = 8 * (1 + rnd() % 20_001);
            let got = want.range((q, 0, 0)..).next().map(|&(_, _, b)| b);
            assert_eq!(t.find(q), got, "step {step}");
            let largest = want.iter().next_back().map(|&(z, _, _)| z).unwrap_or(0);
            assert_eq!(t.largest(), largest, "step {step}");
        }
    }
}
