//! The pyo3 surface of the CSV fast path (csv.rs):
//! `csv_rows(path, (offset, line, types, next_type), dst=None, header_json=None) -> dict`.
// pyo3 0.22's `#[pyfunction]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::csv::{read_rows, Types};
use crate::python::CsvRows;
use crate::trace::TraceWriter;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom};

/// Read the rows of a CSV trace from byte `offset` (after the header; `line` = its last line)
/// with the header's type table `types` (name -> number); new type names are numbered from
/// `next_type` (python.rs's `CsvRows`). With `dst` and `header_json`, also write the events as a binary trace there.
/// Returns {"events", "types": [(name, number, allocator)...], "declined": line or None}; on a
/// declined row `dst` is incomplete and the caller reads the file with the reference reader.
#[pyfunction]
#[pyo3(signature = (path, rows, dst = None, header_json = None))]
pub fn csv_rows(
    py: Python<'_>,
    path: &str,
    rows: CsvRows,
    dst: Option<&str>,
    header_json: Option<&str>,
) -> PyResult<PyObject> {
    let (offset, line, types, next_type) = rows;
    let mut t = Types::new(types, next_type);
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let input = f;
    let outcome = py.allow_threads(|| -> std::io::Result<_> {
        match (dst, header_json) {
            (Some(dst), Some(header)) => {
                let out = BufWriter::with_capacity(1 << 20, File::create(dst)?);
                let mut w = TraceWriter::new(out, header)?;
                let r = read_rows(input, line, &mut t, |e| w.write(e))?;
                if r.is_ok() {
                    w.finish()?;
                }
                Ok(r)
            }
            _ => read_rows(input, line, &mut t, |_| Ok(())),
        }
    })?;
    let d = PyDict::new_bound(py);
    match outcome {
        Ok(n) => {
            d.set_item("events", n)?;
            d.set_item("declined", py.None())?;
        }
        Err(declined) => {
            d.set_item("events", py.None())?;
            d.set_item("declined", declined.0)?;
        }
    }
    d.set_item("types", t.added)?;
    Ok(d.into_py(py))
}
