//! One alloc_util allocator (all its instances): blocks, carriers, alloc/free/realloc, and the
//! carrier pool between its instances (docs/erts/alloc_util.md §3, §4, §5).

use crate::addr::AddrSpace;
use crate::addrset::AddrSet;
use crate::config::{ceil, BlockOrder, Globals, InstanceConfig, Strategy};
use crate::ctree::CarrierTree;
use crate::freelist::{AFit, AobfTree, BfTree, Block, GoodFit, NIL};
use crate::mseg::{Mseg, SACRR_UNIT};
use crate::replay::Ahead;
use crate::stats::InstStats;

/// SBC header (§3.2).
pub const SBC_HEADER: u64 = 32;
/// Minimum mseg MBC size (§3.3 step 4).
const MIN_MBC: u64 = 16 * 1024;
/// glibc's fixed mmap threshold; main carriers below it come from brk (§3.8).
const MMAP_THRESHOLD: u64 = 128 * 1024;
/// `disable_abandon` after a carrier creation and its per-op steps (§5, §9.20).
const DISABLE_ABANDON: u64 = 1000;
/// Pool fetch inspects at most this many carriers (§5).
const FETCH_LIMIT: usize = 100;

/// Node-wide state shared by all allocators: the address space and the mseg instances.
#[derive(Clone)]
pub struct Env {
    pub space: AddrSpace,
    pub msegs: Vec<Mseg>,
    pub globals: Globals,
    /// Literal super carrier: bump region, 16 KB units, no cache (§1, §3.3).
    pub literal_next: u64,
    pub mseg_carriers: u64,
}

impl Env {
    pub fn new(globals: Globals, mseg_instances: usize) -> Self {
        Env {
            space: AddrSpace::new(globals.scs > 0),
            msegs: vec![Mseg::default(); mseg_instances.max(1)],
            globals,
            literal_next: 0x2000_0000_0000,
            mseg_carriers: 0,
        }
    }
    /// The calling thread's mseg instance (§3.7); unknown ones map to the global instance 0.
    fn mseg_ix(&self, ix: usize) -> usize {
        if ix < self.msegs.len() {
            ix
        } else {
            0
        }
    }
    fn mseg_alloc(&mut self, ix: usize, size: u64, mbc: bool) -> (u64, u64) {
        let i = self.mseg_ix(ix);
        self.msegs[i].alloc(&mut self.space, &self.globals, size, mbc)
    }
    fn mseg_dealloc(&mut self, ix: usize, addr: u64, size: u64, mbc: bool) {
        let i = self.mseg_ix(ix);
        self.msegs[i].dealloc(&mut self.space, &self.globals, addr, size, mbc)
    }
    fn mseg_realloc(&mut self, ix: usize, addr: u64, old: u64, new: u64) -> (u64, u64) {
        let i = self.mseg_ix(ix);
        self.msegs[i].realloc(&mut self.space, addr, old, new)
    }
}

/// Free blocks of one carrier (aoff family) or one instance (bf, aobf, gf, af).
/// `repr(u8)`: an explicit tag byte, so a match is a byte compare; the default layout hid
/// the tag in a niche of a field and decoded it in ~8 instructions on every match.
#[derive(Clone, Debug)]
#[repr(u8)]
enum FreeSet {
    Bf(BfTree),
    Aobf(AobfTree),
    Addr(AddrSet),
    Gf(GoodFit),
    Af(AFit),
}

