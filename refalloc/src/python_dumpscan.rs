//! The pyo3 surface of dumpscan.rs: `DumpWant(specs).search(data, start) -> int`.
// pyo3 0.22's `#[pymethods]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::dumpscan::Want;
use pyo3::prelude::*;

/// The headers a crash dump reader keeps: `specs` is [(name, whole_line)] (dumpscan.rs).
#[pyclass(frozen)]
pub struct DumpWant {
    want: Want,
}

#[pymethods]
impl DumpWant {
    #[new]
    fn new(specs: Vec<(Vec<u8>, bool)>) -> DumpWant {
        DumpWant { want: Want::new(specs) }
    }

    /// The index of the '\n' of the first kept "\n=HEADER" at or after `start`, or -1.
    fn search(&self, data: &[u8], start: usize) -> i64 {
        match self.want.search(data, start) {
            Some(i) => i as i64,
            None => -1,
        }
    }
}
