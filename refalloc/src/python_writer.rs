//! The pyo3 surface of `trace::TraceWriter` for the Python generators (refalloc/tracegen.py):
//! `TraceWriter(path, header_json)`, `write_many(events)`, `finish() -> count`. The bytes are
//! those of `beamalloc.trace.TraceWriter` (the same encoding, docs/trace-format.md); a
//! prediction writes hundreds of thousands of events per fitted trace, and encoding each in
//! Python cost a fifth of `recommend`'s CPU on a node predicted from its carriers.
// pyo3 0.22's `#[pymethods]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::trace::{Event, Op, TraceWriter};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::fs::File;
use std::io::BufWriter;

/// An event as `beamalloc.trace.Event` holds it: (t_ns, op, allocator, instance, type, size,
/// id, new_id, thread).
type Row = (u64, u8, u64, u64, u64, u64, u64, u64, u64);

#[pyclass(name = "TraceWriter")]
pub struct PyTraceWriter {
    w: Option<TraceWriter<BufWriter<File>>>,
    path: String,
}

fn io_err(path: &str, e: std::io::Error) -> PyErr {
    PyValueError::new_err(format!("{path}: {e}"))
}

#[pymethods]
impl PyTraceWriter {
    #[new]
    fn new(path: &str, header_json: &str) -> PyResult<Self> {
        let f = File::create(path).map_err(|e| io_err(path, e))?;
        let w = TraceWriter::new(BufWriter::new(f), header_json).map_err(|e| io_err(path, e))?;
        Ok(PyTraceWriter {
            w: Some(w),
            path: path.to_owned(),
        })
    }

    /// Append `rows` (events in trace order) to the trace.
    fn write_many(&mut self, py: Python<'_>, rows: Vec<Row>) -> PyResult<()> {
        let path = self.path.clone();
        let w = self
            .w
            .as_mut()
            .ok_or_else(|| PyValueError::new_err(format!("{path}: the trace is finished")))?;
        py.allow_threads(|| {
            for (i, r) in rows.iter().enumerate() {
                let op = match r.1 {
                    0 => Op::Alloc,
                    1 => Op::Free,
                    2 => Op::Realloc,
                    n => {
                        return Err(format!(
                            "event {}: op {n} is not alloc/free/realloc",
                            w.count + i as u64
                        ))
                    }
                };
                let e = Event {
                    t_ns: r.0,
                    op,
                    allocator: r.2,
                    instance: r.3,
                    type_: r.4,
                    size: r.5,
                    id: r.6,
                    new_id: r.7,
                    thread: r.8,
                };
                w.write(&e).map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .map_err(|e| PyValueError::new_err(format!("{path}: {e}")))
    }

    /// Write the END record and close the file; returns the event count.
    fn finish(&mut self) -> PyResult<u64> {
        match self.w.take() {
            Some(w) => {
                let n = w.count;
                w.finish().map_err(|e| io_err(&self.path, e))?;
                Ok(n)
            }
            None => Err(PyValueError::new_err(format!(
                "{}: the trace is finished",
                self.path
            ))),
        }
    }
}
