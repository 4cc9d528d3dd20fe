//! refalloc: a reference model of OTP's alloc_util (docs/erts/alloc_util.md).
//!
//! Modules: `config` (resolved options), `tree` (augmented treap), `ctree` (the aoff
//! family's carrier tree), `addr_runs` (aobf's
//! equal-size blocks), `addrset` (an aoff carrier's free blocks), `freelist` (strategy
//! structures), `addr` (top-down address model),
//! `mseg` (segment cache), `heap` (blocks, carriers, alloc/free/realloc, pool), `stats`,
//! `trace` (the binary format: reader, writer), `csv` (the CSV reader), `replay`, `fuzzing` (the fuzz
//! targets' bodies). The collector's formats (the ETF decoder, the term text writer, the crash
//! dump scanner) are their own crate, collector/native (beamalloc-formats), a member of this
//! workspace: the one extension module below registers its functions too.
pub mod addr;
pub mod addr_runs;
pub mod addrset;
pub mod config;
pub mod csv;
pub mod ctree;
pub mod freelist;
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
pub mod heap;
pub mod history;
pub mod mseg;
pub mod replay;
pub mod stats;
pub mod trace;
pub mod tree;

#[cfg(test)]
mod tests;

#[cfg(feature = "python")]
mod python;
#[cfg(feature = "python")]
mod python_carriers;
#[cfg(feature = "python")]
mod python_history;
#[cfg(feature = "python")]
mod python_trace;
#[cfg(feature = "python")]
mod python_writer;

#[cfg(feature = "python")]
use pyo3::prelude::*;

#[cfg(feature = "python")]
#[pymodule]
fn _refalloc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Version of the replay model, stated so snapshots can say which model produced them.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(python::replay, m)?)?;
    // the collector's formats (ETF, term text): their own crate, collector/native
    formats::python::register(m)?;
    m.add_function(wrap_pyfunction!(python_history::history_trace, m)?)?;
    m.add_function(wrap_pyfunction!(python_history::history_replays, m)?)?;
    m.add_class::<python_writer::PyTraceWriter>()?;
    m.add_class::<python_trace::PyTraceFile>()?;
    Ok(())
}
