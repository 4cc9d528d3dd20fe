//! The aoff family's carrier tree (docs/erts/alloc_util.md §4.3): an instance's carriers in
//! key order (address, or birth then address, with the carrier id in the low 32 bits), each
//! valued by its largest free block; an allocation takes the first carrier in key order whose
//! value fits.
//!
//! An instance has a few to a few hundred carriers, and their set changes only when a carrier
//! is created, destroyed, abandoned to or fetched from the pool, while a carrier's value
//! changes on about one event in ten. So the entries are one sorted array (insert and remove
//! shift it and renumber the entries after), the position of each carrier is kept by carrier
//! id (a value update is a store, with no key search), and the maximum of each group of `G`
//! entries lets the first fit skip whole groups. Same answers as the `ChunkMap` it replaced
//! (`carrier_tree_agrees_with_a_sorted_list` below, and the placement digests).

/// Entries per group maximum.
const G: usize = 16;
const NIL: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
pub struct CarrierTree {
    /// Sorted; the low 32 bits of a key are its carrier.
    keys: Vec<u128>,
    /// Largest free block of each entry's carrier, beside `keys`.
    vals: Vec<u64>,
    /// Maximum of `vals[g * G..(g + 1) * G]`.
    gmax: Vec<u64>,
    /// By carrier id: its index in `keys`, NIL when absent.
    pos: Vec<u32>,
}

impl CarrierTree {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Enter a carrier that is not present, under `key` (its id in the low 32 bits).
    pub fn insert(&mut self, key: u128, val: u64) {
        let p = self.keys.partition_point(|k| *k < key);
        debug_assert!(self.keys.get(p) != Some(&key), "insert of a present key");
        let c = key as u32 as usize;
        if c >= self.pos.len() {
            self.pos.resize(c + 1, NIL);
        }
        self.keys.insert(p, key);
        self.vals.insert(p, val);
        self.renumber(p);
    }

    /// Remove the carrier entered under `key`; its value, or None if it is absent.
    pub fn remove(&mut self, key: u128) -> Option<u64> {
        let c = key as u32 as usize;
        let p = *self.pos.get(c)?;
        if p == NIL {
            return None;
        }
        let p = p as usize;
        assert_eq!(self.keys[p], key, "carrier removed under another key");
        self.pos[c] = NIL;
        self.keys.remove(p);
        let v = self.vals.remove(p);
        self.renumber(p);
        Some(v)
    }

    /// Positions from entry `from` on, and every group maximum, after an insert or removal
    /// there: `update` leaves the maxima alone while the tree is one group.
    fn renumber(&mut self, from: usize) {
        for (i, k) in self.keys.iter().enumerate().skip(from) {
            self.pos[*k as u32 as usize] = i as u32;
        }
        let n = self.vals.len();
        self.gmax.resize(n.div_ceil(G), 0);
        for g in 0..self.gmax.len() {
            self.gmax[g] = self.group_max(g);
        }
    }

    #[inline(always)]
    fn group_max(&self, g: usize) -> u64 {
        let end = ((g + 1) * G).min(self.vals.len());
        self.vals[g * G..end].iter().copied().max().unwrap_or(0)
    }

    /// Set the value of present carrier `c`. One group (most instances) keeps no maximum:
    /// `first_at_least` scans it without.
    #[inline(always)]
    pub fn update(&mut self, c: u32, val: u64) {
        let p = self.pos[c as usize];
        debug_assert!(p != NIL, "update of an absent carrier");
        let p = p as usize;
        let old = std::mem::replace(&mut self.vals[p], val);
        if self.vals.len() <= G {
            return;
        }
        let g = p / G;
        let m = self.gmax[g];
        if val >= m {
            self.gmax[g] = val;
        } else if old == m {
            self.gmax[g] = self.group_max(g);
        }
    }

    /// The value of present carrier `c`.
    pub fn get(&self, c: u32) -> Option<u64> {
        let p = *self.pos.get(c as usize)?;
        (p != NIL).then(|| self.vals[p as usize])
    }

    /// First carrier in key order whose value is >= `x` (first fit over carriers, §4.3).
    #[inline(always)]
    pub fn first_at_least(&self, x: u64) -> Option<u32> {
        let n = self.vals.len();
        // One group (most instances): its maximum would only repeat the scan's answer.
        let (base, end) = if n <= G {
            (0, n)
        } else {
            let g = self.gmax.iter().position(|&m| m >= x)?;
            (g * G, ((g + 1) * G).min(n))
        };
        let p = self.vals[base..end].iter().position(|&v| v >= x)?;
        Some(self.keys[base + p] as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random inserts, removals, updates and first-fit questions against a sorted list of
    /// (key, value) searched linearly.
    #[test]
    fn carrier_tree_agrees_with_a_sorted_list() {
        let mut rnd = crate::tests::xorshift(0x9e37_79b9_7f4a_7c15_u64);
        for round in 0..40 {
            let (mut t, mut r) = (CarrierTree::default(), Vec::<(u128, u64)>::new());
            // Up to a few hundred carriers: several groups, partial last groups.
            let ids = 8 + (round * 13) % 300;
            for _ in 0..20_000 {
                let op = rnd() % 16;
                let c = (rnd() % ids as u64) as u32;
                let present = r.iter().position(|e| e.0 as u32 == c);
                let val = if rnd() % 4 == 0 { 0 } else { rnd() % 1000 };
                match (op, present) {
                    (0..=1, None) => {
                        let key = ((rnd() % 64) as u128) << 32 | c as u128;
                        t.insert(key, val);
                        let p = r.partition_point(|e| e.0 < key);
                        r.insert(p, (key, val));
                    }
                    (0..=1, Some(i)) | (2, Some(i)) => {
                        let (key, v) = r.remove(i);
                        assert_eq!(t.remove(key), Some(v));
                    }
                    (2, None) => {
                        assert_eq!(t.remove(c as u128), None);
                    }
                    (3..=9, Some(i)) => {
                        t.update(c, val);
                        r[i].1 = val;
                    }
                    _ => {
                        let x = rnd() % 1100;
                        let want = r.iter().find(|e| e.1 >= x).map(|e| e.0 as u32);
                        assert_eq!(t.first_at_least(x), want);
                    }
                }
                assert_eq!(t.len(), r.len());
                if let Some(&(key, v)) = r.get((rnd() as usize) % (r.len() + 1)) {
                    assert_eq!(t.get(key as u32), Some(v));
                }
            }
        }
    }
}
