//! mseg_alloc: segment rounding and the per-instance segment cache (docs/erts/alloc_util.md §3.7).

use crate::addr::AddrSpace;
use crate::config::{ceil, ceil_2pow, Globals};

pub const PAGE: u64 = 4096;
/// Superalignment unit on 64-bit since OTP 24 (§1).
pub const SACRR_UNIT: u64 = 16 * 1024;

#[derive(Clone, Debug)]
struct Cached {
    addr: u64,
    size: u64,
    mbc: bool,
    /// Insertion sequence: larger = more recently cached.
    seq: u64,
}

/// Statistics of one mseg instance (`system_info({allocator, mseg_alloc})`, §6.1).
#[derive(Clone, Debug, Default)]
pub struct MsegStats {
    pub cache_hits: u64,
    pub calls_alloc: u64,
    pub calls_dealloc: u64,
    pub calls_realloc: u64,
    pub create: u64,
    pub destroy: u64,
    pub check_cache: u64,
    pub segments: u64,
    pub segments_max: u64,
    pub segments_size: u64,
    pub segments_size_max: u64,
}

/// One mseg instance: its cache slots. Addresses come from the node's shared AddrSpace.
#[derive(Clone, Debug, Default)]
pub struct Mseg {
    cache: Vec<Cached>,
    seq: u64,
    pub stats: MsegStats,
}

impl Mseg {
    pub fn cached_size(&self) -> u64 {
        self.cache.iter().map(|c| c.size).sum()
    }

    pub fn cached_segments(&self) -> usize {
        self.cache.len()
    }

    fn count_alloc(&mut self, size: u64) {
        let s = &mut self.stats;
        s.calls_alloc += 1;
        s.segments += 1;
        s.segments_size += size;
        s.segments_max = s.segments_max.max(s.segments);
        s.segments_size_max = s.segments_size_max.max(s.segments_size);
    }

    /// Allocate a segment. MBC (`2pow`): 16 KB then next power of two; SBC: page rounding.
    /// Returns (address, carrier size): a cached SBC segment may be larger than asked.
    pub fn alloc(
        &mut self,
        space: &mut AddrSpace,
        g: &Globals,
        size: u64,
        mbc: bool,
    ) -> (u64, u64) {
        let size = if mbc {
            ceil_2pow(ceil(size, SACRR_UNIT))
        } else {
            ceil(size, PAGE)
        };
        if let Some((addr, got)) = self.cache_get(space, g, size, mbc) {
            self.stats.cache_hits += 1;
            self.count_alloc(got);
            return (addr, got);
        }
        self.stats.create += 1;
        self.count_alloc(size);
        (space.map(size, SACRR_UNIT), size)
    }

    /// `cache_get_segment` (§3.7).
    fn cache_get(
        &mut self,
        space: &mut AddrSpace,
        g: &Globals,
        size: u64,
        mbc: bool,
    ) -> Option<(u64, u64)> {
        if mbc {
            // First non-empty power-of-two bucket >= size, most recently cached first; the
            // excess tail is unmapped so the carrier is exactly `size`.
            let best = self
                .cache
                .iter()
                .enumerate()
                .filter(|(_, c)| c.mbc && c.size >= size)
                .min_by_key(|(_, c)| (c.size, u64::MAX - c.seq))
                .map(|(i, _)| i)?;
            let c = self.cache.swap_remove(best);
            if c.size > size {
                space.unmap(c.addr + size, c.size - size);
            }
            return Some((c.addr, size));
        }
        // SBC: the first (MRU) segment that is not too bad a fit is used whole ...
        let mut order: Vec<usize> = (0..self.cache.len())
            .filter(|&i| !self.cache[i].mbc)
            .collect();
        order.sort_by_key(|&i| u64::MAX - self.cache[i].seq);
        for &i in &order {
            let c = &self.cache[i];
            let waste = c.size.wrapping_sub(size);
            if c.size >= size && waste * 100 < g.rmcbf * size && waste < g.amcbf {
                let c = self.cache.swap_remove(i);
                return Some((c.addr, c.size));
            }
        }
        // ... else the best-fitting larger one is split; the remainder stays cached.
        let i = order
            .into_iter()
            .filter(|&i| self.cache[i].size > size)
            .min_by_key(|&i| self.cache[i].size)?;
        let c = &mut self.cache[i];
        let addr = c.addr;
        c.addr += size;
        c.size -= size;
        Some((addr, size))
    }

