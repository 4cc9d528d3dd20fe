//! The pyo3 surface of `trace::TraceWriter` for the Python generators (refalloc/tracegen.py):
//! `TraceWriter(path or binary stream, header_json)`, `write_many(events)`, `finish() -> count`;
//! `beamalloc.trace.TraceWriter` writes through it too (docs/trace-format.md). A
//! prediction writes hundreds of thousands of events per fitted trace, and encoding each in
//! Python cost a fifth of `recommend`'s CPU on a node predicted from its carriers.
// pyo3 0.22's `#[pymethods]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::trace::{Event, Op, TraceWriter};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Write};

/// A Python binary stream written to (its `write`, under the GIL).
struct PyWrite(Py<PyAny>);

impl Write for PyWrite {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Python::with_gil(|py| {
            self.0
                .call_method1(py, "write", (pyo3::types::PyBytes::new_bound(py, buf),))
                .map_err(|e| std::io::Error::other(e.value_bound(py).to_string()))?;
            Ok(buf.len())
        })
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Python::with_gil(|py| {
            self.0
                .call_method0(py, "flush")
                .map_err(|e| std::io::Error::other(e.value_bound(py).to_string()))?;
            Ok(())
        })
    }
}

/// An event as `beamalloc.trace.Event` holds it: (t_ns, op, allocator, instance, type, size,
/// id, new_id, thread).
type Row = (u64, u8, u64, u64, u64, u64, u64, u64, u64);

#[pyclass(name = "TraceWriter")]
pub struct PyTraceWriter {
    w: Option<TraceWriter<Box<dyn Write + Send>>>,
    path: String,
}

fn io_err(path: &str, e: std::io::Error) -> PyErr {
    PyValueError::new_err(format!("{path}: {e}"))
}

#[pymethods]
impl PyTraceWriter {
    #[new]
    fn new(path: &Bound<'_, PyAny>, header_json: &str) -> PyResult<Self> {
        let (out, path): (Box<dyn Write + Send>, String) = match path.extract::<String>() {
            Ok(p) => {
                let f = File::create(&p).map_err(|e| io_err(&p, e))?;
                (Box::new(BufWriter::new(f)), p)
            }
            Err(_) => (Box::new(PyWrite(path.clone().unbind())), "<stream>".into()),
        };
        let w = TraceWriter::new(out, header_json).map_err(|e| io_err(&path, e))?;
        Ok(PyTraceWriter { w: Some(w), path })
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
