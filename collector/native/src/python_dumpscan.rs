//! The pyo3 surface of dumpscan.rs: `DumpWant(specs).search(data, start) -> int`,
//! `DumpWant(specs).values(text) -> [str | None]` (the specs' names as `Key: ` line prefixes)
//! and `DumpScan(...)`, the iterator of a dump's kept sections (dumpscan.Scanner).
// pyo3 0.22's `#[pymethods]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::dumpscan::{self, Limits, Scanner, Want};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{ffi, intern};
use std::fs::File;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::os::fd::FromRawFd;
use std::os::unix::fs::FileExt;

/// The headers a crash dump reader keeps: `specs` is [(name, whole_line)] (dumpscan.rs).
#[pyclass(frozen)]
pub struct DumpWant {
    want: Want,
}

#[pymethods]
impl DumpWant {
    #[new]
    fn new(specs: Vec<(Vec<u8>, bool)>) -> DumpWant {
        DumpWant {
            want: Want::new(specs),
        }
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
        self.want
            .line_values(text.as_bytes())
            .into_iter()
            .map(|r| r.map(|(a, b)| &text[a..b]))
            .collect()
    }

    /// `values` stripped as Python strips, the first `ints` of them read as counts of at most
    /// `max` where they are: (the values, the index of the first present one of those that is
    /// no such count, or -1) (dumpscan.Keys.parsed).
    fn parsed(&self, py: Python<'_>, text: &str, ints: usize, max: u128) -> (Vec<PyObject>, i64) {
        let mut bad = -1;
        let out = self
            .want
            .line_values(text.as_bytes())
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
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

/// Where a scan's blocks come from: a regular file read at its offsets (no Python call, no
/// copy a block), or any binary file object's `read` (a pipe, io.BytesIO: the tests, the
/// fuzzers).
enum Source {
    /// ManuallyDrop: the descriptor is the Python file's (`_file` keeps it open), never closed
    /// here
    File {
        file: ManuallyDrop<File>,
        at: u64,
        _file: PyObject,
    },
    Py(PyObject),
}

/// collector/dumpscan.py `scan` (its Python generator is the reference): an iterator of the
/// sections `want` keeps, as (header, text or None, offset, complete), updating `stats`
/// (dumpscan.Stats) as the Python one does.
#[pyclass]
pub struct DumpScan {
    scan: Scanner,
    source: Source,
    stats: PyObject,
}

/// `s` as a str, each byte one character (what bytes.decode("latin-1") gives).
fn latin1(py: Python<'_>, s: &[u8]) -> PyObject {
    // SAFETY: a pointer and length of a live slice; PyUnicode_DecodeLatin1 copies them and
    // cannot fail on any bytes but by lack of memory (then the NULL becomes that error)
    unsafe {
        let p = ffi::PyUnicode_DecodeLatin1(
            s.as_ptr().cast(),
            s.len() as ffi::Py_ssize_t,
            std::ptr::null(),
        );
        PyObject::from_owned_ptr(py, p)
    }
}

fn fill(py: Python<'_>, source: &mut Source, buf: &mut Vec<u8>, n: usize) -> PyResult<usize> {
    match source {
        Source::File { file, at, .. } => {
            buf.reserve(n);
            let start = buf.len();
            let mut got = 0;
            while got < n {
                let spare = &mut buf.spare_capacity_mut()[..n - got];
                // SAFETY: read_at only writes into the buffer, and only the bytes it reports
                // read are taken into the vector's length below
                let dst = unsafe { &mut *(spare as *mut [MaybeUninit<u8>] as *mut [u8]) };
                let k = py.allow_threads(|| loop {
                    match file.read_at(dst, *at) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        r => break r,
                    }
                })?;
                if k == 0 {
                    break;
                }
                got += k;
                *at += k as u64;
                // SAFETY: the k bytes after the length were just written by read_at
                unsafe { buf.set_len(start + got) };
            }
            Ok(got)
        }
        Source::Py(f) => {
            let block = f.call_method1(py, intern!(py, "read"), (n,))?;
            let block = block.downcast_bound::<PyBytes>(py)?;
            buf.extend_from_slice(block.as_bytes());
            Ok(block.as_bytes().len())
        }
    }
}

#[pymethods]
impl DumpScan {
    /// `specs` as DumpWant's; `limits` (CHUNK, MAX_LINE, MAX_SECTION, MAX_HEADER, _EDGE);
    /// `fd` >= 0: a regular file read from `offset` on (`f` keeps it open), else f.read.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        specs: Vec<(Vec<u8>, bool)>,
        f: PyObject,
        fd: i32,
        offset: u64,
        head: &[u8],
        stats: PyObject,
        limits: (usize, usize, usize, usize, usize),
    ) -> DumpScan {
        let (chunk, max_line, max_section, max_header, edge) = limits;
        let lim = Limits {
            chunk,
            max_line,
            max_section,
            max_header,
            edge,
        };
        let source = if fd >= 0 {
            // SAFETY: the caller's open file `f` owns `fd` and is kept alive by `_file`; the
            // File is never dropped (ManuallyDrop), so the descriptor is never closed here
            let file = ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
            Source::File {
                file,
                at: offset,
                _file: f,
            }
        } else {
            Source::Py(f)
        };
        DumpScan {
            scan: Scanner::new(specs, lim, head),
            source,
            stats,
        }
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        let source = &mut self.source;
        let found = self
            .scan
            .next(&mut |buf: &mut Vec<u8>, n: usize| fill(py, source, buf, n));
        let stats = self.stats.bind(py);
        let Some(found) = found? else {
            stats.setattr(intern!(py, "last"), latin1(py, &self.scan.last))?;
            stats.setattr(intern!(py, "sections"), self.scan.sections)?;
            return Ok(None);
        };
        let header = latin1(py, &self.scan.header);
        if !found.first {
            let max = self.scan.last.len();
            let last = if max == self.scan.header.len() {
                header.clone_ref(py)
            } else {
                latin1(py, &self.scan.last)
            };
            stats.setattr(intern!(py, "last"), last)?;
            stats.setattr(intern!(py, "sections"), self.scan.sections)?;
        }
        let body = if found.has_body {
            latin1(py, &self.scan.body)
        } else {
            py.None()
        };
        Ok(Some(
            (header, body, found.offset, found.complete).into_py(py),
        ))
    }
}
