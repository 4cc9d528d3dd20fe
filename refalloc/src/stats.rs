//! Per-instance statistics with the fields of `erlang:system_info({allocator, A})` (docs/erts/alloc_util.md §6.1).

/// A value with its maximum (replay never resets "max since last", so both maxima are equal).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cm {
    pub cur: u64,
    pub max: u64,
}

impl Cm {
    pub fn add(&mut self, v: u64) {
        self.cur += v;
        self.max = self.max.max(self.cur);
    }
    pub fn sub(&mut self, v: u64) {
        debug_assert!(self.cur >= v, "statistic below zero");
        self.cur -= v;
    }
}

/// `mbcs` or `sbcs` of one instance.
#[derive(Clone, Debug, Default)]
pub struct Section {
    pub blocks: Cm,
    pub blocks_size: Cm,
    pub carriers: Cm,
    pub carriers_size: Cm,
    pub mseg_carriers: u64,
    pub sys_carriers: u64,
    pub mseg_carriers_size: u64,
    pub sys_carriers_size: u64,
}

impl Section {
    pub fn add_carrier(&mut self, size: u64, mseg: bool) {
        self.carriers.add(1);
        self.carriers_size.add(size);
        if mseg {
            self.mseg_carriers += 1;
            self.mseg_carriers_size += size;
        } else {
            self.sys_carriers += 1;
            self.sys_carriers_size += size;
        }
    }
    pub fn sub_carrier(&mut self, size: u64, mseg: bool) {
        self.carriers.sub(1);
        self.carriers_size.sub(size);
        if mseg {
            self.mseg_carriers -= 1;
            self.mseg_carriers_size -= size;
        } else {
            self.sys_carriers -= 1;
            self.sys_carriers_size -= size;
        }
    }
}

/// `mbcs_pool`: carriers this instance created that now sit in the pool, and the counters.
#[derive(Clone, Debug, Default)]
pub struct PoolStats {
    pub blocks: u64,
    pub blocks_size: u64,
    pub carriers: u64,
    pub carriers_size: u64,
    pub fetch: u64,
    pub fail: u64,
    pub skip_size: u64,
    pub abandoned: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Calls {
    pub alloc: u64,
    pub free: u64,
    pub realloc: u64,
    pub mseg_alloc: u64,
    pub mseg_dealloc: u64,
    pub mseg_realloc: u64,
    pub sys_alloc: u64,
    pub sys_free: u64,
    pub sys_realloc: u64,
}

#[derive(Clone, Debug, Default)]
pub struct InstStats {
    pub mbcs: Section,
    pub sbcs: Section,
    pub pool: PoolStats,
    pub calls: Calls,
}
