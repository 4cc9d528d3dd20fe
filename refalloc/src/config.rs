//! Options of one allocator instance and the node-wide settings, already resolved (defaults,
//! flags, scheduler scaling) by beamalloc/flags.py; this side only consumes them.

/// Placement strategies (docs/erts/alloc_util.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Bf,
    Aobf,
    Aoff,
    Aoffcbf,
    Aoffcaobf,
    Ageffcaoff,
    Ageffcbf,
    Ageffcaobf,
    Gf,
    Af,
}

/// Block order inside one carrier for the aoff family (§4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOrder {
    Addr,
    SizeAddr,
    Bf,
}

impl Strategy {
    /// Every strategy, in the order of the `as` option (docs/erts/alloc_util.md §2.1).
    pub const ALL: [Strategy; 10] = [
        Strategy::Bf,
        Strategy::Aobf,
        Strategy::Aoff,
        Strategy::Aoffcbf,
        Strategy::Aoffcaobf,
        Strategy::Ageffcaoff,
        Strategy::Ageffcbf,
        Strategy::Ageffcaobf,
        Strategy::Gf,
        Strategy::Af,
    ];

    pub fn parse(s: &str) -> Option<Strategy> {
        Some(match s {
            "bf" => Strategy::Bf,
            "aobf" => Strategy::Aobf,
            "aoff" => Strategy::Aoff,
            "aoffcbf" => Strategy::Aoffcbf,
            "aoffcaobf" => Strategy::Aoffcaobf,
            "ageffcaoff" => Strategy::Ageffcaoff,
            "ageffcbf" => Strategy::Ageffcbf,
            "ageffcaobf" => Strategy::Ageffcaobf,
            "gf" => Strategy::Gf,
            "af" => Strategy::Af,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Bf => "bf",
            Strategy::Aobf => "aobf",
            Strategy::Aoff => "aoff",
            Strategy::Aoffcbf => "aoffcbf",
            Strategy::Aoffcaobf => "aoffcaobf",
            Strategy::Ageffcaoff => "ageffcaoff",
            Strategy::Ageffcbf => "ageffcbf",
            Strategy::Ageffcaobf => "ageffcaobf",
            Strategy::Gf => "gf",
            Strategy::Af => "af",
        }
    }

    /// Carrier-aware strategies with per-carrier block trees (§4.3).
    pub fn is_aoff_family(self) -> bool {
        self.block_order().is_some()
    }

    pub fn block_order(self) -> Option<BlockOrder> {
        match self {
            Strategy::Aoff | Strategy::Ageffcaoff => Some(BlockOrder::Addr),
            Strategy::Aoffcaobf | Strategy::Ageffcaobf => Some(BlockOrder::SizeAddr),
            Strategy::Aoffcbf | Strategy::Ageffcbf => Some(BlockOrder::Bf),
            _ => None,
        }
    }

    /// Carrier tree keyed by birth time, then address (`ageff*`), else by address (§4.3).
    pub fn age_ordered(self) -> bool {
        matches!(
            self,
            Strategy::Ageffcaoff | Strategy::Ageffcbf | Strategy::Ageffcaobf
        )
    }

    /// `min_block_size` on 64-bit (§3.1 table).
    pub fn min_block_size(self) -> u64 {
        match self {
            Strategy::Bf => 64,
            Strategy::Aobf => 56,
            Strategy::Gf | Strategy::Af => 40,
            _ => 64,
        }
    }

    /// `MBC_HEADER_SIZE` on OTP 25 64-bit: 368 B, 440 B for the aoff family (§3.2).
    pub fn mbc_header_size(self) -> u64 {
        if self.is_aoff_family() {
            440
        } else {
            368
        }
    }
}

/// Options of one instance, in bytes (the fields of `system_info` options, §6.1).
#[derive(Clone, Debug)]
pub struct InstanceConfig {
    pub alloc_no: u32,
    pub instance: u32,
    pub strategy: Strategy,
    pub atags: bool,
    pub ramv: bool,
    pub sbct: u64,
    pub asbcst: u64,
    pub rsbcst: u64,
    pub rsbcmt: u64,
    pub rmbcmt: u64,
    pub mmbcs: u64,
    pub mmmbc: u64,
    pub mmsbc: u64,
    pub lmbcs: u64,
    pub smbcs: u64,
    pub mbcgs: u64,
    pub acul: u64,
    pub acnl: u64,
    pub acfml: u64,
    /// Carrier pool letter; None when the instance has no pool.
    pub cp: Option<char>,
    pub mbsd: u64,
    pub main_carrier: bool,
    /// literal_alloc: carriers in the literal super carrier, no 2^n rounding, no cache (§3.3).
    pub literal: bool,
}

impl InstanceConfig {
    /// OTP 25 defaults of a pooled scheduler instance of binary_alloc with one scheduler; tests
    /// and callers override fields.
    pub fn default_for(alloc_no: u32, instance: u32) -> Self {
        InstanceConfig {
            alloc_no,
            instance,
            strategy: Strategy::Aoffcbf,
            atags: false,
            ramv: false,
            sbct: 512 * 1024,
            asbcst: 4_145_152,
            rsbcst: 20,
            rsbcmt: 80,
            rmbcmt: 50,
            mmbcs: 128 * 1024,
            mmmbc: u64::MAX,
            mmsbc: 256,
            lmbcs: 10 << 20,
            smbcs: 1 << 20,
            mbcgs: 10,
            acul: 0,
            acnl: 0,
            acfml: 0,
            cp: None,
            mbsd: 3,
            main_carrier: true,
            literal: false,
        }
    }

    pub fn pool_enabled(&self) -> bool {
        self.acul > 0 && self.acnl > 0 && self.cp.is_some() && self.strategy.is_aoff_family()
    }

    /// `UMEMSZ2BLKSZ` (§3.1): header word, atag word, 8-byte units, at least min_block_size.
    pub fn block_size(&self, user: u64) -> u64 {
        let need = 8 + if self.atags { 8 } else { 0 } + user;
        let min = self.strategy.min_block_size();
        if need <= min {
            min
        } else {
            ceil(need, 8)
        }
    }
}

/// Node-wide settings (§2.2).
#[derive(Clone, Debug)]
pub struct Globals {
    pub mcs: usize,
    pub amcbf: u64,
    pub rmcbf: u64,
    pub ycs: u64,
    pub mmc: u64,
    pub sac: bool,
    /// Super carrier size; non-zero reverses the address order of mseg carriers (§3.8).
    pub scs: u64,
}

impl Default for Globals {
    fn default() -> Self {
        Globals {
            mcs: 10,
            amcbf: 4096 * 1024,
            rmcbf: 20,
            ycs: 1 << 20,
            mmc: u64::MAX,
            sac: true,
            scs: 0,
        }
    }
}

pub fn ceil(v: u64, unit: u64) -> u64 {
    v.div_ceil(unit) * unit
}

pub fn ceil_2pow(v: u64) -> u64 {
    v.next_power_of_two()
}
