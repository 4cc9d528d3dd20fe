//! The pyo3 surface of `history.rs`: `history_trace(path, header_json, params) -> events`.
use crate::history::{write, Params};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn get(d: &Bound<'_, PyDict>, key: &str) -> PyResult<u64> {
    d.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("history: missing key {key:?}")))?
        .extract()
}

/// An optional key of `d`, `default` where it is absent.
fn opt(d: &Bound<'_, PyDict>, key: &str, default: u64) -> PyResult<u64> {
    d.get_item(key)?.map_or(Ok(default), |v| v.extract())
}

/// Write a history trace (`params`: live, peak, before, after, passes, stragglers, lo, hi,
/// allocator, type, instances, seed; optional: rebuild, phase); returns its event count.
#[pyfunction]
pub fn history_trace(
    py: Python<'_>,
    path: &str,
    header_json: &str,
    params: &Bound<'_, PyDict>,
) -> PyResult<u64> {
    let p = Params {
        live: get(params, "live")?,
        peak: get(params, "peak")?,
        before: get(params, "before")?,
        after: get(params, "after")?,
        passes: get(params, "passes")? != 0,
        stragglers: get(params, "stragglers")?,
        rebuild: opt(params, "rebuild", 0)? != 0,
        phase: opt(params, "phase", 500)?,
        lo: get(params, "lo")?,
        hi: get(params, "hi")?,
        allocator: get(params, "allocator")?,
        type_: get(params, "type")?,
        instances: get(params, "instances")?,
        seed: get(params, "seed")?,
    };
    py.allow_threads(|| write(path, header_json, p))
        .map_err(|e| PyValueError::new_err(format!("{path}: {e}")))
}
