//! Virtual addresses of carriers, because address order decides placement (alloc_util.md §3.8).
//!
//! Linux hands out mmap regions top-down: a new mapping goes into the highest gap below the mmap
//! base that fits, so newer carriers usually sit lower, and holes left by unmapped carriers are
//! reused. Small main carriers come from the brk heap, below everything mmapped.

use std::collections::BTreeMap;

/// Where glibc's mmap area starts (a typical x86_64 value; only the order matters).
pub const MMAP_BASE: u64 = 0x7f00_0000_0000;
/// Where the brk heap starts (PIE executable, typical value).
pub const BRK_BASE: u64 = 0x5555_5600_0000;
const PAGE: u64 = 4096;

#[derive(Clone, Debug)]
pub struct AddrSpace {
    /// Mapped ranges: start -> end.
    mapped: BTreeMap<u64, u64>,
    brk: u64,
    /// With a super carrier, superaligned segments are carved bottom-up (§3.8).
    bottom_up_next: u64,
    bottom_up: bool,
}

impl AddrSpace {
    pub fn new(super_carrier: bool) -> Self {
        AddrSpace {
            mapped: BTreeMap::new(),
            brk: BRK_BASE,
            bottom_up_next: 0x4000_0000_0000,
            bottom_up: super_carrier,
        }
    }

    /// Map `len` bytes aligned to `align` (a power of two >= 4 KB); returns the start.
    ///
    /// Top-down: the highest gap below MMAP_BASE that holds an aligned range. O(#mappings),
    /// paid only when a carrier is created, never per block.
    pub fn map(&mut self, len: u64, align: u64) -> u64 {
        let len = len.div_ceil(PAGE) * PAGE;
        if self.bottom_up {
            let start = self.bottom_up_next.div_ceil(align) * align;
            self.bottom_up_next = start + len;
            self.mapped.insert(start, start + len);
            return start;
        }
        let mut hi = MMAP_BASE;
        for (&s, &e) in self.mapped.range(..MMAP_BASE).rev() {
            if let Some(start) = fit_top(e, hi, len, align) {
                self.mapped.insert(start, start + len);
                return start;
            }
            hi = hi.min(s);
        }
        let start = fit_top(0x1000_0000, hi, len, align).expect("address space exhausted");
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
        // Release the old range, then take it back extended if the gap above allows.
        self.unmap(start, old);
        let next = self
            .mapped
            .range(start..)
            .next()
            .map(|(&s, _)| s)
            .unwrap_or(MMAP_BASE);
        let below_free = self
            .mapped
            .range(..start)
            .next_back()
            .is_none_or(|(_, &e)| e <= start);
        if start + new <= next && below_free && !self.bottom_up {
            self.mapped.insert(start, start + new);
            return start;
        }
        self.map(new, align)
    }

    /// brk-heap memory (never returned: only main carriers live there).
    pub fn brk(&mut self, len: u64, align: u64) -> u64 {
        let start = self.brk.div_ceil(align) * align;
        self.brk = start + len;
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

    #[test]
    fn super_carrier_is_bottom_up() {
        let mut a = AddrSpace::new(true);
        let c1 = a.map(1 << 20, 16384);
        let c2 = a.map(1 << 20, 16384);
        assert!(c2 > c1);
    }
}
