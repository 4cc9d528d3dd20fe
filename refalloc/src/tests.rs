//! Placement on hand-made sequences (docs/erts/alloc_util.md §4, tie-breaks included), carrier sizing (§3.3, §3.4), and
//! randomized property tests of the model's invariants.

use crate::config::{Globals, InstanceConfig, Strategy};
use crate::heap::{Env, Heap, SBC_HEADER};
use crate::replay::Replay;
use crate::trace::{Event, Op};

/// The randomized tests' generator (xorshift64, Marsaglia): each test seeds its own stream.
pub(crate) fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || xorshift_step(&mut s)
}

/// One step of `xorshift`: the next state, which is also the number drawn.
fn xorshift_step(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn cfg(strategy: Strategy) -> InstanceConfig {
    let mut c = InstanceConfig::default_for(10, 0);
    c.strategy = strategy;
    c.mmbcs = 1 << 20;
    c
}

fn heap(c: InstanceConfig) -> (Env, Heap) {
    let mut env = Env::new(Globals::default(), 2);
    let h = Heap::new(&mut env, vec![c]);
    (env, h)
}

/// Free 128-B blocks x1, x2, x3 (in that order) separated by live blocks, plus a free 256-B
/// block below them; returns (addresses of x1..x3, address of the 256-B block).
fn three_equal_free(env: &mut Env, h: &mut Heap) -> ([u64; 3], u64) {
    let user = |blk: u64| blk - 8;
    let big = h.alloc(env, 0, user(256));
    let _s0 = h.alloc(env, 0, user(64));
    let mut xs = [0u32; 3];
    for x in xs.iter_mut() {
        *x = h.alloc(env, 0, user(128));
        let _sep = h.alloc(env, 0, user(64));
    }
    let addrs = xs.map(|b| h.block(b).addr);
    let big_addr = h.block(big).addr;
    h.free(env, big);
    for &x in &xs {
        h.free(env, x);
    }
    (addrs, big_addr)
}

fn picks(strategy: Strategy, n: usize) -> (Vec<u64>, [u64; 3], u64) {
    let (mut env, mut h) = heap(cfg(strategy));
    let (xs, big) = three_equal_free(&mut env, &mut h);
    let got = (0..n)
        .map(|_| {
            let b = h.alloc(&mut env, 0, 120);
            h.block(b).addr
        })
        .collect();
    (got, xs, big)
}

#[test]
fn bf_takes_most_recent_equal_block_and_the_tree_node_last() {
    let (got, [x1, x2, x3], _) = picks(Strategy::Bf, 3);
    assert_eq!(got, vec![x3, x2, x1]); // §4.1
}

#[test]
fn aoffcbf_takes_the_tree_node_first_then_the_promoted_head() {
    let (got, [x1, x2, x3], _) = picks(Strategy::Aoffcbf, 3);
    assert_eq!(got, vec![x1, x3, x2]); // §4.3 table, §9.10
    let (got, [x1, x2, x3], _) = picks(Strategy::Ageffcbf, 3);
    assert_eq!(got, vec![x1, x3, x2]);
}

#[test]
fn aobf_and_aoffcaobf_take_lowest_address_among_equals() {
    for s in [Strategy::Aobf, Strategy::Aoffcaobf, Strategy::Ageffcaobf] {
        let (got, [x1, x2, x3], _) = picks(s, 3);
        assert_eq!(got, vec![x1, x2, x3], "{s:?}");
    }
}

#[test]
fn aoff_takes_the_lowest_address_that_fits_even_if_larger() {
    for s in [Strategy::Aoff, Strategy::Ageffcaoff] {
        let (got, [x1, _, _], big) = picks(s, 2);
        // The 256-B block is lowest: split into 128 + 128, both used before x1.
        assert_eq!(got, vec![big, big + 128], "{s:?}");
        assert!(x1 > big);
    }
}

#[test]
fn gf_takes_the_bucket_head_and_af_only_looks_at_the_head() {
    let (got, [x1, x2, x3], _) = picks(Strategy::Gf, 3);
    assert_eq!(got, vec![x3, x2, x1]); // LIFO buckets, exact match returns at once (§4.4)
                                       // af: a block goes first if >= head, else second; only the head is tried (§4.5).
    let (mut env, mut h) = heap(cfg(Strategy::Af));
    let (_, big) = three_equal_free(&mut env, &mut h);
    let b = h.alloc(&mut env, 0, 200); // head is the last linked x3 (128 >= ... ) or 256?
    let got = h.block(b).addr;
    assert!(got >= big, "af served a request from the list head");
}

#[test]
fn splitting_respects_min_block_size() {
    // A free 128-B block asked for 72 B leaves 56 < 64: handed out whole for bf (§4, §9.11).
    let (mut env, mut h) = heap(cfg(Strategy::Bf));
    let _ = three_equal_free(&mut env, &mut h);
    let b = h.alloc(&mut env, 0, 64); // block 72
    assert_eq!(h.block(b).size, 128);
    // aobf's minimum is 56: 128 - 72 = 56 is split off.
    let (mut env, mut h) = heap(cfg(Strategy::Aobf));
    let _ = three_equal_free(&mut env, &mut h);
    let b = h.alloc(&mut env, 0, 64);
    assert_eq!(h.block(b).size, 72);
}

#[test]
fn block_size_includes_header_and_atag() {
    let mut c = cfg(Strategy::Aoffcbf);
    c.atags = true;
    assert_eq!(c.block_size(100_024), 100_040); // §3.1 [verified]
    assert_eq!(c.block_size(1), 64);
    c.strategy = Strategy::Gf;
    assert_eq!(c.block_size(1), 40);
}

#[test]
fn aoffcbf_prefers_the_lowest_carrier_and_ageff_the_oldest() {
    for (s, want_old) in [(Strategy::Aoffcbf, false), (Strategy::Ageffcbf, true)] {
        let mut c = cfg(s);
        c.main_carrier = false;
        c.smbcs = 64 * 1024;
        c.lmbcs = 64 * 1024;
        let (mut env, mut h) = heap(c);
        // Fill carrier 1 with 60 KB blocks' worth, forcing carrier 2 (mapped lower, §3.8).
        let a = h.alloc(&mut env, 0, 30_000);
        let _a2 = h.alloc(&mut env, 0, 30_000);
        let b = h.alloc(&mut env, 0, 30_000);
        let _b2 = h.alloc(&mut env, 0, 30_000);
        let (ca, cb) = (h.block(a).carrier, h.block(b).carrier);
        assert_ne!(ca, cb);
        assert!(h.carriers[cb as usize].addr < h.carriers[ca as usize].addr);
        h.free(&mut env, a);
        h.free(&mut env, b);
        let n = h.alloc(&mut env, 0, 1000);
        let got = h.block(n).carrier;
        assert_eq!(got, if want_old { ca } else { cb }, "{s:?}");
    }
}

#[test]
fn mseg_mbc_sizes_follow_growth_stages_and_powers_of_two() {
    // §3.3: S=2 defaults (512K/5M) give 512K, 1M, 2M, 2M, 4M, 4M, 4M, 4M, 8M, 8M, 8M.
    let mut c = cfg(Strategy::Aoffcbf);
    c.mmbcs = 64 * 1024;
    c.smbcs = 512 * 1024;
    c.lmbcs = 5 << 20;
    let (mut env, mut h) = heap(c);
    let sizes: Vec<u64> = (0..11)
        .map(|_| {
            let cr = h.create_mbc(&mut env, 0, 64);
            h.carriers[cr as usize].size
        })
        .collect();
    let k = 1024;
    assert_eq!(
        sizes,
        vec![
            512 * k,
            k * k,
            2 * k * k,
            2 * k * k,
            4 * k * k,
            4 * k * k,
            4 * k * k,
            4 * k * k,
            8 * k * k,
            8 * k * k,
            8 * k * k
        ]
    );
    // `+MBsmbcs 64 +MBlmbcs 640 +MBmbcgs 3`: 64K, 256K, 512K, 1M, 1M [verified]
    let mut c = cfg(Strategy::Aoffcbf);
    (c.smbcs, c.lmbcs, c.mbcgs) = (64 * k, 640 * k, 3);
    let (mut env, mut h) = heap(c);
    let sizes: Vec<u64> = (0..5)
        .map(|_| {
            let cr = h.create_mbc(&mut env, 0, 64);
            h.carriers[cr as usize].size
        })
        .collect();
    assert_eq!(sizes, vec![64 * k, 256 * k, 512 * k, k * k, k * k]);
}

#[test]
fn sys_alloc_mbcs_ignore_growth_stages() {
    let mut c = cfg(Strategy::Aoffcbf);
    c.mmmbc = 0; // `+MBmmmbc 0`: all 1 MB (§3.3 step 5 [verified])
    let (mut env, mut h) = heap(c);
    for _ in 0..4 {
        let cr = h.create_mbc(&mut env, 0, 64);
        assert_eq!(h.carriers[cr as usize].size, 1 << 20);
        assert!(!h.carriers[cr as usize].mseg);
    }
}

#[test]
fn sbc_sizes_and_threshold() {
    let mut c = cfg(Strategy::Aoffcbf);
    c.atags = true;
    let (mut env, mut h) = heap(c);
    let b = h.alloc(&mut env, 0, 657_088); // block 657 104 B -> carrier 659 456 B [verified]
    let cr = h.block(b).carrier as usize;
    assert!(h.carriers[cr].sbc && h.carriers[cr].mseg);
    assert_eq!(h.block(b).size, 657_104);
    assert_eq!(h.carriers[cr].size, 659_456);
    assert_eq!(h.carriers[cr].addr + SBC_HEADER, h.block(b).addr);
    let small = h.alloc(&mut env, 0, 512 * 1024 - 1); // size >= sbct, not >
    assert!(!h.carriers[h.block(small).carrier as usize].sbc);
    let exact = h.alloc(&mut env, 0, 512 * 1024);
    assert!(h.carriers[h.block(exact).carrier as usize].sbc);
}

#[test]
fn empty_carriers_are_destroyed_and_cached_by_mseg() {
    let mut c = cfg(Strategy::Aoffcbf);
    c.mmbcs = 16 * 1024;
    let (mut env, mut h) = heap(c);
    let b = h.alloc(&mut env, 0, 100_000);
    let cr = h.block(b).carrier as usize;
    assert!(!h.carriers[cr].main);
    let addr = h.carriers[cr].addr;
    h.free(&mut env, b);
    assert_eq!(
        h.instances[0].stats.mbcs.carriers.cur, 1,
        "only the main carrier is left"
    );
    assert_eq!(env.msegs[0].cached_segments(), 1);
    let b = h.alloc(&mut env, 0, 100_000);
    assert_eq!(
        h.carriers[h.block(b).carrier as usize].addr,
        addr,
        "cache hit reuses it"
    );
}

#[test]
fn realloc_grows_in_place_and_shrinks() {
    let (mut env, mut h) = heap(cfg(Strategy::Aoffcbf));
    let a = h.alloc(&mut env, 0, 1000);
    let addr = h.block(a).addr;
    let a2 = h.realloc(&mut env, 0, a, 5000);
    assert_eq!(h.block(a2).addr, addr, "next block is free: grow in place");
    assert_eq!(h.block(a2).size, 5008);
    let a3 = h.realloc(&mut env, 0, a2, 4000); // 20 % shrink < rmbcmt 50: in place
    assert_eq!((h.block(a3).addr, h.block(a3).size), (addr, 4008));
    let s = h.alloc(&mut env, 0, 600_000);
    let s2 = h.realloc(&mut env, 0, s, 100); // SBC shrunk far below: moved into an MBC
    assert!(!h.carriers[h.block(s2).carrier as usize].sbc);
    let _ = s;
}

// --- properties ----------------------------------------------------------------------------

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        xorshift_step(&mut self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn instances(strategy: Strategy, n: u32, pool: bool) -> Vec<InstanceConfig> {
    (0..n)
        .map(|ix| {
            let mut c = InstanceConfig::default_for(10, ix);
            c.strategy = strategy;
            c.mmbcs = 64 * 1024;
            c.smbcs = 256 * 1024;
            c.lmbcs = 1 << 20;
            if pool && ix > 0 && strategy.is_aoff_family() {
                c.acul = 60;
                c.acnl = 1000;
                c.cp = Some('B');
            }
            c
        })
        .collect()
}

fn check_invariants(rp: &Replay) {
    rp.check_invariants();
}

/// FNV-1a over 64-bit words.
fn mix(h: &mut u64, v: u64) {
    *h = (*h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
}

/// Mix the placement result of an event into `h`: where the block of `id` went (address, size,
/// carrier address) and the allocator's carrier and block bytes.
fn mix_placement(h: &mut u64, rp: &Replay, id: Option<u64>) {
    let heap = rp.heaps[10].as_ref().unwrap();
    if let Some((_, b)) = id.and_then(|id| rp.block_of(id)) {
        let x = heap.block(b);
        mix(h, x.addr);
        mix(h, x.size);
        mix(h, heap.carriers[x.carrier as usize].addr);
    }
    mix(h, heap.carriers_size());
    mix(h, heap.blocks_size());
}

fn mix_stats(h: &mut u64, rp: &Replay) {
    let heap = rp.heaps[10].as_ref().unwrap();
    let mut text = String::new();
    for inst in &heap.instances {
        text += &format!("{:?}", inst.stats);
    }
    for m in &rp.env.msegs {
        text += &format!("{:?}", m.stats);
    }
    text += &format!("{:?}", rp.anomalies);
    for chunk in text.as_bytes().chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        mix(h, u64::from_le_bytes(w));
    }
}

/// A random alloc/free/realloc run on three instances, checking the invariants on the way;
/// returns a digest of every placement decision and of the final statistics.
fn random_run(strategy: Strategy, seed: u64, steps: usize, pool: bool) -> u64 {
    let mut digest = 0xcbf2_9ce4_8422_2325_u64;
    let n_inst = 3;
    let cfgs = instances(strategy, n_inst, pool);
    let mut rp = Replay::new(Globals::default(), n_inst as usize, vec![cfgs], 0);
    let mut rng = Rng(seed);
    let mut live: Vec<u64> = Vec::new();
    let mut next_id = 1u64;
    let mut t = 0;
    let size = |r: &mut Rng| match r.below(10) {
        0 => 200_000 + r.below(700_000), // some SBCs
        1..=3 => 1000 + r.below(60_000),
        _ => 1 + r.below(600),
    };
    for step in 0..steps {
        t += rng.below(3_000_000);
        let inst = rng.below(n_inst as u64);
        let roll = rng.below(100);
        let ev = if live.is_empty() || roll < 50 {
            next_id += 1;
            live.push(next_id);
            Event {
                t_ns: t,
                op: Op::Alloc,
                allocator: 10,
                instance: inst,
                type_: 214,
                size: size(&mut rng),
                id: next_id,
                new_id: 0,
                thread: inst,
            }
        } else if roll < 85 {
            let i = rng.below(live.len() as u64) as usize;
            let id = live.swap_remove(i);
            Event {
                t_ns: t,
                op: Op::Free,
                allocator: 10,
                instance: inst,
                type_: 214,
                size: 0,
                id,
                new_id: 0,
                thread: inst,
            }
        } else {
            let i = rng.below(live.len() as u64) as usize;
            next_id += 1;
            let id = std::mem::replace(&mut live[i], next_id);
            Event {
                t_ns: t,
                op: Op::Realloc,
                allocator: 10,
                instance: inst,
                type_: 214,
                size: size(&mut rng),
                id,
                new_id: next_id,
                thread: inst,
            }
        };
        rp.apply(&ev);
        let placed = match ev.op {
            Op::Alloc => Some(ev.id),
            Op::Realloc => Some(ev.new_id),
            Op::Free => None,
        };
        mix_placement(&mut digest, &rp, placed);
        if step % 97 == 0 {
            check_invariants(&rp);
        }
    }
    check_invariants(&rp);
    mix_stats(&mut digest, &rp);
    for id in live.drain(..) {
        rp.apply(&Event {
            t_ns: t,
            op: Op::Free,
            allocator: 10,
            instance: 0,
            type_: 214,
            size: 0,
            id,
            new_id: 0,
            thread: 0,
        });
    }
    check_invariants(&rp);
    let h = rp.heaps[10].as_ref().unwrap();
    let left: Vec<_> = h.live_carriers().filter(|(_, c)| !c.main).collect();
    assert!(
        left.is_empty(),
        "freeing everything returns every carrier but the main ones"
    );
    assert_eq!(h.live_carriers().count(), n_inst as usize);
    assert_eq!(h.blocks_size(), 0);
    assert_eq!(rp.anomalies.unknown_free + rp.anomalies.unknown_realloc, 0);
    mix_stats(&mut digest, &rp);
    digest
}

#[test]
fn properties_hold_for_every_strategy() {
    for s in Strategy::ALL {
        for seed in 1..6u64 {
            let _ = random_run(s, seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 3000, false);
        }
    }
}

#[test]
fn properties_hold_with_the_carrier_pool() {
    for s in [Strategy::Aoffcbf, Strategy::Ageffcbf, Strategy::Aoff] {
        for seed in 1..8u64 {
            let _ = random_run(s, seed.wrapping_mul(0x2545_F491_4F6C_DD1D), 4000, true);
        }
    }
}

/// Speed work must not change a single decision: digests of long random runs (every block's
/// address, size and carrier, the footprint after every event, the final statistics) recorded
/// from the model as validated against the VM (tests/refalloc/test_fidelity.py). A deliberate
/// model change updates them: `cargo test --no-default-features print_placement_digests --
/// --ignored --nocapture` prints the current ones.
const DIGESTS: [(Strategy, bool, u64); 13] = [
    (Strategy::Bf, false, 0x6712a3932c3157b3),
    (Strategy::Aobf, false, 0xb2d802dff05d06b5),
    (Strategy::Aoff, false, 0x3b9d00f8e09eb421),
    (Strategy::Aoffcbf, false, 0x3275fd1b9fdb8115),
    (Strategy::Aoffcaobf, false, 0x6a24b6d4d63ab824),
    (Strategy::Ageffcaoff, false, 0x0da5770a7aae49d2),
    (Strategy::Ageffcbf, false, 0x9ba1335a635d5a23),
    (Strategy::Ageffcaobf, false, 0x3be0817e4d3c7685),
    (Strategy::Gf, false, 0x7b8464c21d3113df),
    (Strategy::Af, false, 0xc54dce1d6f5c04e3),
    (Strategy::Aoffcbf, true, 0x9d82bf081d2a1bd9),
    (Strategy::Ageffcbf, true, 0x666d516f13233f6a),
    (Strategy::Aoff, true, 0xc414c4e0bcf39c88),
];

fn digest_of(s: Strategy, pool: bool) -> u64 {
    random_run(s, 0x0D16_E575, 20_000, pool)
}

#[test]
fn placement_digests_are_unchanged() {
    for (s, pool, want) in DIGESTS {
        assert_eq!(digest_of(s, pool), want, "{s:?} pool={pool}");
    }
}

#[test]
#[ignore]
fn print_placement_digests() {
    for (s, pool, _) in DIGESTS {
        println!(
            "    (Strategy::{s:?}, {pool}, 0x{:016x}),",
            digest_of(s, pool)
        );
    }
}