    /// `cache_bless_segment` (§3.7): keep the segment mapped in a free slot, else evict.
    pub fn dealloc(&mut self, space: &mut AddrSpace, g: &Globals, addr: u64, size: u64, mbc: bool) {
        self.stats.calls_dealloc += 1;
        self.stats.segments -= 1;
        self.stats.segments_size -= size;
        self.seq += 1;
        let entry = Cached {
            addr,
            size,
            mbc,
            seq: self.seq,
        };
        if self.cache.len() < g.mcs {
            self.cache.push(entry);
            return;
        }
        if g.mcs == 0 || mbc {
            // A full cache destroys MBC segments: SBC caching is preferred.
            self.stats.destroy += 1;
            space.unmap(addr, size);
            return;
        }
        // An SBC evicts the oldest cached SBC, else the smallest cached MBC.
        let victim = self
            .cache
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.mbc)
            .min_by_key(|(_, c)| c.seq)
            .or_else(|| {
                self.cache
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, c)| (c.size, c.seq))
            })
            .map(|(i, _)| i)
            .expect("full cache is not empty");
        let v = self.cache.swap_remove(victim);
        space.unmap(v.addr, v.size);
        self.stats.destroy += 1;
        self.cache.push(entry);
    }

    /// Segment resize (SBC realloc): page rounding; mremap semantics via AddrSpace::remap.
    pub fn realloc(&mut self, space: &mut AddrSpace, addr: u64, old: u64, new: u64) -> (u64, u64) {
        self.stats.calls_realloc += 1;
        let new = ceil(new, PAGE);
        let at = space.remap(addr, old, new, SACRR_UNIT);
        self.stats.segments_size = self.stats.segments_size + new - old;
        self.stats.segments_size_max = self.stats.segments_size_max.max(self.stats.segments_size);
        (at, new)
    }

    /// `mseg_cache_check`, once per ~1 s aux-work tick: unmap one cached segment, the oldest of
    /// the smallest MBC bucket first, then the oldest SBC (§3.7).
    pub fn age(&mut self, space: &mut AddrSpace) {
        self.stats.check_cache += 1;
        let victim = self
            .cache
            .iter()
            .enumerate()
            .filter(|(_, c)| c.mbc)
            .min_by_key(|(_, c)| (c.size, c.seq))
            .or_else(|| {
                self.cache
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| !c.mbc)
                    .min_by_key(|(_, c)| c.seq)
            })
            .map(|(i, _)| i);
        if let Some(i) = victim {
            let v = self.cache.swap_remove(i);
            space.unmap(v.addr, v.size);
            self.stats.destroy += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mbc_sizes_are_powers_of_two_and_cache_hits_trim() {
        let g = Globals::default();
        let mut s = AddrSpace::new(false);
        let mut m = Mseg::default();
        let (a, sz) = m.alloc(&mut s, &g, 5 << 20, true);
        assert_eq!(sz, 8 << 20);
        m.dealloc(&mut s, &g, a, sz, true);
        let (b, sz2) = m.alloc(&mut s, &g, 3 << 20, true);
        assert_eq!(
            (b, sz2),
            (a, 4 << 20),
            "cache hit at the old address, trimmed"
        );
        assert_eq!(m.stats.cache_hits, 1);
    }

    #[test]
    fn sbc_reuse_whole_or_split() {
        let g = Globals::default();
        let mut s = AddrSpace::new(false);
        let mut m = Mseg::default();
        let (a, sz) = m.alloc(&mut s, &g, 700_416, false);
        m.dealloc(&mut s, &g, a, sz, false);
        // 600 000 B fits within 20 %: the 700 416 B segment is used whole (§3.4 [verified]).
        let (b, sz2) = m.alloc(&mut s, &g, 600_000, false);
        assert_eq!((b, sz2), (a, 700_416));
        m.dealloc(&mut s, &g, b, sz2, false);
        let (c, sz3) = m.alloc(&mut s, &g, 100_000, false);
        assert_eq!(
            (c, sz3),
            (a, 102_400),
            "split: the carrier takes the low part"
        );
        assert_eq!(m.cached_size(), 700_416 - 102_400);
    }
}
