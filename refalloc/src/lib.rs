//! refalloc: a reference model of OTP's alloc_util (shared/reference/alloc_util.md).
use pyo3::prelude::*;

/// Version of the replay model, stated so snapshots can say which model produced them.
#[pymodule]
fn _refalloc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
