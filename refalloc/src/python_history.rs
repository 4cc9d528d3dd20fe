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

/// Write a history trace (`params`: live, peak, before, after, passes, stragglers, [rebuild], lo, hi, allocator,
/// type, instances, seed); returns its event count.
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
        rebuild: params
            .get_item("rebuild")?
            .map_or(Ok(0), |v| v.extract::<u64>())?
            != 0,
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
