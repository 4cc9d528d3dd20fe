//! The pyo3 surface of dumpscan.rs: `DumpWant(specs).search(data, start) -> int` and
//! `DumpWant(specs).values(text) -> [str | None]` (the specs' names as `Key: ` line prefixes).
// pyo3 0.22's `#[pymethods]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::dumpscan::{self, Want};
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

    /// For each spec, the rest of the first line of `text` starting with its name, or None
    /// (dumpscan.rs `line_values`).
    fn values<'a>(&self, text: &'a str) -> Vec<Option<&'a str>> {
        // the names are ASCII and lines end at '\n': every bound is a char boundary
        self.want.line_values(text.as_bytes()).into_iter().map(|r| r.map(|(a, b)| &text[a..b]))
            .collect()
    }

    /// `values` stripped as Python strips, the first `ints` of them read as counts of at most
    /// `max` where they are: (the values, the index of the first present one of those that is
    /// no such count, or -1) (dumpscan.Keys.parsed).
    fn parsed(&self, py: Python<'_>, text: &str, ints: usize, max: u128) -> (Vec<PyObject>, i64) {
        let mut bad = -1;
        let out = self.want.line_values(text.as_bytes()).into_iter().enumerate().map(|(i, r)| {
            let Some((a, b)) = r else { return py.None() };
            let v = &text[a..b];
            if i < ints {
                if let Some(x) = dumpscan::count(v, max) {
                    return x.into_py(py);
                }
                if bad < 0 {
                    bad = i as i64;
                }
            }
            v.trim_matches(dumpscan::py_space).into_py(py)
        });
        (out.collect(), bad)
    }
}
