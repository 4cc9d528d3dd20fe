//! The carrier map of a replay's end state, shaped like `instrument:carriers/1` as the snapshot
//! stores it (docs/snapshot-schema.md, "carriers"): the prediction compares the fill of the
//! replayed carriers with the node's (advice/predict.py, calibration).
use crate::heap::Heap;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// One dict per live carrier of every heap: allocator, instance, size, blocks, blocks_size,
/// in_pool, sbc.
pub fn carrier_map(py: Python<'_>, heaps: &[Option<Heap>], names: &[String]) -> PyResult<PyObject> {
    let out = PyList::empty_bound(py);
    for (n, h) in heaps.iter().enumerate() {
        let Some(h) = h else { continue };
        for (_, c) in h.live_carriers() {
            let d = PyDict::new_bound(py);
            d.set_item("allocator", &names[n])?;
            d.set_item("instance", h.instances[c.owner as usize].cfg.instance)?;
            d.set_item("size", c.size)?;
            d.set_item("blocks", c.nblocks)?;
            d.set_item("blocks_size", c.used)?;
            d.set_item("in_pool", c.in_pool)?;
            d.set_item("sbc", c.sbc)?;
            out.append(d)?;
        }
    }
    Ok(out.into_py(py))
}
