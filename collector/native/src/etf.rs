//! The one decoder of Erlang's external term format (collector/etf.py is its thin Python entry):
//! `etf_decode(data, pos, atom, opaque, atoms=None, budget, depth=0) -> (term, end)`.
//!
//! It builds the Python objects collector/etf.py's docstring lists: `atom` and `opaque` are the
//! classes collector/terms.py defines. A +S 64 node's allocator data (700 kB of ETF, 136,000
//! terms) decodes in a few ms (tests/bench/bench_snapshot_s64.py).
//!
//! The input comes from another process, so the decoder is bounded (docs/robustness.md, "What a
//! term may build"): nesting (MAX_DEPTH), integers (MAX_BIG_BYTES) and what the term would
//! build (`budget`, in 8-byte words, charged with the costs of `cost` below before each object
//! is made: a 130 KB compressed list of 128 Mi NILs would otherwise build 9 GB of empty lists).
//! Bad input raises `ValueError` whose text is the one line etf.py's ETFError says; the checks
//! run in the order the Python decoder this replaced ran them, so each input gets the line it
//! got (a fixed-size field cut off: "truncated term"; a sized payload cut off: "truncated term
//! at byte P (need K more)"). CPython refusing an allocation raises its MemoryError.
// pyo3 0.22's `#[pyfunction]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use std::collections::HashMap;

/// Deepest nesting accepted (allocator data nests about 8 deep, docs/erts/recon-formulas.md §3.1).
pub const MAX_DEPTH: usize = 256;
/// Largest bignum accepted, in bytes of magnitude (mmmbc, 2^64-1, needs 8).
pub const MAX_BIG_BYTES: usize = 32;

/// Why decoding stops: bad input (its one line) or a Python error (MemoryError, mostly).
enum Fail {
    Bad(String),
    Py(PyErr),
}

impl From<PyErr> for Fail {
    fn from(e: PyErr) -> Self {
        Fail::Py(e)
    }
}

type R<T> = Result<T, Fail>;

fn bad<T>(msg: impl Into<String>) -> R<T> {
    Err(Fail::Bad(msg.into()))
}

/// A fixed-size field that runs past the end.
fn truncated() -> Fail {
    Fail::Bad("truncated term".into())
}

/// What each object costs in 8-byte words (header and payload; an element's slot is charged by
/// its container).
mod cost {
    pub const CONTAINER: usize = 8;
    pub const INT: usize = 4;
    pub const FLOAT: usize = 3;
    pub const MAP_ENTRY: usize = 4;
    pub const OPAQUE: usize = 10;
    pub fn bytes(k: usize) -> usize {
        5 + k / 8
    }
}

/// What io_lib:printable_latin1_list/1 accepts, so STRING_EXT maps to str exactly when ~p would
/// print the list as a string (the default +pc latin1).
fn printable(b: u8) -> bool {
    (32..127).contains(&b) || b >= 160 || matches!(b, b'\n' | b'\r' | b'\t' | 11 | 8 | 12 | 27)
}

struct Dec<'py, 'a> {
    py: Python<'py>,
    data: &'a [u8],
    atom: &'a Bound<'py, PyAny>,
    opaque: &'a Bound<'py, PyAny>,
    /// The caller's atoms, kept across calls (one dict per connection), keyed by (tag, text)
    shared: Option<&'a Bound<'py, PyDict>>,
    /// words the term may still build
    left: usize,
    budget: usize,
    /// Allocator data repeats a few hundred atoms; keyed by tag, as the tag sets the encoding.
    atoms: HashMap<(u8, &'a [u8]), PyObject>,
}

impl<'py, 'a> Dec<'py, 'a> {
    fn u8(&self, pos: usize) -> R<u8> {
        self.data.get(pos).copied().ok_or_else(truncated)
    }

    fn fixed(&self, pos: usize, k: usize) -> R<&'a [u8]> {
        self.data
            .get(pos..pos.saturating_add(k))
            .ok_or_else(truncated)
    }

