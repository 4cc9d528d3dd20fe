//! Virtual addresses of carriers, because address order decides placement (docs/erts/alloc_util.md §3.8).
//!
//! Linux hands out mmap regions top-down: a new mapping goes into the highest gap below the mmap
//! base that fits, so newer carriers usually sit lower, and holes left by unmapped carriers are
//! reused. Small main carriers come from the brk heap, below everything mmapped.

use crate::tree::MaxTree;
use std::collections::BTreeMap;

/// Where glibc's mmap area starts (a typical x86_64 value; only the order matters).
pub const MMAP_BASE: u64 = 0x7f00_0000_0000;
/// Where the brk heap starts (PIE executable, typical value).
pub const BRK_BASE: u64 = 0x5555_5600_0000;
/// Room left to the brk heap: mmap never places a mapping there (the kernel keeps mappings off
/// the heap's growth area), and a brk heap growing past it counts as exhaustion.
const BRK_END: u64 = BRK_BASE + (1 << 40);
const PAGE: u64 = 4096;
/// Lowest address top-down mappings may use.
const MMAP_FLOOR: u64 = 0x1000_0000;
/// Where mappings go once the modelled space is full: far above it, never reused. A real VM
/// aborts on the failed mmap; the model places the carrier here, flags `exhausted`, and the
/// replay stops after the event (a consistent state, no panic).
const OVERFLOW_BASE: u64 = 1 << 62;

#[derive(Clone, Debug)]
pub struct AddrSpace {
    /// Mapped ranges: start -> end.
    mapped: BTreeMap<u64, u64>,
    /// Top-down mode: the unmapped gaps of [MMAP_FLOOR, MMAP_BASE), start -> end, and the same
    /// gaps in a max-tree ordered from the top down and valued by their length, so that the
    /// highest gap of at least a given length is found in O(log n) rather than by scanning
    /// every mapping.
    gaps: BTreeMap<u64, u64>,
    gap_tree: MaxTree,
    brk: u64,
    /// With a super carrier, superaligned segments are carved bottom-up (§3.8).
    bottom_up_next: u64,
    bottom_up: bool,
    overflow_next: u64,
    /// A mapping did not fit below MMAP_BASE.
    pub exhausted: bool,
}

impl AddrSpace {
    pub fn new(super_carrier: bool) -> Self {
        let mut a = AddrSpace {
            mapped: BTreeMap::new(),
            gaps: BTreeMap::new(),
            gap_tree: MaxTree::new(),
            brk: BRK_BASE,
            bottom_up_next: 0x4000_0000_0000,
            bottom_up: super_carrier,
            overflow_next: OVERFLOW_BASE,
            exhausted: false,
        };
        a.add_gap(MMAP_FLOOR, BRK_BASE);
        a.add_gap(BRK_END, MMAP_BASE);
        a
    }

    fn gap_key(start: u64) -> u128 {
        (u64::MAX - start) as u128
    }

    fn add_gap(&mut self, start: u64, end: u64) {
        if start < end {
            self.gaps.insert(start, end);
            self.gap_tree.insert(Self::gap_key(start), end - start);
        }
    }

    fn remove_gap(&mut self, start: u64) -> u64 {
        let end = self.gaps.remove(&start).expect("a gap starts here");
        self.gap_tree.remove(Self::gap_key(start));
        end
    }

    /// Record [start, end) as mapped (top-down mode: it lies inside one gap).
    fn occupy(&mut self, start: u64, end: u64) {
        self.mapped.insert(start, end);
        if self.bottom_up {
            return;
        }
        let (&gs, &ge) = self
            .gaps
            .range(..=start)
            .next_back()
            .expect("mapping inside a gap");
        debug_assert!(end <= ge, "mapping inside a gap");
        self.remove_gap(gs);
        self.add_gap(gs, start);
        self.add_gap(end, ge);
    }