impl FreeSet {
    fn for_order(o: BlockOrder) -> FreeSet {
        match o {
            BlockOrder::Addr => FreeSet::Addr(AddrSet::default()),
            BlockOrder::SizeAddr => FreeSet::Aobf(AobfTree::default()),
            BlockOrder::Bf => FreeSet::Bf(BfTree::default()),
        }
    }
    fn for_instance(c: &InstanceConfig) -> Option<FreeSet> {
        Some(match c.strategy {
            Strategy::Bf => FreeSet::Bf(BfTree::default()),
            Strategy::Aobf => FreeSet::Aobf(AobfTree::default()),
            Strategy::Gf => FreeSet::Gf(GoodFit::new(c.sbct, c.mbsd)),
            Strategy::Af => FreeSet::Af(AFit::new()),
            _ => return None,
        })
    }
    #[inline(always)]
    fn link(&mut self, bl: &mut [Block], b: u32) {
        match self {
            FreeSet::Bf(t) => t.link(bl, b),
            FreeSet::Aobf(t) => t.link(bl, b),
            FreeSet::Addr(t) => t.link(bl, b),
            FreeSet::Gf(t) => t.link(bl, b),
            FreeSet::Af(t) => t.link(bl, b),
        }
    }
    #[inline(always)]
    fn unlink(&mut self, bl: &mut [Block], b: u32) {
        match self {
            FreeSet::Bf(t) => t.unlink(bl, b),
            FreeSet::Aobf(t) => t.unlink(bl, b),
            FreeSet::Addr(t) => t.unlink(bl, b),
            FreeSet::Gf(t) => t.unlink(bl, b),
            FreeSet::Af(t) => t.unlink(bl, b),
        }
    }
    /// `node_first` selects aoffcbf's tie-break over bf's (§9.10).
    #[inline(always)]
    fn find(&self, bl: &[Block], size: u64, node_first: bool) -> Option<u32> {
        match self {
            FreeSet::Bf(t) => t.find(size, node_first),
            FreeSet::Aobf(t) => t.find(size),
            FreeSet::Addr(t) => t.find(bl, size),
            FreeSet::Gf(t) => t.find(bl, size),
            FreeSet::Af(t) => t.find(bl, size),
        }
    }
    fn largest(&self) -> u64 {
        match self {
            FreeSet::Bf(t) => t.largest(),
            FreeSet::Aobf(t) => t.largest(),
            FreeSet::Addr(t) => t.largest(),
            FreeSet::Gf(_) | FreeSet::Af(_) => 0,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Carrier {
    pub addr: u64,
    pub size: u64,
    pub mseg: bool,
    pub sbc: bool,
    pub main: bool,
    pub owner: u32,
    pub creator: u32,
    pub birth: u64,
    pub first: u32,
    /// Allocated block bytes and count in this carrier.
    pub used: u64,
    pub nblocks: u64,
    pub in_pool: bool,
    live: bool,
    /// aoff family: the largest free block as last entered in the owner's carrier tree.
    tree_largest: u64,
}

#[derive(Clone)]
pub struct Instance {
    pub cfg: InstanceConfig,
    pub stats: InstStats,
    free: Option<FreeSet>,
    /// aoff family: carriers by address or (birth, address), valued by largest free block: the
    /// first fit over carriers (§4.3). A sorted array with each carrier's position kept
    /// (ctree.rs): a value update, about one event in ten, is a store with no key search.
    ctree: CarrierTree,
    disable_abandon: u64,
    pooled_own: u64,
    /// `cfg.pool_enabled()`, known when the heap is built: `check_abandon` asks on every free.
    pool: bool,
}

/// One allocator with all its instances.
#[derive(Clone)]
pub struct Heap {
    pub alloc_no: u32,
    pub instances: Vec<Instance>,
    pub blocks: Vec<Block>,
    spare_blocks: Vec<u32>,
    pub carriers: Vec<Carrier>,
    /// Free blocks of each carrier (aoff family; None for the others and for SBCs), apart from
    /// `carriers` so that carrier records stay small and `Copy`.
    carrier_free: Vec<Option<FreeSet>>,
    spare_carriers: Vec<u32>,
    births: u64,
    /// Carrier pool of this allocator (`cp` = own letter): index 0 is the head (§5).
    pool: Vec<u32>,
    /// Whether some instance keeps free sets per carrier (aoff family), by address (aoff,
    /// ageffcaoff), or has the pool on: when not, every event skips the tests they guard.
    carrier_sets: bool,
    addr_sets: bool,
    pool_on: bool,
}

impl Heap {
    pub fn new(env: &mut Env, configs: Vec<InstanceConfig>) -> Heap {
        let alloc_no = configs.first().map(|c| c.alloc_no).unwrap_or(0);
        let mut h = Heap {
            alloc_no,
            instances: Vec::new(),
            blocks: Vec::new(),
            spare_blocks: Vec::new(),
            carriers: Vec::new(),
            carrier_free: Vec::new(),
            spare_carriers: Vec::new(),
            births: 0,
            pool: Vec::new(),
            carrier_sets: configs.iter().any(|c| c.strategy.is_aoff_family()),
            addr_sets: configs
                .iter()
                .any(|c| c.strategy.block_order() == Some(BlockOrder::Addr)),
            pool_on: configs.iter().any(|c| c.pool_enabled()),
        };
        for cfg in configs {
            h.instances.push(Instance {
                free: FreeSet::for_instance(&cfg),
                pool: cfg.pool_enabled(),
                cfg,
                stats: InstStats::default(),
                ctree: CarrierTree::default(),
                disable_abandon: 0,
                pooled_own: 0,
            });
        }
        for ix in 0..h.instances.len() {
            if h.instances[ix].cfg.main_carrier && h.instances[ix].cfg.mmbcs > 0 {
                h.create_main(env, ix as u32);
            }
        }
        h
    }

    #[inline(always)]
    fn cfg(&self, ix: u32) -> &InstanceConfig {
        &self.instances[ix as usize].cfg
    }

    #[inline(always)]
    fn new_block(&mut self, b: Block) -> u32 {
        match self.spare_blocks.pop() {
            Some(i) => {
                self.blocks[i as usize] = b;
                i
            }
            None => {
                self.blocks.push(b);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    fn new_carrier(&mut self, c: Carrier, free: Option<FreeSet>) -> u32 {
        match self.spare_carriers.pop() {
            Some(i) => {
                self.carriers[i as usize] = c;
                self.carrier_free[i as usize] = free;
                i
            }
            None => {
                self.carriers.push(c);
                self.carrier_free.push(free);
                (self.carriers.len() - 1) as u32
            }
        }
    }

    // --- free-structure plumbing --------------------------------------------------------

    #[inline]
    fn carrier_key(&self, c: u32) -> u128 {
        let cr = &self.carriers[c as usize];
        let strat = self.cfg(cr.owner).strategy;
        let primary = if strat.age_ordered() {
            cr.birth
        } else {
            cr.addr
        };
        ((primary as u128) << 32) | c as u128
    }

    /// The free set of carrier `c`'s free blocks: its own (aoff family) or its owner
    /// instance's (one set per instance for the other strategies). Returned beside the block
    /// table so the caller can hand both to the set. Callers pass the carrier they already
    /// hold rather than have it read again from the block.
    #[inline(always)]
    fn free_set_in(&mut self, c: u32) -> (&mut FreeSet, &mut Vec<Block>) {
        let fs = free_set_of(
            &mut self.carrier_free,
            &mut self.instances,
            &self.carriers,
            c,
        );
        (fs, &mut self.blocks)
    }

    /// Link free block `b` of carrier `c`.
    #[inline(always)]
    fn link(&mut self, c: u32, b: u32) {
        debug_assert_eq!(self.blocks[b as usize].carrier, c);
        self.blocks[b as usize].free = true;
        let (fs, blocks) = self.free_set_in(c);
        fs.link(blocks, b)
    }

    /// Unlink free block `b` of carrier `c`.
    #[inline(always)]
    fn unlink(&mut self, c: u32, b: u32) {
        debug_assert_eq!(self.blocks[b as usize].carrier, c);
        let (fs, blocks) = self.free_set_in(c);
        fs.unlink(blocks, b)
    }

    /// Keep the owner's carrier tree in step with the carrier's largest free block.
    #[inline(always)]
    fn refresh(&mut self, c: u32) {
        if !self.carrier_sets {
            return;
        }
        if let Some(fs) = self.carrier_free[c as usize].as_ref() {
            let largest = fs.largest();
            if largest != self.carriers[c as usize].tree_largest {
                self.refresh_tree(c, largest);
            }
        }
    }

    /// Inlined since a one-group carrier tree's update is a store (ctree.rs): the call cost
    /// more than the body (ageffcbf changes a value on ~0.26 events in 1, aoffcbf ~0.10).
    #[inline(always)]
    fn refresh_tree(&mut self, c: u32, largest: u64) {
        let cr = &self.carriers[c as usize];
        if cr.in_pool || !cr.live {
            return; // not in a carrier tree; pool_fetch enters it afresh
        }
        let o = cr.owner as usize;
        self.instances[o].ctree.update(c, largest);
        self.carriers[c as usize].tree_largest = largest;
    }

    #[inline]
    fn largest_free(&self, c: u32) -> u64 {
        self.carrier_free[c as usize]
            .as_ref()
            .map(|f| f.largest())
            .unwrap_or(0)
    }

    /// `get_free_block` (§4): the instance's own free blocks only.
    #[inline(always)]
    fn find(&self, ix: u32, blk: u64) -> Option<u32> {
        let inst = &self.instances[ix as usize];
        let s = inst.cfg.strategy;
        if s.is_aoff_family() {
            let c = inst.ctree.first_at_least(blk)?;
            self.carrier_free[c as usize]
                .as_ref()?
                .find(&self.blocks, blk, true)
        } else {
            inst.free.as_ref()?.find(&self.blocks, blk, false)
        }
    }

    // --- carriers ----------------------------------------------------------------------------

    fn attach_mbc(&mut self, ix: u32, addr: u64, size: u64, mseg: bool, main: bool) -> u32 {
        let strat = self.cfg(ix).strategy;
        let hdr = strat.mbc_header_size();
        self.births += 1;
        let c = self.new_carrier(
            Carrier {
                addr,
                size,
                mseg,
                sbc: false,
                main,
                owner: ix,
                creator: ix,
                birth: self.births,
                first: NIL,
                used: 0,
                nblocks: 0,
                in_pool: false,
                live: true,
                tree_largest: 0,
            },
            strat.block_order().map(FreeSet::for_order),
        );
        // A fresh MBC is one free block, flagged last (§3.2).
        let b = self.new_block(Block {
            addr: addr + hdr,
            size: (size - hdr) / 8 * 8,
            carrier: c,
            prev: NIL,
            next: NIL,
            free: true,
            lprev: NIL,
            lnext: NIL,
        });
        self.carriers[c as usize].first = b;
        if strat.is_aoff_family() {
            let key = self.carrier_key(c);
            self.instances[ix as usize].ctree.insert(key, 0);
        }
        self.link(c, b);
        self.refresh(c);
        let st = &mut self.instances[ix as usize].stats;
        st.mbcs.add_carrier(size, mseg);
        if mseg {
            st.calls.mseg_alloc += 1;
        } else {
            st.calls.sys_alloc += 1;
        }
        c
    }

    /// Main carrier: sys_alloc, exactly max(mmbcs, 16 KB), never freed (§1, §3.3 step 6).
    fn create_main(&mut self, env: &mut Env, ix: u32) {
        let cfg = self.cfg(ix).clone();
        let size = ceil(cfg.mmbcs.max(MIN_MBC), 8);
        let addr = if cfg.literal {
            let a = env.literal_next;
            env.literal_next += ceil(size, SACRR_UNIT);
            a
        } else if size + SACRR_UNIT < MMAP_THRESHOLD {
            env.space.brk(size, SACRR_UNIT)
        } else {
            env.space.map(size, SACRR_UNIT)
        };
        self.attach_mbc(ix, addr, size, cfg.literal, true);
    }

    /// Current MBCs of the instance, main carrier excluded (§3.3 step 4, §9.4).
    fn growth_count(&self, ix: u32) -> u64 {
        let inst = &self.instances[ix as usize];
        let has_main = inst.cfg.main_carrier && inst.cfg.mmbcs > 0;
        inst.stats.mbcs.carriers.cur - u64::from(has_main)
    }

    /// `create_carrier` for an MBC (§3.3); returns the carrier.
    pub(crate) fn create_mbc(&mut self, env: &mut Env, ix: u32, blk: u64) -> u32 {
        self.instances[ix as usize].disable_abandon = DISABLE_ABANDON;
        if self.cfg(ix).pool_enabled() {
            if let Some(c) = self.pool_fetch(ix, blk) {
                return c;
            }
        }
        let cfg = self.cfg(ix).clone();
        let hdr = cfg.strategy.mbc_header_size();
        let lmbcs = cfg.lmbcs.max(cfg.smbcs);
        let cs = self.growth_count(ix);
        let mbcgs = cfg.mbcgs.max(1);
        let mut raw = if cs >= mbcgs {
            lmbcs
        } else {
            cs * (lmbcs - cfg.smbcs) / mbcgs + cfg.smbcs
        };
        raw = raw.max(MIN_MBC).max(hdr + blk);
        if cfg.literal {
            let size = ceil(raw, SACRR_UNIT); // mmapper path: no 2^n, no cache
            let addr = env.literal_next;
            env.literal_next += size;
            return self.attach_mbc(ix, addr, size, true, false);
        }
        let st = &self.instances[ix as usize].stats;
        let mseg_ok = st.mbcs.mseg_carriers < cfg.mmmbc && env.mseg_carriers < env.globals.mmc;
        if mseg_ok || !env.globals.sac {
            let (addr, size) = env.mseg_alloc(ix as usize, raw, true);
            env.mseg_carriers += 1;
            return self.attach_mbc(ix, addr, size, true, false);
        }
        // sys_alloc MBC: no growth stages, ycs multiple, 16 KB aligned (§3.3 step 5, §9.3).
        let size = ceil((hdr + blk).max(cfg.smbcs), env.globals.ycs);
        let addr = env.space.map(size, SACRR_UNIT);
        self.attach_mbc(ix, addr, size, false, false)
    }

    fn destroy_carrier(&mut self, env: &mut Env, c: u32) {
        let cr = self.carriers[c as usize];
        debug_assert!(!cr.main, "main carriers are never destroyed");
        let b = cr.first;
        self.blocks[b as usize].free = false;
        self.spare_blocks.push(b);
        let owner = cr.owner as usize;
        if cr.sbc {
            self.instances[owner]
                .stats
                .sbcs
                .sub_carrier(cr.size, cr.mseg);
        } else if cr.in_pool {
            let cst = &mut self.instances[cr.creator as usize];
            cst.stats.pool.carriers -= 1;
            cst.stats.pool.carriers_size -= cr.size;
            cst.pooled_own -= 1;
            self.pool.retain(|&x| x != c);
        } else {
            let key = self.carrier_key(c);
            self.instances[owner].ctree.remove(key);
            self.instances[owner]
                .stats
                .mbcs
                .sub_carrier(cr.size, cr.mseg);
        }
        // Migrated carriers go home: the creator releases them (§3.5).
        let home = if cr.sbc { owner } else { cr.creator as usize };
        let st = &mut self.instances[home].stats.calls;
        if cr.mseg {
            st.mseg_dealloc += 1;
            if self.instances[home].cfg.literal {
                // literal super carrier: space is not reused in this model
            } else {
                env.mseg_dealloc(home, cr.addr, cr.size, !cr.sbc);
                if !cr.sbc {
                    env.mseg_carriers -= 1;
                }
            }
        } else {
            st.sys_free += 1;
            env.space.unmap(cr.addr, cr.size);
        }
        self.carriers[c as usize].live = false;
        self.carrier_free[c as usize] = None;
        self.spare_carriers.push(c);
    }

    fn create_sbc(&mut self, env: &mut Env, ix: u32, blk: u64) -> u32 {
        self.instances[ix as usize].disable_abandon = DISABLE_ABANDON;
        let cfg = self.cfg(ix).clone();
        let want = blk + SBC_HEADER;
        let mseg_sbcs = self.instances[ix as usize].stats.sbcs.mseg_carriers;
        let (addr, size, mseg) = if mseg_sbcs < cfg.mmsbc && !cfg.literal {
            let (a, s) = env.mseg_alloc(ix as usize, want, false);
            (a, s, true)
        } else {
            let s = ceil(want, env.globals.ycs);
            (env.space.map(s, 4096), s, false)
        };
        let c = self.new_carrier(
            Carrier {
                addr,
                size,
                mseg,
                sbc: true,
                main: false,
                owner: ix,
                creator: ix,
                birth: 0,
                first: NIL,
                used: blk,
                nblocks: 1,
                in_pool: false,
                live: true,
                tree_largest: 0,
            },
            None,
        );
        let b = self.new_block(Block {
            addr: addr + SBC_HEADER,
            size: blk,
            carrier: c,
            prev: NIL,
            next: NIL,
            free: false,
            lprev: NIL,
            lnext: NIL,
        });
        self.carriers[c as usize].first = b;
        let st = &mut self.instances[ix as usize].stats;
        st.sbcs.add_carrier(size, mseg);
        st.sbcs.blocks.add(1);
        st.sbcs.blocks_size.add(blk);
        if mseg {
            st.calls.mseg_alloc += 1;
        } else {
            st.calls.sys_alloc += 1;
        }
        b
    }

    // --- blocks ------------------------------------------------------------------------------

    /// Cut block `b` at `blk` bytes: the rest becomes a new free block right after it (not yet
    /// in any free set), returned.
    #[inline(always)]
    fn split_tail(&mut self, b: u32, blk: u64) -> u32 {
        let (addr, size, c, next) = {
            let x = &self.blocks[b as usize];
            (x.addr, x.size, x.carrier, x.next)
        };
        let r = self.new_block(remainder(b, blk, (addr, size, c, next)));
        if next != NIL {
            self.blocks[next as usize].prev = r;
        }
        self.blocks[b as usize].next = r;
        self.blocks[b as usize].size = blk;
        r
    }

    /// Hand out free block `b` (already unlinked) for `blk` bytes: split off the high end if
    /// the remainder can be a block (§4 common rules).
    #[inline(always)]
    fn carve(&mut self, b: u32, blk: u64) {
        let (size, c) = {
            let x = &self.blocks[b as usize];
            (x.size, x.carrier)
        };
        let owner = self.carriers[c as usize].owner;
        let min = self.cfg(owner).strategy.min_block_size();
        if size - blk >= min {
            let r = self.split_tail(b, blk);
            self.link(c, r);
        }
        self.blocks[b as usize].free = false;
        let got = self.blocks[b as usize].size;
        self.account(c, got as i64, 1);
    }

    /// Whether carrier `c` keeps its free blocks by address (aoff, ageffcaoff).
    #[inline(always)]
    fn addr_ordered(&self, c: u32) -> bool {
        self.addr_sets && matches!(self.carrier_free[c as usize], Some(FreeSet::Addr(_)))
    }

    #[inline(always)]
    fn addr_set(&mut self, c: u32) -> (&mut AddrSet, &mut Vec<Block>) {
        match self.carrier_free[c as usize].as_mut() {
            Some(FreeSet::Addr(t)) => (t, &mut self.blocks),
            _ => unreachable!("not an address-ordered carrier"),
        }
    }

    /// `unlink` then `carve` of a linked free block. In an address-ordered carrier the
    /// remainder takes the block's place in the set (`AddrSet::replace`): same set, no
    /// entries moved.
    #[inline(always)]
    fn take(&mut self, b: u32, blk: u64) {
        let (addr, size, c, next) = {
            let x = &self.blocks[b as usize];
            (x.addr, x.size, x.carrier, x.next)
        };
        if !self.addr_ordered(c) {
            self.take_unordered(b, blk, (addr, size, c, next));
            return;
        }
        let owner = self.carriers[c as usize].owner;
        let min = self.cfg(owner).strategy.min_block_size();
        let old = AddrSet::key_at(addr, b);
        if size - blk >= min {
            let r = self.split_tail(b, blk);
            let (t, blocks) = self.addr_set(c);
            t.replace(blocks, old, r);
        } else {
            self.unlink(c, b);
        }
        self.blocks[b as usize].free = false;
        let got = self.blocks[b as usize].size;
        self.account(c, got as i64, 1);
    }

    /// `take` where the set is not by address: `unlink`, then `carve` (`split_tail` and `link`
    /// of the remainder), with the free set and the block table looked up once. The
    /// remainder's record is made first (it may grow the table), then the same set operations
    /// in the same order.
    #[inline(always)]
    fn take_unordered(&mut self, b: u32, blk: u64, (addr, size, c, next): (u64, u64, u32, u32)) {
        let owner = self.carriers[c as usize].owner;
        let min = self.cfg(owner).strategy.min_block_size();
        let split = size - blk >= min;
        let r = if split {
            self.new_block(remainder(b, blk, (addr, size, c, next)))
        } else {
            NIL
        };
        let (fs, blocks) = self.free_set_in(c);
        let bl = &mut blocks[..];
        fs.unlink(bl, b);
        if split {
            if next != NIL {
                bl[next as usize].prev = r;
            }
            let x = &mut bl[b as usize];
            x.next = r;
            x.size = blk;
            fs.link(bl, r);
        }
        let x = &mut bl[b as usize];
        x.free = false;
        let got = x.size;
        self.account_alloc(c, got);
    }

    /// `coalesce` then `link` in an address-ordered carrier: the merged block takes the place
    /// of the free neighbour it grows from (`AddrSet::replace`), so only a free block with
    /// free blocks on both sides costs a removal. Same merges, same block records reused.
    #[inline(always)]
    fn coalesce_linked(&mut self, b: u32) -> u32 {
        let (prev, next) = (self.blocks[b as usize].prev, self.blocks[b as usize].next);
        let next_free = next != NIL && self.blocks[next as usize].free;
        let prev_free = prev != NIL && self.blocks[prev as usize].free;
        let c = self.blocks[b as usize].carrier;
        let next_key = next_free.then(|| AddrSet::key_at(self.blocks[next as usize].addr, next));
        if next_free {
            self.absorb_next(b);
        }
        let m = if prev_free {
            if let Some(k) = next_key {
                let (t, blocks) = self.addr_set(c);
                t.unlink_key(blocks, k);
            }
            self.absorb_next(prev);
            let key = AddrSet::key_at(self.blocks[prev as usize].addr, prev);
            let (t, blocks) = self.addr_set(c);
            t.replace(blocks, key, prev);
            prev
        } else {
            self.blocks[b as usize].free = true;
            let (t, blocks) = self.addr_set(c);
            match next_key {
                Some(k) => t.replace(blocks, k, b),
                None => t.link(blocks, b),
            }
            b
        };
        self.blocks[m as usize].free = true;
        m
    }

    /// Block bytes/count changes of carrier `c`, in the stats where the carrier is counted.
    #[inline(always)]
    fn account(&mut self, c: u32, bytes: i64, count: i64) {
        let cr = &mut self.carriers[c as usize];
        cr.used = (cr.used as i64 + bytes) as u64;
        cr.nblocks = (cr.nblocks as i64 + count) as u64;
        let (in_pool, owner, creator) = (cr.in_pool, cr.owner as usize, cr.creator as usize);
        if in_pool {
            let p = &mut self.instances[creator].stats.pool;
            p.blocks_size = (p.blocks_size as i64 + bytes) as u64;
            p.blocks = (p.blocks as i64 + count) as u64;
        } else {
            let m = &mut self.instances[owner].stats.mbcs;
            apply(&mut m.blocks_size, bytes);
            apply(&mut m.blocks, count);
        }
    }

    /// `account(c, size, 1)`: a block of `size` bytes enters carrier `c`.
    #[inline(always)]
    fn account_alloc(&mut self, c: u32, size: u64) {
        let cr = &mut self.carriers[c as usize];
        cr.used += size;
        cr.nblocks += 1;
        if cr.in_pool {
            let p = &mut self.instances[cr.creator as usize].stats.pool;
            p.blocks_size += size;
            p.blocks += 1;
        } else {
            let m = &mut self.instances[cr.owner as usize].stats.mbcs;
            m.blocks_size.add(size);
            m.blocks.add(1);
        }
    }

    /// `account(c, -size, -1)`: a block of `size` bytes leaves carrier `c`.
    #[inline(always)]
    fn account_free(&mut self, c: u32, size: u64) {
        let cr = &mut self.carriers[c as usize];
        cr.used -= size;
        cr.nblocks -= 1;
        if cr.in_pool {
            let p = &mut self.instances[cr.creator as usize].stats.pool;
            p.blocks_size -= size;
            p.blocks -= 1;
        } else {
            let m = &mut self.instances[cr.owner as usize].stats.mbcs;
            m.blocks_size.sub(size);
            m.blocks.sub(1);
        }
    }

    /// `mbc_alloc_block`: strategy, then pool fetch or a new carrier (block at its start).
    #[inline]
    fn mbc_alloc(&mut self, env: &mut Env, ix: u32, blk: u64) -> u32 {
        let b = match self.find(ix, blk) {
            Some(b) => b,
            None => {
                let c = self.create_mbc(env, ix, blk);
                let found = self.carrier_free[c as usize]
                    .as_ref()
                    .and_then(|f| f.find(&self.blocks, blk, true));
                match found {
                    Some(b) => b,
                    None => self.find(ix, blk).expect("new carrier fits the block"),
                }
            }
        };
        self.take(b, blk);
        let c = self.blocks[b as usize].carrier;
        self.refresh(c);
        if self.pool_on {
            // only `check_abandon` reads it, and only with the pool on
            let inst = &mut self.instances[ix as usize];
            inst.disable_abandon = (inst.disable_abandon + 8).min(DISABLE_ABANDON);
        }
        b
    }

    /// Allocate `user` bytes in instance `ix`; returns the block.
    #[inline]
    pub fn alloc(&mut self, env: &mut Env, ix: u32, user: u64) -> u32 {
        self.instances[ix as usize].stats.calls.alloc += 1;
        self.alloc_inner(env, ix, user)
    }

    #[inline]
    fn alloc_inner(&mut self, env: &mut Env, ix: u32, user: u64) -> u32 {
        let cfg = self.cfg(ix);
        let blk = cfg.block_size(user);
        // SBC iff the *user* size >= sbct (§1, §9.12).
        if user >= cfg.sbct {
            return self.create_sbc(env, ix, blk);
        }
        self.mbc_alloc(env, ix, blk)
    }

    /// Free block `b` (the carrier's owner does it, §4.9 not modelled as a delay).
    #[inline]
    pub fn free(&mut self, env: &mut Env, b: u32) {
        let c = self.blocks[b as usize].carrier;
        let owner = self.carriers[c as usize].owner;
        self.instances[owner as usize].stats.calls.free += 1;
        self.free_inner(env, c, b);
    }

    /// Free block `b` of carrier `c` (the caller has read the carrier already).
    #[inline]
    fn free_inner(&mut self, env: &mut Env, c: u32, b: u32) {
        debug_assert_eq!(self.blocks[b as usize].carrier, c);
        if self.carriers[c as usize].sbc {
            let owner = self.carriers[c as usize].owner as usize;
            let size = self.blocks[b as usize].size;
            let st = &mut self.instances[owner].stats.sbcs;
            st.blocks.sub(1);
            st.blocks_size.sub(size);
            self.destroy_carrier(env, c);
            return;
        }
        let size = self.blocks[b as usize].size;
        self.account_free(c, size);
        // Address-ordered carriers merge and link in one step (`coalesce_linked`); a carrier
        // left whole is destroyed with its free set either way.
        let whole = if self.addr_ordered(c) {
            let b = self.coalesce_linked(b);
            self.blocks[b as usize].prev == NIL && self.blocks[b as usize].next == NIL
        } else {
            self.coalesce_link(c, b)
        };
        if whole && !self.carriers[c as usize].main {
            self.destroy_carrier(env, c);
            return;
        }
        self.refresh(c);
        if self.pool_on {
            let owner = self.carriers[c as usize].owner as usize;
            let inst = &mut self.instances[owner];
            inst.disable_abandon = inst.disable_abandon.saturating_sub(10);
            self.check_abandon(c);
        }
    }

    /// Merge free block `b` (not linked) of carrier `c` with free neighbours; returns the
    /// merged block.
    #[inline(always)]
    fn coalesce(&mut self, c: u32, mut b: u32) -> u32 {
        let next = self.blocks[b as usize].next;
        if next != NIL && self.blocks[next as usize].free {
            self.unlink(c, next);
            self.absorb_next(b);
        }
        let prev = self.blocks[b as usize].prev;
        if prev != NIL && self.blocks[prev as usize].free {
            self.unlink(c, prev);
            self.absorb_next(prev);
            b = prev;
        }
        self.blocks[b as usize].free = true;
        b
    }

    /// `coalesce` then, unless the merged block is its carrier whole (returns true, nothing
    /// linked: the caller destroys a carrier left whole, or links a main carrier's block),
    /// `link`: one lookup of the free set and of the block table for the whole free, which
    /// the compiler then keeps in registers.
    #[inline(always)]
    fn coalesce_link(&mut self, c: u32, mut b: u32) -> bool {
        let Heap {
            blocks,
            carrier_free,
            instances,
            carriers,
            spare_blocks,
            ..
        } = self;
        let fs = free_set_of(carrier_free, instances, carriers, c);
        let bl = &mut blocks[..];
        let next = bl[b as usize].next;
        if next != NIL && bl[next as usize].free {
            fs.unlink(bl, next);
            absorb_next(bl, spare_blocks, b);
        }
        let prev = bl[b as usize].prev;
        if prev != NIL && bl[prev as usize].free {
            fs.unlink(bl, prev);
            absorb_next(bl, spare_blocks, prev);
            b = prev;
        }
        let x = &mut bl[b as usize];
        x.free = true;
        if x.prev == NIL && x.next == NIL && !carriers[c as usize].main {
            return true;
        }
        fs.link(bl, b);
        false
    }

    /// Block `b` takes over its physical successor.
    #[inline(always)]
    fn absorb_next(&mut self, b: u32) {
        absorb_next(&mut self.blocks, &mut self.spare_blocks, b);
    }

    /// realloc (§3.6); returns the block that now holds the data.
    pub fn realloc(&mut self, env: &mut Env, ix: u32, b: u32, user: u64) -> u32 {
        let c = self.blocks[b as usize].carrier;
        let owner = self.carriers[c as usize].owner;
        self.instances[owner as usize].stats.calls.realloc += 1;
        let cfg = self.cfg(owner).clone();
        let blk = cfg.block_size(user);
        let moved = |h: &mut Heap, env: &mut Env| {
            let nb = h.alloc_inner(env, ix, user);
            h.free_inner(env, c, b);
            nb
        };
        if cfg.ramv {
            return moved(self, env);
        }
        let cr = self.carriers[c as usize];
        if cr.sbc {
            if user < cfg.sbct {
                // Stay an SBC unless the resized carrier would waste too much (rsbcmt).
                let used = SBC_HEADER + 8 + user;
                let crr = ceil(used, if cr.mseg { SACRR_UNIT } else { env.globals.ycs });
                if 100 * (crr - used) >= cfg.rsbcmt * crr {
                    return moved(self, env);
                }
            }
            self.resize_sbc(env, c, b, blk);
            return b;
        }
        if user >= cfg.sbct || cr.in_pool {
            return moved(self, env);
        }
        let old = self.blocks[b as usize].size;
        if blk == old {
            return b;
        }
        let next = self.blocks[b as usize].next;
        let next_free = if next != NIL && self.blocks[next as usize].free {
            self.blocks[next as usize].size
        } else {
            0
        };
        let prev = self.blocks[b as usize].prev;
        let prev_free = if prev != NIL && self.blocks[prev as usize].free {
            self.blocks[prev as usize].size
        } else {
            0
        };
        if blk < old {
            if 100 * (old - blk) > cfg.rmbcmt * old {
                // Look for a better place (§3.6 shrink): the strategy's pick versus staying.
                let cand_addr = if prev_free > 0 {
                    self.blocks[prev as usize].addr
                } else {
                    self.blocks[b as usize].addr
                };
                let cand_size = old + prev_free + next_free;
                if let Some(f) = self.find(owner, blk) {
                    if self.better(owner, f, c, cand_addr, cand_size) {
                        return moved(self, env);
                    }
                }
                if prev_free > 0 {
                    return self.move_down(b, blk);
                }
            }
            self.shrink_in_place(b, blk);
            let inst = &mut self.instances[owner as usize];
            inst.disable_abandon = inst.disable_abandon.saturating_sub(2);
            self.check_abandon(c);
            return b;
        }
        if next_free > 0 && old + next_free >= blk {
            // Grow in place into the free successor.
            self.unlink(c, next);
            self.absorb_next(b);
            let total = self.blocks[b as usize].size;
            self.account(c, (total - old) as i64, 0);
            self.shrink_in_place(b, blk);
            self.refresh(c);
            return b;
        }
        if prev_free > 0 && prev_free + old + next_free >= blk {
            let cand_addr = self.blocks[prev as usize].addr;
            if let Some(f) = self.find(owner, blk) {
                if self.better(owner, f, c, cand_addr, prev_free + old + next_free) {
                    return moved(self, env);
                }
            }
            return self.move_down(b, blk);
        }
        moved(self, env)
    }

    /// Whether the strategy ranks free block `f` above the candidate at (addr, size) in
    /// carrier `c` (`cmp_cand_blk` and friends, §3.6).
    fn better(&self, ix: u32, f: u32, c: u32, cand_addr: u64, cand_size: u64) -> bool {
        let fb = &self.blocks[f as usize];
        let s = self.cfg(ix).strategy;
        if s.is_aoff_family() && fb.carrier != c {
            return self.carrier_key(fb.carrier) < self.carrier_key(c);
        }
        match s.block_order() {
            Some(BlockOrder::Addr) => fb.addr < cand_addr,
            Some(BlockOrder::SizeAddr) => (fb.size, fb.addr) < (cand_size, cand_addr),
            Some(BlockOrder::Bf) => fb.size < cand_size,
            None if s == Strategy::Aobf => (fb.size, fb.addr) < (cand_size, cand_addr),
            None => fb.size < cand_size,
        }
    }

    /// Move the data down into the free predecessor (memmove), merging the neighbours.
    fn move_down(&mut self, b: u32, blk: u64) -> u32 {
        let c = self.blocks[b as usize].carrier;
        let old = self.blocks[b as usize].size;
        self.account(c, -(old as i64), -1);
        let m = self.coalesce(c, b);
        self.carve(m, blk);
        self.refresh(c);
        m
    }

    /// Cut an allocated block down to `blk`, giving the tail to a free successor or making it a
    /// free block of its own when it is at least min_block_size.
    fn shrink_in_place(&mut self, b: u32, blk: u64) {
        let (size, c, next) = {
            let x = &self.blocks[b as usize];
            (x.size, x.carrier, x.next)
        };
        if blk >= size {
            return;
        }
        let owner = self.carriers[c as usize].owner;
        let min = self.cfg(owner).strategy.min_block_size();
        let tail = size - blk;
        let next_free = next != NIL && self.blocks[next as usize].free;
        if tail < min && !next_free {
            return;
        }
        if next_free {
            self.unlink(c, next);
        }
        let r = self.split_tail(b, blk);
        if next_free {
            self.absorb_next(r);
        }
        self.link(c, r);
        self.account(c, -(tail as i64), 0);
        self.refresh(c);
    }

    /// `resize_carrier` for an SBC (§3.6).
    fn resize_sbc(&mut self, env: &mut Env, c: u32, b: u32, blk: u64) {
        let cr = self.carriers[c as usize];
        let owner = cr.owner as usize;
        let cfg = self.cfg(cr.owner).clone();
        let old_blk = self.blocks[b as usize].size;
        let (addr, size) = if cr.mseg {
            let new_crr = ceil(blk + SBC_HEADER, SACRR_UNIT);
            let shrink = cr.size.saturating_sub(new_crr);
            if new_crr <= cr.size && shrink < cfg.asbcst && 100 * shrink < cfg.rsbcst * cr.size {
                (cr.addr, cr.size) // both thresholds hold: keep the old size (§9.15)
            } else {
                self.instances[owner].stats.calls.mseg_realloc += 1;
                env.mseg_realloc(owner, cr.addr, cr.size, new_crr)
            }
        } else {
            self.instances[owner].stats.calls.sys_realloc += 1;
            let s = ceil(blk + SBC_HEADER, env.globals.ycs);
            (env.space.remap(cr.addr, cr.size, s, 4096), s)
        };
        let st = &mut self.instances[owner].stats.sbcs;
        st.sub_carrier(cr.size, cr.mseg);
        st.add_carrier(size, cr.mseg);
        st.blocks_size.sub(old_blk);
        st.blocks_size.add(blk);
        let crm = &mut self.carriers[c as usize];
        crm.addr = addr;
        crm.size = size;
        crm.used = blk;
        self.blocks[b as usize].addr = addr + SBC_HEADER;
        self.blocks[b as usize].size = blk;
    }

    // --- carrier pool (§5) --------------------------------------------------------------------

    #[inline(always)]
    fn check_abandon(&mut self, c: u32) {
        if !self.pool_on {
            return;
        }
        let cr = &self.carriers[c as usize];
        let inst = &self.instances[cr.owner as usize];
        // The instance's tests first, as one branch: they end most calls (pure reads, so the
        // order does not change the answer).
        if !inst.pool | (inst.disable_abandon > 0) {
            return;
        }
        if cr.main || cr.in_pool || cr.sbc || !cr.live {
            return;
        }
        self.check_abandon_carrier(c);
    }

    /// `check_abandon_carrier` past the cheap tests: utilisation and room in the pool (§5).
    fn check_abandon_carrier(&mut self, c: u32) {
        let cr = &self.carriers[c as usize];
        let inst = &self.instances[cr.owner as usize];
        let cfg = &inst.cfg;
        let m = &inst.stats.mbcs;
        if m.blocks_size.cur * 100 > cfg.acul * m.carriers_size.cur {
            return;
        }
        let creator = &self.instances[cr.creator as usize];
        if creator.pooled_own >= creator.cfg.acnl {
            return;
        }
        if cr.used * 100 > cfg.acul * cr.size || self.largest_free(c) < cfg.acfml {
            return;
        }
        self.abandon(c);
    }

    fn abandon(&mut self, c: u32) {
        let key = self.carrier_key(c);
        let cr = self.carriers[c as usize];
        let owner = cr.owner as usize;
        self.instances[owner].ctree.remove(key);
        let m = &mut self.instances[owner].stats.mbcs;
        m.sub_carrier(cr.size, cr.mseg);
        m.blocks.sub(cr.nblocks);
        m.blocks_size.sub(cr.used);
        // Homecoming: a pooled carrier is accounted to, and owned by, its creator (§5).
        let home = &mut self.instances[cr.creator as usize];
        home.pooled_own += 1;
        home.stats.pool.abandoned += 1;
        let p = &mut home.stats.pool;
        p.carriers += 1;
        p.carriers_size += cr.size;
        p.blocks += cr.nblocks;
        p.blocks_size += cr.used;
        let crm = &mut self.carriers[c as usize];
        crm.in_pool = true;
        crm.owner = cr.creator;
        // `cpool_insert`: right after the first element, i.e. near the head.
        let at = self.pool.len().min(1);
        self.pool.insert(at, c);
    }

    /// `cpool_fetch`: own pooled carriers in carrier-tree order, then the shared list from the
    /// tail; at most FETCH_LIMIT inspections (§5).
    fn pool_fetch(&mut self, ix: u32, blk: u64) -> Option<u32> {
        let mut own: Vec<u32> = self
            .pool
            .iter()
            .copied()
            .filter(|&c| self.carriers[c as usize].creator == ix)
            .collect();
        own.sort_by_key(|&c| {
            let cr = &self.carriers[c as usize];
            if self.cfg(ix).strategy.age_ordered() {
                cr.birth
            } else {
                cr.addr
            }
        });
        let mut pick = None;
        for &c in own.iter().chain(self.pool.iter().rev()).take(FETCH_LIMIT) {
            if self.largest_free(c) >= blk {
                pick = Some(c);
                break;
            }
            self.instances[ix as usize].stats.pool.skip_size += 1;
        }
        let Some(c) = pick else {
            self.instances[ix as usize].stats.pool.fail += 1;
            return None;
        };
        self.pool.retain(|&x| x != c);
        let cr = self.carriers[c as usize];
        let home = &mut self.instances[cr.creator as usize];
        home.pooled_own -= 1;
        let p = &mut home.stats.pool;
        p.carriers -= 1;
        p.carriers_size -= cr.size;
        p.blocks -= cr.nblocks;
        p.blocks_size -= cr.used;
        let crm = &mut self.carriers[c as usize];
        crm.in_pool = false;
        crm.owner = ix;
        let inst = &mut self.instances[ix as usize];
        inst.stats.pool.fetch += 1;
        let m = &mut inst.stats.mbcs;
        m.add_carrier(cr.size, cr.mseg);
        m.blocks.add(cr.nblocks);
        m.blocks_size.add(cr.used);
        let key = self.carrier_key(c);
        let largest = self.largest_free(c);
        self.instances[ix as usize].ctree.insert(key, largest);
        self.carriers[c as usize].tree_largest = largest;
        Some(c)
    }

    // --- inspection --------------------------------------------------------------------------

    /// Ask for block `b`'s record, or (`neighbours`) those of the blocks beside it (a hint:
    /// replay.rs AHEAD).
    #[inline(always)]
    pub(crate) fn prefetch_block(&self, b: u32, what: Ahead) {
        let Some(x) = self.blocks.get(b as usize) else {
            return;
        };
        if what == Ahead::Block {
            crate::replay::prefetch(x);
            return;
        }
        for n in [x.prev, x.next] {
            if let Some(y) = self.blocks.get(n as usize) {
                crate::replay::prefetch(y);
            }
        }
    }

    pub fn block(&self, b: u32) -> &Block {
        &self.blocks[b as usize]
    }

    /// Live carriers (for invariant checks and carrier-level reports).
    pub fn live_carriers(&self) -> impl Iterator<Item = (u32, &Carrier)> {
        self.carriers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.live)
            .map(|(i, c)| (i as u32, c))
    }

    /// Blocks of a carrier in address order.
    pub fn carrier_blocks(&self, c: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut b = self.carriers[c as usize].first;
        while b != NIL {
            out.push(b);
            b = self.blocks[b as usize].next;
        }
        out
    }

    /// Bytes in carriers owned or pooled by this allocator.
    pub fn carriers_size(&self) -> u64 {
        self.instances
            .iter()
            .map(|i| {
                i.stats.mbcs.carriers_size.cur
                    + i.stats.sbcs.carriers_size.cur
                    + i.stats.pool.carriers_size
            })
            .sum()
    }

    pub fn blocks_size(&self) -> u64 {
        self.instances
            .iter()
            .map(|i| {
                i.stats.mbcs.blocks_size.cur
                    + i.stats.sbcs.blocks_size.cur
                    + i.stats.pool.blocks_size
            })
            .sum()
    }
}

/// `Heap::free_set_in` on the fields it needs (for callers that hold other fields too).
#[inline(always)]
fn free_set_of<'a>(
    carrier_free: &'a mut [Option<FreeSet>],
    instances: &'a mut [Instance],
    carriers: &[Carrier],
    c: u32,
) -> &'a mut FreeSet {
    match carrier_free[c as usize].as_mut() {
        Some(fs) => fs,
        None => {
            let o = carriers[c as usize].owner as usize;
            instances[o].free.as_mut().expect("instance free set")
        }
    }
}

/// `Heap::absorb_next` on the block table alone (for callers that hold a free set too).
#[inline(always)]
fn absorb_next(bl: &mut [Block], spare: &mut Vec<u32>, b: u32) {
    let n = bl[b as usize].next;
    let (nsize, nnext) = (bl[n as usize].size, bl[n as usize].next);
    bl[b as usize].size += nsize;
    bl[b as usize].next = nnext;
    if nnext != NIL {
        bl[nnext as usize].prev = b;
    }
    bl[n as usize].free = false;
    spare.push(n);
}

fn apply(cm: &mut crate::stats::Cm, delta: i64) {
    if delta >= 0 {
        cm.add(delta as u64)
    } else {
        cm.sub((-delta) as u64)
    }
}

/// The free block left after the first `blk` bytes of block `b` (at `addr`, `size` bytes, in
/// carrier `c`, followed by `next`): in no free set yet.
#[inline(always)]
fn remainder(b: u32, blk: u64, (addr, size, c, next): (u64, u64, u32, u32)) -> Block {
    Block {
        addr: addr + blk,
        size: size - blk,
        carrier: c,
        prev: b,
        next,
        free: true,
        lprev: NIL,
        lnext: NIL,
    }
}
