//! What the examples share: the bench's configuration (examples/bench.rs), which the placement
//! digest (examples/placement.rs) must replay under too.
use _refalloc::config::{InstanceConfig, Strategy};

/// The three instances every bench replay runs: 10 schedulers' defaults, atags on, small
/// carriers, and the pool on for the address-ordered family.
pub fn configs(strategy: Strategy) -> Vec<InstanceConfig> {
    (0..3)
        .map(|ix| {
            let mut c = InstanceConfig::default_for(10, ix);
            c.strategy = strategy;
            c.atags = true;
            (c.mmbcs, c.smbcs, c.lmbcs) = (64 << 10, 512 << 10, 5 << 20);
            if ix > 0 && strategy.is_aoff_family() {
                (c.acul, c.acnl, c.cp) = (60, 1000, Some('B'));
            }
            c
        })
        .collect()
}
