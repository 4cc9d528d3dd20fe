//! An arena treap ordered by a u128 key, augmented with the subtree maximum of a u64 value.
//!
//! It answers "first key (in order) whose value is >= x" in O(log n): the address space's gaps
//! by address with their length (addr.rs). The aoff family's carrier trees
//! (docs/erts/alloc_util.md §4.3) gave the same answers from it, then a chunked sorted map;
//! they are `ctree::CarrierTree`s now.

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Node {
    key: u128,
    val: u64,
    max: u64,
    prio: u32,
    left: u32,
    right: u32,
}

#[derive(Clone, Debug)]
pub struct MaxTree {
    nodes: Vec<Node>,
    spare: Vec<u32>,
    root: u32,
    seed: u32,
    len: usize,
}

impl Default for MaxTree {
    fn default() -> Self {
        Self::new()
    }
}

impl MaxTree {
    pub fn new() -> Self {
        MaxTree {
            nodes: Vec::new(),
            spare: Vec::new(),
            root: NIL,
            seed: 0x9E37_79B9,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Largest value in the tree (0 when empty).
    pub fn max(&self) -> u64 {
        self.max_of(self.root)
    }

    fn max_of(&self, n: u32) -> u64 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].max
        }
    }

    fn pull(&mut self, n: u32) {
        let (l, r, v) = {
            let x = &self.nodes[n as usize];
            (x.left, x.right, x.val)
        };
        let m = v.max(self.max_of(l)).max(self.max_of(r));
        self.nodes[n as usize].max = m;
    }

    fn next_prio(&mut self) -> u32 {
        // xorshift32: deterministic shapes, so replays are reproducible.
        let mut x = self.seed;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.seed = x;
        x
    }

    /// Split into (< key, >= key).
    fn split(&mut self, n: u32, key: u128) -> (u32, u32) {
        if n == NIL {
            return (NIL, NIL);
        }
        if self.nodes[n as usize].key < key {
            let r = self.nodes[n as usize].right;
            let (a, b) = self.split(r, key);
            self.nodes[n as usize].right = a;
            self.pull(n);
            (n, b)
        } else {
            let l = self.nodes[n as usize].left;
            let (a, b) = self.split(l, key);
            self.nodes[n as usize].left = b;
            self.pull(n);
            (a, n)
        }
    }

    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
            let r = self.nodes[a as usize].right;
            let m = self.merge(r, b);
            self.nodes[a as usize].right = m;
            self.pull(a);
            a
        } else {
            let l = self.nodes[b as usize].left;
            let m = self.merge(a, l);
            self.nodes[b as usize].left = m;
            self.pull(b);
            b
        }
    }

    /// Insert a key that is not present.
    pub fn insert(&mut self, key: u128, val: u64) {
        let prio = self.next_prio();
        let node = Node {
            key,
            val,
            max: val,
            prio,
            left: NIL,
            right: NIL,
        };
        let ix = match self.spare.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let (a, b) = self.split(self.root, key);
        let a = self.merge(a, ix);
        self.root = self.merge(a, b);
        self.len += 1;
    }

    /// Remove `key`; returns whether it was present.
    pub fn remove(&mut self, key: u128) -> bool {
        let (a, b) = self.split(self.root, key);
        let (mid, c) = self.split(b, key + 1);
        let found = mid != NIL;
        if found {
            self.spare.push(mid);
            self.len -= 1;
        }
        self.root = self.merge(a, c);
        found
    }

    /// Change the value of a present key (O(log n), no rebalancing needed). Nothing to do when
    /// the value is unchanged, which is the common case (a carrier's largest free block).
    pub fn update(&mut self, key: u128, val: u64) {
        let mut n = self.root;
        while n != NIL {
            let node = &mut self.nodes[n as usize];
            if key == node.key {
                if node.val == val {
                    return;
                }
                node.val = val;
                break;
            }
            n = if key < node.key {
                node.left
            } else {
                node.right
            };
        }
        debug_assert!(n != NIL, "update of an absent key");
        self.repull(self.root, key);
    }

    /// Recompute the maxima on the path from `n` down to `key`, bottom-up.
    fn repull(&mut self, n: u32, key: u128) {
        if n == NIL {
            return;
        }
        let node = &self.nodes[n as usize];
        if key < node.key {
            self.repull(node.left, key);
        } else if key > node.key {
            self.repull(node.right, key);
        }
        self.pull(n);
    }

    /// First key in order strictly after `after` whose value is >= `x`.
    pub fn first_at_least_after(&self, after: u128, x: u64) -> Option<(u128, u64)> {
        self.search_after(self.root, after, x)
    }

    fn search_after(&self, n: u32, after: u128, x: u64) -> Option<(u128, u64)> {
        if n == NIL || self.nodes[n as usize].max < x {
            return None;
        }
        let node = &self.nodes[n as usize];
        if node.key <= after {
            return self.search_after(node.right, after, x);
        }
        if let Some(hit) = self.search_after(node.left, after, x) {
            return Some(hit);
        }
        if node.val >= x {
            return Some((node.key, node.val));
        }
        self.search_after(node.right, after, x)
    }

    /// First key in order whose value is >= `x`.
    pub fn first_at_least(&self, x: u64) -> Option<(u128, u64)> {
        let mut n = self.root;
        if n == NIL || self.max_of(n) < x {
            return None;
        }
        while n != NIL {
            let node = &self.nodes[n as usize];
            if node.left != NIL && self.max_of(node.left) >= x {
                n = node.left;
            } else if node.val >= x {
                return Some((node.key, node.val));
            } else {
                n = node.right;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inorder(t: &MaxTree, n: u32, out: &mut Vec<(u128, u64)>) {
        if n != NIL {
            let x = &t.nodes[n as usize];
            inorder(t, x.left, out);
            out.push((x.key, x.val));
            inorder(t, x.right, out);
        }
    }

    fn check(t: &MaxTree, n: u32) -> u64 {
        if n == NIL {
            return 0;
        }
        let x = &t.nodes[n as usize];
        let m = x.val.max(check(t, x.left)).max(check(t, x.right));
        assert_eq!(m, x.max, "stale max at key {}", x.key);
        m
    }

    #[test]
    fn first_fit_by_key() {
        let mut t = MaxTree::new();
        for (k, v) in [(50u128, 10u64), (10, 5), (30, 20), (70, 40), (20, 20)] {
            t.insert(k, v);
        }
        assert_eq!(t.first_at_least(15), Some((20, 20)));
        assert_eq!(t.first_at_least(25), Some((70, 40)));
        assert_eq!(t.first_at_least(41), None);
        assert_eq!(t.max(), 40);
        t.update(20, 1);
        assert_eq!(t.first_at_least(15), Some((30, 20)));
        assert!(t.remove(30));
        assert!(!t.remove(30));
        assert_eq!(t.first_at_least(15), Some((70, 40)));
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn matches_naive_model() {
        let mut t = MaxTree::new();
        let mut naive: std::collections::BTreeMap<u128, u64> = Default::default();
        let mut next = crate::tests::xorshift(12345u64);
        for _ in 0..20_000 {
            let s = next();
            let k = (s % 500) as u128;
            let v = (s >> 20) % 1000;
            match s % 3 {
                0 if !naive.contains_key(&k) => {
                    t.insert(k, v);
                    naive.insert(k, v);
                }
                1 if naive.contains_key(&k) => {
                    t.update(k, v);
                    naive.insert(k, v);
                }
                _ => {
                    assert_eq!(t.remove(k), naive.remove(&k).is_some());
                }
            }
            check(&t, t.root);
            let mut keys = Vec::new();
            inorder(&t, t.root, &mut keys);
            let want: Vec<(u128, u64)> = naive.iter().map(|(&k, &v)| (k, v)).collect();
            assert_eq!(keys, want, "after op {}", s % 3);
            let q = (s >> 40) % 1000;
            let want = naive.iter().find(|(_, &v)| v >= q).map(|(&k, &v)| (k, v));
            assert_eq!(t.first_at_least(q), want);
            let after = ((s >> 24) % 520) as u128;
            let want = naive
                .range(after + 1..)
                .find(|(_, &v)| v >= q)
                .map(|(&k, &v)| (k, v));
            assert_eq!(t.first_at_least_after(after, q), want);
        }
    }
}