    /// [start, end) is no longer mapped: merge it with the gaps around it.
    fn release(&mut self, start: u64, end: u64) {
        if self.bottom_up || start >= OVERFLOW_BASE {
            return;
        }
        let mut lo = start;
        if let Some((&gs, &ge)) = self.gaps.range(..start).next_back() {
            if ge == start {
                self.remove_gap(gs);
                lo = gs;
            }
        }
        let hi = match self.gaps.get(&end) {
            Some(_) => self.remove_gap(end),
            None => end,
        };
        self.add_gap(lo, hi);
    }

    /// Map `len` bytes aligned to `align` (a power of two >= 4 KB); returns the start.
    ///
    /// Top-down: the highest gap below MMAP_BASE that holds an aligned range. The gap tree
    /// yields the highest gap at least `len` long; one too short for the alignment passes the
    /// search on to the next (O(log n) per carrier creation, was a scan of every mapping).
    pub fn map(&mut self, len: u64, align: u64) -> u64 {
        let len = len.div_ceil(PAGE) * PAGE;
        if self.bottom_up {
            let start = self.bottom_up_next.div_ceil(align) * align;
            if start + len <= BRK_BASE {
                self.bottom_up_next = start + len;
                self.occupy(start, start + len);
                return start;
            }
            return self.overflow(len, align);
        }
        let mut found = self.gap_tree.first_at_least(len);
        while let Some((key, _)) = found {
            let gs = u64::MAX - key as u64;
            if let Some(start) = fit_top(gs, self.gaps[&gs], len, align) {
                self.occupy(start, start + len);
                return start;
            }
            found = self.gap_tree.first_at_least_after(key, len);
        }
        self.overflow(len, align)
    }

    /// No room below the mmap base: a mapping in the overflow area, and `exhausted` set.
    fn overflow(&mut self, len: u64, align: u64) -> u64 {
        self.exhausted = true;
        let start = self.overflow_next.div_ceil(align) * align;
        self.overflow_next = start + len;
        self.mapped.insert(start, start + len);
        start
    }

    /// Unmap [start, start+len) that lies inside one mapping (the whole mapping or a tail).
    pub fn unmap(&mut self, start: u64, len: u64) {
        let end = start + len;
        let (&s, &e) = self
            .mapped
            .range(..=start)
            .next_back()
            .expect("unmap of an unmapped address");
        debug_assert!(end <= e, "unmap beyond a mapping");
        self.mapped.remove(&s);
        if s < start {
            self.mapped.insert(s, start);
        }
        if end < e {
            self.mapped.insert(end, e);
        }
        self.release(start, end);
    }

    /// Grow the mapping at `start` from `old` to `new` bytes in place if the gap above allows
    /// (mremap without MREMAP_MAYMOVE would), else move it; returns the (new) start.
    pub fn remap(&mut self, start: u64, old: u64, new: u64, align: u64) -> u64 {
        let (old, new) = (old.div_ceil(PAGE) * PAGE, new.div_ceil(PAGE) * PAGE);
        if new <= old {
            if new < old {
                self.unmap(start + new, old - new);
            }
            return start;
        }
        // Release the old range, then take it back extended if the gap it merged into allows.
        self.unmap(start, old);
        let fits = !self.bottom_up
            && self
                .gaps
                .range(..=start)
                .next_back()
                .is_some_and(|(_, &ge)| start + new <= ge);
        if fits {
            self.occupy(start, start + new);
            return start;
        }
        self.map(new, align)
    }

    /// brk-heap memory (never returned: only main carriers live there).
    pub fn brk(&mut self, len: u64, align: u64) -> u64 {
        let start = self.brk.div_ceil(align) * align;
        self.brk = start + len;
        self.exhausted |= self.brk > BRK_END;
        start
    }
}

