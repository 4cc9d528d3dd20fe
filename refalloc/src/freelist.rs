//! Free-block structures of the placement strategies (alloc_util.md §4).
//!
//! Blocks live in an arena (`Vec<Block>`); lists of equal-size blocks and gf/af buckets are
//! intrusive (`lprev`/`lnext` in the block), so unlinking any free block is O(1) plus the tree.

use crate::tree::MaxTree;
use std::collections::{BTreeMap, BTreeSet};

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

fn list_push_head(bl: &mut [Block], head: &mut u32, b: u32) {
    bl[b as usize].lprev = NIL;
    bl[b as usize].lnext = *head;
    if *head != NIL {
        bl[*head as usize].lprev = b;
    }
    *head = b;
}

fn list_insert_after(bl: &mut [Block], after: u32, b: u32) {
    let n = bl[after as usize].lnext;
    bl[b as usize].lprev = after;
    bl[b as usize].lnext = n;
    bl[after as usize].lnext = b;
    if n != NIL {
        bl[n as usize].lprev = b;
    }
}

fn list_remove(bl: &mut [Block], head: &mut u32, b: u32) {
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

/// Size-keyed tree with equal-size lists: `bf` and the `cbf` block order.
#[derive(Clone, Debug, Default)]
pub struct BfTree {
    map: BTreeMap<u64, SizeClass>,
}

impl BfTree {
    pub fn link(&mut self, bl: &mut [Block], b: u32) {
        let size = bl[b as usize].size;
        match self.map.get_mut(&size) {
            None => {
                self.map.insert(size, SizeClass { node: b, head: NIL });
            }
            // A new equal-size block goes right after the tree node (§4.1).
            Some(sc) => list_push_head(bl, &mut sc.head, b),
        }
    }

    pub fn unlink(&mut self, bl: &mut [Block], b: u32) {
        let size = bl[b as usize].size;
        let sc = self
            .map
            .get_mut(&size)
            .expect("unlink of an unlinked block");
        if sc.node == b {
            // `replace()`: the list head is promoted into the tree node's place.
            if sc.head == NIL {
                self.map.remove(&size);
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
    pub fn find(&self, size: u64, node_first: bool) -> Option<u32> {
        let (_, sc) = self.map.range(size..).next()?;
        Some(if node_first || sc.head == NIL {
            sc.node
        } else {
            sc.head
        })
    }

    pub fn largest(&self) -> u64 {
        self.map.keys().next_back().copied().unwrap_or(0)
    }
}

/// (size, address) ordered set: `aobf` and the `caobf` block order (§4.2).
#[derive(Clone, Debug, Default)]
pub struct AobfTree {
    set: BTreeSet<(u64, u64, u32)>,
}

impl AobfTree {
    pub fn link(&mut self, bl: &[Block], b: u32) {
        let x = &bl[b as usize];
        self.set.insert((x.size, x.addr, b));
    }
    pub fn unlink(&mut self, bl: &[Block], b: u32) {
        let x = &bl[b as usize];
        self.set.remove(&(x.size, x.addr, b));
    }
    pub fn find(&self, size: u64) -> Option<u32> {
        self.set.range((size, 0, 0)..).next().map(|t| t.2)
    }
    pub fn largest(&self) -> u64 {
        self.set.iter().next_back().map(|t| t.0).unwrap_or(0)
    }
}

/// Address-ordered first fit inside a carrier (`aoff`, `ageffcaoff`).
#[derive(Clone, Debug, Default)]
pub struct AddrTree {
    tree: MaxTree,
}

impl AddrTree {
    fn key(x: &Block, b: u32) -> u128 {
        ((x.addr as u128) << 32) | b as u128
    }
    pub fn link(&mut self, bl: &[Block], b: u32) {
        let x = &bl[b as usize];
        self.tree.insert(Self::key(x, b), x.size);
    }
    pub fn unlink(&mut self, bl: &[Block], b: u32) {
        self.tree.remove(Self::key(&bl[b as usize], b));
    }
    pub fn find(&self, size: u64) -> Option<u32> {
        self.tree
            .first_at_least(size)
            .map(|(k, _)| (k & 0xffff_ffff) as u32)
    }
    pub fn largest(&self) -> u64 {
        self.tree.max()
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

    pub fn link(&mut self, bl: &mut [Block], b: u32) {
        let i = self.bucket(bl[b as usize].size);
        list_push_head(bl, &mut self.heads[i], b);
        self.nonempty[i / 64] |= 1 << (i % 64);
    }

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
    pub fn link(&mut self, bl: &mut [Block], b: u32) {
        if self.head == NIL || bl[b as usize].size >= bl[self.head as usize].size {
            list_push_head(bl, &mut self.head, b);
        } else {
            list_insert_after(bl, self.head, b);
        }
    }
    pub fn unlink(&mut self, bl: &mut [Block], b: u32) {
        list_remove(bl, &mut self.head, b);
    }
    pub fn find(&self, bl: &[Block], size: u64) -> Option<u32> {
        (self.head != NIL && bl[self.head as usize].size >= size).then_some(self.head)
    }
}
