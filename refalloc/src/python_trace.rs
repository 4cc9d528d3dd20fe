//! The pyo3 surface of the one trace reader (trace.rs for binary, csv.rs for CSV):
//! `TraceFile(f, where, allow_truncated, chunk, checked)` over an open binary stream, which
//! `beamalloc.trace` wraps (`open_trace`, `open_trace_stream`, `convert`). The stream's format is
//! told by its first bytes here; the header's JSON is handed back raw, for
//! `TraceHeader.from_json`; events come back in batches of tuples.
// pyo3 0.22's `#[pymethods]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::csv::CsvReader;
use crate::trace::{Event, Op, TraceError, TraceReader, TraceWriter, MAGIC};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::HashMap;
use std::io::{Cursor, Read};

/// An event as `beamalloc.trace.Event` holds it: (t_ns, op, allocator, instance, type, size,
/// id, new_id, thread).
pub type Row = (u64, u8, u64, u64, u64, u64, u64, u64, u64);

pub fn row(e: &Event) -> Row {
    let op = match e.op {
        Op::Alloc => 0,
        Op::Free => 1,
        Op::Realloc => 2,
    };
    (
        e.t_ns,
        op,
        e.allocator,
        e.instance,
        e.type_,
        e.size,
        e.id,
        e.new_id,
        e.thread,
    )
}

/// A Python binary stream read `chunk` bytes at a time (under the GIL the caller holds).
pub struct PyRead {
    f: Py<PyAny>,
    chunk: usize,
}

impl Read for PyRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Python::with_gil(|py| {
            let n = buf.len().min(self.chunk);
            let got = self
                .f
                .call_method1(py, "read", (n,))
                .map_err(|e| std::io::Error::other(e.value_bound(py).to_string()))?;
            let b: &[u8] = got
                .extract(py)
                .map_err(|e| std::io::Error::other(e.value_bound(py).to_string()))?;
            let n = b.len().min(buf.len());
            buf[..n].copy_from_slice(&b[..n]);
            Ok(n)
        })
    }
}

type Input = std::io::Chain<Cursor<Vec<u8>>, PyRead>;

enum Reader {
    Binary(Box<TraceReader<Input>>),
    Csv(Box<CsvReader<Input>>),
}

#[pyclass(name = "TraceFile", unsendable)]
pub struct PyTraceFile {
    r: Reader,
    /// An error met after some events of a batch: raised by the next call.
    pending: Option<TraceError>,
}

fn err(e: TraceError) -> PyErr {
    PyValueError::new_err(e.0)
}

impl PyTraceFile {
    fn next(&mut self) -> Result<Option<Event>, TraceError> {
        match &mut self.r {
            Reader::Binary(r) => r.next_event(),
            Reader::Csv(r) => r.next_event(),
        }
    }

    /// Every remaining event through `f`.
    fn each(&mut self, mut f: impl FnMut(&Event) -> std::io::Result<()>) -> PyResult<u64> {
        if let Some(e) = self.pending.take() {
            return Err(err(e));
        }
        let mut n = 0;
        while let Some(ev) = self.next().map_err(err)? {
            f(&ev)?;
            n += 1;
        }
        Ok(n)
    }
}