    fn u16(&self, pos: usize) -> R<usize> {
        let b = self.fixed(pos, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    fn u32(&self, pos: usize) -> R<u32> {
        let b = self.fixed(pos, 4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A sized payload of `k` bytes at `pos`, checked before anything is built from it.
    fn need(&self, pos: usize, k: usize) -> R<()> {
        if pos.saturating_add(k) > self.data.len() {
            return bad(format!("truncated term at byte {pos} (need {k} more)"));
        }
        Ok(())
    }

    /// Take `words` from the budget, before building what they pay for.
    fn charge(&mut self, words: usize) -> R<()> {
        match self.left.checked_sub(words) {
            Some(l) => {
                self.left = l;
                Ok(())
            }
            None => bad(format!(
                "a term that would build more than {} MiB of objects (a decompression bomb, or \
                 not allocator data)",
                self.budget.saturating_mul(8) >> 20
            )),
        }
    }

    /// An atom whose length field starts at `pos`; always charged (a known atom only skips
    /// the build).
    fn atom(&mut self, tag: u8, pos: usize) -> R<(PyObject, usize)> {
        let (k, pos) = if tag == 119 || tag == 115 {
            self.need(pos, 1)?;
            (self.data[pos] as usize, pos + 1)
        } else {
            self.need(pos, 2)?;
            (self.u16(pos)?, pos + 2)
        };
        self.need(pos, k)?;
        let raw = &self.data[pos..pos + k];
        self.charge(cost::bytes(k) + cost::CONTAINER)?;
        if let Some(a) = self.atoms.get(&(tag, raw)) {
            return Ok((a.clone_ref(self.py), pos + k));
        }
        let text: String = if tag == 119 || tag == 118 {
            match std::str::from_utf8(raw) {
                Ok(s) => s.to_owned(),
                Err(_) => return bad("atom that is not valid UTF-8"),
            }
        } else {
            raw.iter().map(|&b| b as char).collect()
        };
        let a = match self.shared {
            Some(shared) => {
                let key = (tag, text.as_str());
                match shared.get_item(key)? {
                    Some(a) => a.unbind(),
                    None => {
                        let a = self.atom.call1((text.as_str(),))?;
                        shared.set_item(key, &a)?;
                        a.unbind()
                    }
                }
            }
            None => self.atom.call1((text,))?.unbind(),
        };
        self.atoms.insert((tag, raw), a.clone_ref(self.py));
        Ok((a, pos + k))
    }

    /// `count` terms in a row from `pos` into a new tuple or list, filled in place (no
    /// intermediate Vec: allocator data is about 40,000 of them). A known atom in a row is not
    /// charged again. A container dropped half-filled is freed safely: CPython's tuple and list
    /// deallocators skip the NULL slots.
    fn seq(
        &mut self,
        mut pos: usize,
        count: usize,
        depth: usize,
        tuple: bool,
    ) -> R<(PyObject, usize)> {
        self.need(pos, count)?; // every element takes at least one byte
        self.charge(cost::CONTAINER.saturating_add(count))?;
        let n = count as pyo3::ffi::Py_ssize_t;
        // SAFETY: we hold the GIL (self.py); the new object is owned by `obj` from here on.
        let raw = unsafe {
            if tuple {
                pyo3::ffi::PyTuple_New(n)
            } else {
                pyo3::ffi::PyList_New(n)
            }
        };
        if raw.is_null() {
            return Err(PyErr::take(self.py)
                .unwrap_or_else(|| PyMemoryError::new_err("cannot allocate a container"))
                .into());
        }
        let obj: PyObject = unsafe { PyObject::from_owned_ptr(self.py, raw) };
        for i in 0..count {
            let tag = self.u8(pos)?;
            let (t, p) = match tag {
                97 => (self.u8(pos + 1)?.into_py(self.py), pos + 2),
                100 | 119 => {
                    let (start, k) = if tag == 100 {
                        (
                            pos + 3,
                            (self.u8(pos + 1)? as usize) << 8 | self.u8(pos + 2)? as usize,
                        )
                    } else {
                        (pos + 2, self.u8(pos + 1)? as usize)
                    };
                    let end = start + k;
                    if end > self.data.len() {
                        return bad(format!("truncated atom at byte {pos}"));
                    }
                    match self.atoms.get(&(tag, &self.data[start..end])) {
                        Some(a) => (a.clone_ref(self.py), end),
                        None => self.atom(tag, pos + 1)?,
                    }
                }
                _ => self.term(pos, depth + 1)?,
            };
            // SAFETY: slot i is in range and empty; SET_ITEM steals the reference.
            unsafe {
                if tuple {
                    pyo3::ffi::PyTuple_SET_ITEM(raw, i as pyo3::ffi::Py_ssize_t, t.into_ptr());
                } else {
                    pyo3::ffi::PyList_SET_ITEM(raw, i as pyo3::ffi::Py_ssize_t, t.into_ptr());
                }
            }
            pos = p;
        }
        Ok((obj, pos))
    }

    fn term(&mut self, pos: usize, depth: usize) -> R<(PyObject, usize)> {
        if depth > MAX_DEPTH {
            return bad(format!("terms nested deeper than {MAX_DEPTH}"));
        }
        let py = self.py;
        let tag = self.u8(pos)?;
        let pos = pos + 1;
        Ok(match tag {
            97 => (self.u8(pos)?.into_py(py), pos + 1), // SMALL_INTEGER_EXT
            98 => {
                // INTEGER_EXT
                self.charge(cost::INT)?;
                let n = self.u32(pos)? as i32;
                (n.into_py(py), pos + 4)
            }
            119 | 115 | 118 | 100 => self.atom(tag, pos)?, // the four atom encodings
            104 => {
                // SMALL_TUPLE_EXT
                let count = self.u8(pos)? as usize;
                self.seq(pos + 1, count, depth, true)?
            }
            105 => {
                // LARGE_TUPLE_EXT
                let count = self.u32(pos)? as usize;
                self.seq(pos + 4, count, depth, true)?
            }
            106 => {
                // NIL_EXT
                self.charge(cost::CONTAINER)?;
                (PyList::empty_bound(py).into_py(py), pos)
            }
            107 => {
                // STRING_EXT: u16 length, bytes
                let k = self.u16(pos)?;
                let pos = pos + 2;
                self.need(pos, k)?;
                let raw = &self.data[pos..pos + k];
                let obj = if raw.iter().all(|&b| printable(b)) {
                    self.charge(cost::bytes(k) + cost::CONTAINER)?;
                    let s: String = raw.iter().map(|&b| b as char).collect();
                    PyString::new_bound(py, &s).into_py(py)
                } else {
                    self.charge(cost::CONTAINER + k)?;
                    PyList::new_bound(py, raw.iter().map(|&b| b.into_py(py))).into_py(py)
                };
                (obj, pos + k)
            }
            108 => {
                // LIST_EXT: u32 length, elements, tail
                let count = self.u32(pos)? as usize;
                let (list, end) = self.seq(pos + 4, count, depth, false)?;
                if self.u8(end)? != 106 {
                    return bad("improper list");
                }
                (list, end + 1)
            }
            109 => {
                // BINARY_EXT
                self.need(pos, 4)?;
                let k = self.u32(pos)? as usize;
                let pos = pos + 4;
                self.need(pos, k)?;
                self.charge(cost::bytes(k))?;
                (
                    PyBytes::new_bound(py, &self.data[pos..pos + k]).into_py(py),
                    pos + k,
                )
            }
            70 => {
                // NEW_FLOAT_EXT
                self.need(pos, 8)?;
                self.charge(cost::FLOAT)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(&self.data[pos..pos + 8]);
                (f64::from_be_bytes(a).into_py(py), pos + 8)
            }
            99 => {
                // FLOAT_EXT: 31 bytes of "%.20e" text, read as Python's float() reads it
                self.need(pos, 31)?;
                self.charge(cost::FLOAT)?;
                let mut text = &self.data[pos..pos + 31];
                while let [rest @ .., 0] = text {
                    text = rest;
                }
                let float = py.get_type_bound::<pyo3::types::PyFloat>();
                match float.call1((PyBytes::new_bound(py, text),)) {
                    Ok(x) => (x.unbind(), pos + 31),
                    Err(e) if e.is_instance_of::<PyValueError>(py) => return bad("bad FLOAT_EXT"),
                    Err(e) => return Err(e.into()),
                }
            }
            110 | 111 => {
                // SMALL_BIG_EXT, LARGE_BIG_EXT: length, sign, little-endian magnitude
                let (k, pos) = if tag == 110 {
                    self.need(pos, 1)?;
                    (self.data[pos] as usize, pos + 1)
                } else {
                    self.need(pos, 4)?;
                    (self.u32(pos)? as usize, pos + 4)
                };
                if k > MAX_BIG_BYTES {
                    return bad(format!(
                        "integer of {k} bytes (allocator statistics never exceed {MAX_BIG_BYTES})"
                    ));
                }
                self.need(pos, 1 + k)?;
                self.charge(cost::INT + k / 8)?;
                let sign = self.data[pos];
                let mag = &self.data[pos + 1..pos + 1 + k];
                let obj = if k <= 8 {
                    let mut a = [0u8; 8];
                    a[..k].copy_from_slice(mag);
                    let n = u64::from_le_bytes(a) as i128;
                    (if sign != 0 { -n } else { n }).into_py(py)
                } else {
                    let n = py
                        .get_type_bound::<pyo3::types::PyLong>()
                        .call_method1("from_bytes", (PyBytes::new_bound(py, mag), "little"))?;
                    if sign != 0 {
                        n.call_method0("__neg__")?.unbind()
                    } else {
                        n.unbind()
                    }
                };
                (obj, pos + 1 + k)
            }
            116 => {
                // MAP_EXT: u32 arity, key and value terms
                self.need(pos, 4)?;
                let arity = self.u32(pos)? as usize;
                let pos = pos + 4;
                self.need(pos, arity.saturating_mul(2))?;
                self.charge(cost::CONTAINER.saturating_add(arity.saturating_mul(cost::MAP_ENTRY)))?;
                let d = PyDict::new_bound(py);
                let mut p = pos;
                for _ in 0..arity {
                    let (k, p1) = self.term(p, depth + 1)?;
                    let (v, p2) = self.term(p1, depth + 1)?;
                    match d.set_item(k, v) {
                        Ok(()) => {}
                        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
                            return bad("map key that Python cannot hash")
                        }
                        Err(e) => return Err(e.into()),
                    }
                    p = p2;
                }
                (d.into_py(py), p)
            }
            77 => {
                // BIT_BINARY_EXT: u32 length, bits used in the last byte, bytes
                self.need(pos, 5)?;
                let k = self.u32(pos)? as usize;
                let pos = pos + 5;
                self.need(pos, k)?;
                self.charge(cost::bytes(k))?;
                (
                    PyBytes::new_bound(py, &self.data[pos..pos + k]).into_py(py),
                    pos + k,
                )
            }
            _ => self.opaque(tag, pos, depth)?,
        })
    }

    /// A node atom, then `size` bytes of fixed fields (their position returned).
    fn node_and(&mut self, pos: usize, depth: usize, size: usize) -> R<usize> {
        let (node, pos) = self.term(pos, depth + 1)?;
        if !node.bind(self.py).is_instance(self.atom)? {
            return bad("pid, port or reference without a node atom");
        }
        self.need(pos, size)?;
        Ok(pos)
    }

    fn make_opaque(&self, text: String) -> R<PyObject> {
        Ok(self.opaque.call1((text,))?.unbind())
    }

    /// Pids, ports, references and funs: Opaque, the text ~p shows with node index 0.
    fn opaque(&mut self, tag: u8, pos: usize, depth: usize) -> R<(PyObject, usize)> {
        self.charge(cost::OPAQUE)?;
        match tag {
            88 | 103 => {
                // NEW_PID_EXT, PID_EXT: node, id, serial, creation
                let size = if tag == 103 { 9 } else { 12 };
                let p = self.node_and(pos, depth, size)?;
                let (id, serial) = (self.u32(p)?, self.u32(p + 4)?);
                Ok((self.make_opaque(format!("<0.{id}.{serial}>"))?, p + size))
            }
            89 | 102 | 120 => {
                // NEW_PORT_EXT, PORT_EXT, V4_PORT_EXT: node, number, creation
                let size = match tag {
                    102 => 5,
                    89 => 8,
                    _ => 12,
                };
                let p = self.node_and(pos, depth, size)?;
                let num = if tag == 120 {
                    let b = self.fixed(p, 8)?;
                    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
                } else {
                    self.u32(p)? as u64
                };
                Ok((self.make_opaque(format!("#Port<0.{num}>"))?, p + size))
            }
            90 | 114 => {
                // NEWER_REFERENCE_EXT, NEW_REFERENCE_EXT: u16 words, node, creation, words
                self.need(pos, 2)?;
                let k = self.u16(pos)?;
                if k > 5 {
                    return bad(format!("reference of {k} words"));
                }
                let cr = if tag == 90 { 4 } else { 1 };
                let p = self.node_and(pos + 2, depth, cr + 4 * k)?;
                let mut text = String::from("#Ref<0.");
                for i in (0..k).rev() {
                    text.push_str(&self.u32(p + cr + 4 * i)?.to_string());
                    if i > 0 {
                        text.push('.');
                    }
                }
                text.push('>');
                Ok((self.make_opaque(text)?, p + cr + 4 * k))
            }
            113 => {
                // EXPORT_EXT: fun M:F/A, each shown as Python's str() shows it
                let (m, p) = self.term(pos, depth + 1)?;
                let (f, p) = self.term(p, depth + 1)?;
                let (a, p) = self.term(p, depth + 1)?;
                let py = self.py;
                let text = format!(
                    "#Fun<{}.{}.{}>",
                    m.bind(py).str()?,
                    f.bind(py).str()?,
                    a.bind(py).str()?
                );
                Ok((self.make_opaque(text)?, p))
            }
            112 => {
                // NEW_FUN_EXT: u32 size (covers the rest), arity, uniq, index, ..., module
                self.need(pos, 29)?;
                let (size, index) = (self.u32(pos)? as usize, self.u32(pos + 21)?);
                if size < 29 {
                    return bad("bad NEW_FUN_EXT size");
                }
                self.need(pos, size)?;
                let (module, _) = self.term(pos + 29, depth + 1)?;
                let text = format!("#Fun<{}.{index}.0>", module.bind(self.py).str()?);
                Ok((self.make_opaque(text)?, pos + size))
            }
            80 => bad("compressed term nested inside a term"),
            82 | 68 => bad("atom cache references only occur inside the distribution protocol"),
            _ => bad(format!("unknown external term tag {tag}")),
        }
    }
}

/// Decode the one term whose tag is at `data[pos]` (nested `depth` deep already); return it and
/// where it ends. `ValueError(line)` for bad input (the module comment), MemoryError when
/// CPython cannot allocate. `atoms`: a dict the caller keeps across calls, so that each distinct
/// atom is built once per connection. A panic is caught here and raised as
/// `ValueError("the native term decoder failed")`: it never unwinds into the interpreter.
#[pyfunction]
#[pyo3(signature = (data, pos, atom, opaque, atoms = None, budget = usize::MAX, depth = 0))]
#[allow(clippy::too_many_arguments)]
pub fn etf_decode(
    py: Python<'_>,
    data: &[u8],
    pos: usize,
    atom: &Bound<'_, PyAny>,
    opaque: &Bound<'_, PyAny>,
    atoms: Option<&Bound<'_, PyDict>>,
    budget: usize,
    depth: usize,
) -> PyResult<(PyObject, usize)> {
    let run = std::panic::AssertUnwindSafe(|| {
        let mut d = Dec {
            py,
            data,
            atom,
            opaque,
            shared: atoms,
            left: budget,
            budget,
            atoms: HashMap::new(),
        };
        d.term(pos, depth)
    });
    match std::panic::catch_unwind(run) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Fail::Bad(msg))) => Err(PyValueError::new_err(msg)),
        Ok(Err(Fail::Py(e))) => Err(e),
        Err(_) => {
            // pyo3 may have set a Python error before panicking (a MemoryError): clear it
            drop(PyErr::take(py));
            Err(PyValueError::new_err("the native term decoder failed"))
        }
    }
}
