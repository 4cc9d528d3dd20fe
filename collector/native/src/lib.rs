//! beamalloc-formats: the native readers and writers of the formats the collector reads, apart
//! from the replay model (refalloc), which reads only traces. One Python extension still:
//! refalloc's `_refalloc` module registers these functions (`python::register`).
//!
//! Modules: `etf` (the external term format decoder behind collector/etf.py), `term_text` (the
//! term text writer behind collector/terms.py's format_term), `dumpscan` (a crash dump's section
//! headers and the =proc values, behind collector/dumpscan.py and procdump.py).
pub mod dumpscan;
#[cfg(feature = "python")]
pub mod etf;
#[cfg(feature = "python")]
mod python_dumpscan;
#[cfg(feature = "python")]
pub mod term_text;

#[cfg(feature = "python")]
pub mod python {
    use pyo3::prelude::*;

    /// Add this crate's functions to the extension module `m`.
    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add_function(wrap_pyfunction!(crate::etf::etf_decode, m)?)?;
        m.add_function(wrap_pyfunction!(crate::term_text::term_text, m)?)?;
        m.add_class::<crate::python_dumpscan::DumpWant>()?;
        m.add_class::<crate::python_dumpscan::DumpScan>()?;
        Ok(())
    }
}