fn fit_top(lo: u64, hi: u64, len: u64, align: u64) -> Option<u64> {
    if hi < len {
        return None;
    }
    let start = (hi - len) / align * align;
    (start >= lo).then_some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_mappings_are_lower_and_holes_are_reused() {
        let mut a = AddrSpace::new(false);
        let c1 = a.map(1 << 20, 16384);
        let c2 = a.map(2 << 20, 16384);
        let c3 = a.map(4 << 20, 16384);
        assert!(c1 > c2 && c2 > c3);
        assert_eq!(c1 % 16384, 0);
        a.unmap(c2, 2 << 20);
        let c4 = a.map(1 << 20, 16384);
        assert!(c4 > c3 && c4 < c1, "a hole is reused top-down");
        assert_eq!(c4 + (1 << 20), c1, "highest fitting position in the hole");
    }

    /// The linear scan `map` used before the gap tree: the highest fitting gap from the top.
    fn scan_top_down(a: &AddrSpace, len: u64, align: u64) -> u64 {
        let len = len.div_ceil(PAGE) * PAGE;
        let mut hi = MMAP_BASE;
        for (&s, &e) in a.mapped.range(..MMAP_BASE).rev() {
            if let Some(start) = fit_top(e, hi, len, align) {
                return start;
            }
            hi = hi.min(s);
        }
        fit_top(MMAP_FLOOR, hi, len, align).unwrap()
    }

    fn check_gaps(a: &AddrSpace) {
        let mut want = BTreeMap::new();
        for (floor, top) in [(MMAP_FLOOR, BRK_BASE), (BRK_END, MMAP_BASE)] {
            let mut lo = floor;
            for (&s, &e) in a.mapped.range(floor..top) {
                if s > lo {
                    want.insert(lo, s);
                }
                lo = e;
            }
            if lo < top {
                want.insert(lo, top);
            }
        }
        assert_eq!(a.gaps, want, "gaps are the complement of the mappings");
        assert_eq!(a.gap_tree.len(), a.gaps.len());
    }

    #[test]
    fn gap_tree_places_like_the_linear_scan() {
        let mut rnd = crate::tests::xorshift(0x5ca9_u64);
        let mut a = AddrSpace::new(false);
        let mut live: Vec<(u64, u64)> = Vec::new();
        for _ in 0..4000 {
            let r = rnd();
            let len = match r % 3 {
                0 => 4096 * (1 + r / 3 % 40),
                1 => 16384 << (r / 3 % 10),
                _ => 1 + r / 3 % 3_000_000,
            };
            let align = if r % 5 == 0 { 4096 } else { 16384 };
            match rnd() % 10 {
                0..=4 => {
                    let want = scan_top_down(&a, len, align);
                    let got = a.map(len, align);
                    assert_eq!(got, want);
                    live.push((got, len.div_ceil(PAGE) * PAGE));
                }
                5..=7 if !live.is_empty() => {
                    let (start, l) = live.swap_remove((rnd() % live.len() as u64) as usize);
                    a.unmap(start, l);
                }
                8 if !live.is_empty() => {
                    // trim a tail, as an mseg cache hit does
                    let i = (rnd() % live.len() as u64) as usize;
                    let (start, l) = live[i];
                    if l > PAGE {
                        let keep = PAGE * (1 + rnd() % (l / PAGE - 1));
                        a.unmap(start + keep, l - keep);
                        live[i] = (start, keep);
                    }
                }
                9 if !live.is_empty() => {
                    let i = (rnd() % live.len() as u64) as usize;
                    let (start, l) = live[i];
                    let new = 4096 * (1 + rnd() % 600);
                    let at = a.remap(start, l, new, 16384);
                    live[i] = (at, new);
                }
                _ => {}
            }
            check_gaps(&a);
        }
    }

    #[test]
    fn super_carrier_is_bottom_up() {
        let mut a = AddrSpace::new(true);
        let c1 = a.map(1 << 20, 16384);
        let c2 = a.map(1 << 20, 16384);
        assert!(c2 > c1);
    }
}