#[pymethods]
impl PyTraceFile {
    #[new]
    #[pyo3(signature = (f, where_, allow_truncated = false, chunk = 1 << 20, checked = false))]
    fn new(
        f: Py<PyAny>,
        where_: &str,
        allow_truncated: bool,
        chunk: usize,
        checked: bool,
    ) -> PyResult<Self> {
        let mut input = PyRead {
            f,
            chunk: chunk.max(1),
        };
        let mut head = Vec::with_capacity(8);
        while head.len() < MAGIC.len() {
            let mut b = [0u8; 8];
            let n = input
                .read(&mut b[..MAGIC.len() - head.len()])
                .map_err(|e| PyValueError::new_err(format!("{where_}: {e}")))?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&b[..n]);
        }
        let fail = |m: &str| Err(PyValueError::new_err(format!("{where_}: {m}")));
        let kind = if head[..] == MAGIC[..] {
            0
        } else if head.starts_with(b"\x89BATR") {
            return fail("damaged magic (file transferred in text mode?)");
        } else if matches!(head.first(), Some(b'#' | b't')) {
            1
        } else {
            return fail("not a beamalloc trace (neither binary magic nor CSV header)");
        };
        let stream = Cursor::new(head).chain(input);
        let r = if kind == 0 {
            let mut r = TraceReader::new(stream, where_).map_err(err)?;
            r.allow_truncated = allow_truncated;
            #[cfg(any(test, fuzzing))]
            r.set_checked_only(checked);
            Reader::Binary(Box::new(r))
        } else {
            let mut r = CsvReader::new(stream, where_).map_err(err)?;
            r.checked_only = checked;
            Reader::Csv(Box::new(r))
        };
        Ok(PyTraceFile { r, pending: None })
    }

    /// "binary" or "csv".
    #[getter]
    fn format(&self) -> &'static str {
        match self.r {
            Reader::Binary(_) => "binary",
            Reader::Csv(_) => "csv",
        }
    }

    /// The header's JSON: bytes for a binary trace, str (or None) for a CSV's marker line.
    fn header(&self, py: Python<'_>) -> PyObject {
        match &self.r {
            Reader::Binary(r) => PyBytes::new_bound(py, &r.header).into_py(py),
            Reader::Csv(r) => r.header_json.clone().into_py(py),
        }
    }

    /// A CSV's header type table (name -> number), read by `TraceHeader.from_json`; then its
    /// column line is read.
    fn set_types(&mut self, types: HashMap<String, u64>) -> PyResult<()> {
        if let Reader::Csv(r) = &mut self.r {
            for (k, v) in types {
                r.types.known.insert(k.into_bytes(), v);
            }
            r.read_columns().map_err(err)?;
        }
        Ok(())
    }

    /// A CSV's (byte offset, line number) where its rows start; None for a binary trace.
    fn rows_at(&self) -> Option<(u64, u64)> {
        match &self.r {
            Reader::Csv(r) => Some(r.rows_at),
            Reader::Binary(_) => None,
        }
    }

    /// The type names CSV rows introduced since the last call: (name, number, allocator).
    fn new_types(&mut self) -> Vec<(String, u64, u64)> {
        match &mut self.r {
            Reader::Csv(r) => std::mem::take(&mut r.types.added),
            Reader::Binary(_) => Vec::new(),
        }
    }

    /// Up to `n` events; [] at the end. An error after some events is raised by the next call,
    /// so the events before it are all handed out first.
    fn read(&mut self, n: usize) -> PyResult<Vec<Row>> {
        if let Some(e) = self.pending.take() {
            return Err(err(e));
        }
        let mut out = Vec::with_capacity(n.min(1 << 16));
        while out.len() < n {
            match self.next() {
                Ok(Some(ev)) => out.push(row(&ev)),
                Ok(None) => break,
                Err(e) if out.is_empty() => return Err(err(e)),
                Err(e) => {
                    self.pending = Some(e);
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Read to the end (checking every event); returns the count.
    fn drain(&mut self) -> PyResult<u64> {
        self.each(|_| Ok(()))
    }

    /// Read to the end, writing the events as a binary trace at `dst` with `header_json`;
    /// returns the count.
    fn write_binary(&mut self, dst: &str, header_json: &str) -> PyResult<u64> {
        let out =
            std::fs::File::create(dst).map_err(|e| PyValueError::new_err(format!("{dst}: {e}")))?;
        let mut w = TraceWriter::new(std::io::BufWriter::with_capacity(1 << 20, out), header_json)
            .map_err(|e| PyValueError::new_err(format!("{dst}: {e}")))?;
        let n = self.each(|e| w.write(e))?;
        w.finish()
            .map_err(|e| PyValueError::new_err(format!("{dst}: {e}")))?;
        Ok(n)
    }
}
