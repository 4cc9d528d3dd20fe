//! The native fast path of collector/etf.py: `etf_decode(data, pos, atom, opaque) -> (term, end)`.
//!
//! It builds exactly the Python objects etf.py's `_Decoder` builds (the mapping in etf.py's
//! docstring): `atom` and `opaque` are the classes collector/terms.py defines, called once per
//! distinct atom. A +S 64 node's allocator data (700 kB of ETF, 136,000 terms) takes about 130 ms
//! through the Python decoder and a few ms here (tests/bench/bench_snapshot_s64.py).
//!
//! It decodes what beamalloc's own replies hold (integers, atoms, tuples, lists, strings,
//! binaries, floats, maps, pids) and declines everything else, as well as any input that is
//! malformed or beyond etf.py's limits, by raising `ValueError("decline")`: etf.py then decodes
//! the input with the Python decoder, which is the reference and says what is wrong. So there is
//! one definition of the accepted language and of every error message, and this file only has to
//! agree with it on well-formed data (tests/live/test_etf_native.py compares the two).
//!
//! One exception: what the term would build is bounded by `budget` (etf.py's MAX_WORDS, in
//! 8-byte words, with etf.py's costs: `cost` below), checked before each container is made. A
//! term over it raises `ValueError("over budget")` at once, and etf.py says so without
//! running the Python decoder over it (a 130 KB compressed list of 128 Mi NILs would build 9 GB
//! of empty lists: docs/robustness.md, "What a term may build").
// pyo3 0.22's `#[pyfunction]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::collections::HashMap;

/// etf.py's MAX_DEPTH and MAX_BIG_BYTES (deeper or larger: declined, Python says why).
const MAX_DEPTH: usize = 256;
const MAX_BIG_BYTES: usize = 32;

/// Why the native decoder stops: the Python decoder should handle the input, or the input is
/// over its budget (then no decoder should).
enum Stop {
    Python,
    Budget,
}

type R<T> = Result<T, Stop>;

/// etf.py's costs, in 8-byte words (an object's header and payload; each element's slot is
/// charged by its container).
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

struct Dec<'py, 'a> {
    py: Python<'py>,
    data: &'a [u8],
    atom: &'a Bound<'py, PyAny>,
    opaque: &'a Bound<'py, PyAny>,
    shared: Option<&'a Bound<'py, PyDict>>,
    // words left to build (etf.py's MAX_WORDS at the start)
    left: usize,
    // Keyed by tag and bytes, as etf.py's cache: the tag decides latin-1 or UTF-8.
    atoms: HashMap<(u8, &'a [u8]), PyObject>,
}

/// What io_lib:printable_latin1_list/1 accepts (etf.py's _PRINTABLE).
fn printable(b: u8) -> bool {
    (32..127).contains(&b) || b >= 160 || matches!(b, b'\n' | b'\r' | b'\t' | 11 | 8 | 12 | 27)
}

impl<'py, 'a> Dec<'py, 'a> {
    fn take(&self, pos: usize, k: usize) -> R<&'a [u8]> {
        self.data
            .get(pos..pos.checked_add(k).ok_or(Stop::Python)?)
            .ok_or(Stop::Python)
    }

    fn u8(&self, pos: usize) -> R<u8> {
        self.data.get(pos).copied().ok_or(Stop::Python)
    }

    fn u16(&self, pos: usize) -> R<usize> {
        let b = self.take(pos, 2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    fn u32(&self, pos: usize) -> R<u32> {
        let b = self.take(pos, 4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn py_err(_: PyErr) -> Stop {
        Stop::Python
    }

    /// Take `words` from the budget, before building what they pay for.
    fn charge(&mut self, words: usize) -> R<()> {
        self.left = self.left.checked_sub(words).ok_or(Stop::Budget)?;
        Ok(())
    }

    fn atom_at(&mut self, tag: u8, start: usize, len: usize) -> R<(PyObject, usize)> {
        let raw = self.take(start, len)?;
        if let Some(a) = self.atoms.get(&(tag, raw)) {
            return Ok((a.clone_ref(self.py), start + len));
        }
        let text: String = if tag == 118 || tag == 119 {
            std::str::from_utf8(raw)
                .map_err(|_| Stop::Python)?
                .to_owned()
        } else {
            raw.iter().map(|&b| b as char).collect()
        };
        // The caller's cache outlives this call (one per connection: the same few hundred
        // atoms in every message); keyed by tag and text, as above.
        let key = (tag, text.clone());
        if let Some(shared) = self.shared {
            if let Some(a) = shared.get_item(&key).map_err(Self::py_err)? {
                let a = a.unbind();
                self.atoms.insert((tag, raw), a.clone_ref(self.py));
                return Ok((a, start + len));
            }
        }
        self.charge(cost::bytes(text.len()) + cost::CONTAINER)?;
        let a = self.atom.call1((text,)).map_err(Self::py_err)?.unbind();
        if let Some(shared) = self.shared {
            shared.set_item(key, &a).map_err(Self::py_err)?;
        }
        self.atoms.insert((tag, raw), a.clone_ref(self.py));
        Ok((a, start + len))
    }

    /// A tuple or a list of `count` terms from `pos`, filled in place (no intermediate Vec:
    /// allocator data is about 40,000 of them). A container dropped half-filled on a decline
    /// is freed safely: CPython's tuple and list deallocators skip the NULL slots.
    fn seq(
        &mut self,
        mut pos: usize,
        count: usize,
        depth: usize,
        tuple: bool,
    ) -> R<(PyObject, usize)> {
        // every element takes at least one byte: a huge count in a short input is declined
        // before anything is allocated
        if count > self.data.len().saturating_sub(pos) {
            return Err(Stop::Python);
        }
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
            return Err(Stop::Python);
        }
        let obj: PyObject = unsafe { PyObject::from_owned_ptr(self.py, raw) };
        for i in 0..count {
            let (t, p) = self.term(pos, depth + 1)?;
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
            return Err(Stop::Python);
        }
        let py = self.py;
        let tag = self.u8(pos)?;
        let pos = pos + 1;
        Ok(match tag {
            97 => (self.u8(pos)?.into_py(py), pos + 1),
            98 => {
                let b = self.take(pos, 4)?;
                self.charge(cost::INT)?;
                (
                    i32::from_be_bytes([b[0], b[1], b[2], b[3]]).into_py(py),
                    pos + 4,
                )
            }
            119 | 115 => {
                let k = self.u8(pos)? as usize;
                self.atom_at(tag, pos + 1, k)?
            }
            118 | 100 => {
                let k = self.u16(pos)?;
                self.atom_at(tag, pos + 2, k)?
            }
            104 | 105 => {
                let (count, start) = if tag == 104 {
                    (self.u8(pos)? as usize, pos + 1)
                } else {
                    (self.u32(pos)? as usize, pos + 4)
                };
                self.seq(start, count, depth, true)?
            }
            106 => {
                self.charge(cost::CONTAINER)?;
                (PyList::empty_bound(py).into_py(py), pos)
            }
            107 => {
                let k = self.u16(pos)?;
                let raw = self.take(pos + 2, k)?;
                let obj = if raw.iter().all(|&b| printable(b)) {
                    self.charge(cost::bytes(k) + cost::CONTAINER)?;
                    let s: String = raw.iter().map(|&b| b as char).collect();
                    PyString::new_bound(py, &s).into_py(py)
                } else {
                    self.charge(cost::CONTAINER + k)?;
                    PyList::new_bound(py, raw.iter().map(|&b| b.into_py(py))).into_py(py)
                };
                (obj, pos + 2 + k)
            }
            108 => {
                let count = self.u32(pos)? as usize;
                let (list, end) = self.seq(pos + 4, count, depth, false)?;
                if self.u8(end)? != 106 {
                    return Err(Stop::Python); // improper list
                }
                (list, end + 1)
            }
            109 => {
                let k = self.u32(pos)? as usize;
                let raw = self.take(pos + 4, k)?;
                self.charge(cost::bytes(k))?;
                (PyBytes::new_bound(py, raw).into_py(py), pos + 4 + k)
            }
            70 => {
                let b = self.take(pos, 8)?;
                self.charge(cost::FLOAT)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                (f64::from_be_bytes(a).into_py(py), pos + 8)
            }
            110 | 111 => {
                let (k, start) = if tag == 110 {
                    (self.u8(pos)? as usize, pos + 1)
                } else {
                    (self.u32(pos)? as usize, pos + 4)
                };
                if k > MAX_BIG_BYTES {
                    return Err(Stop::Python);
                }
                let sign = self.u8(start)?;
                let mag = self.take(start + 1, k)?;
                self.charge(cost::INT + k / 8)?;
                let obj = if k <= 8 {
                    let mut a = [0u8; 8];
                    a[..k].copy_from_slice(mag);
                    let n = u64::from_le_bytes(a) as i128;
                    (if sign != 0 { -n } else { n }).into_py(py)
                } else {
                    let n = py
                        .get_type_bound::<pyo3::types::PyLong>()
                        .call_method1("from_bytes", (PyBytes::new_bound(py, mag), "little"))
                        .map_err(Self::py_err)?;
                    if sign != 0 {
                        n.call_method0("__neg__").map_err(Self::py_err)?.unbind()
                    } else {
                        n.unbind()
                    }
                };
                (obj, start + 1 + k)
            }
            116 => {
                let arity = self.u32(pos)? as usize;
                if arity.saturating_mul(2) > self.data.len().saturating_sub(pos + 4) {
                    return Err(Stop::Python);
                }
                self.charge(cost::CONTAINER.saturating_add(arity.saturating_mul(cost::MAP_ENTRY)))?;
                let d = PyDict::new_bound(py);
                let mut p = pos + 4;
                for _ in 0..arity {
                    let (k, p1) = self.term(p, depth + 1)?;
                    let (v, p2) = self.term(p1, depth + 1)?;
                    d.set_item(k, v).map_err(Self::py_err)?; // unhashable key: Python says so
                    p = p2;
                }
                (d.into_py(py), p)
            }
            77 => {
                let k = self.u32(pos)? as usize;
                let raw = self.take(pos + 5, k)?;
                self.charge(cost::bytes(k))?;
                (PyBytes::new_bound(py, raw).into_py(py), pos + 5 + k)
            }
            88 | 103 => {
                // NEW_PID_EXT / PID_EXT: node atom, id, serial, creation
                let (node, p) = self.term(pos, depth + 1)?;
                if !node.bind(py).is_instance(self.atom).map_err(Self::py_err)? {
                    return Err(Stop::Python);
                }
                let size = if tag == 103 { 9 } else { 12 };
                self.take(p, size)?;
                let (id, serial) = (self.u32(p)?, self.u32(p + 4)?);
                self.charge(cost::OPAQUE)?;
                let text = format!("<0.{id}.{serial}>");
                (
                    self.opaque.call1((text,)).map_err(Self::py_err)?.unbind(),
                    p + size,
                )
            }
            90 | 114 => {
                // NEWER_REFERENCE_EXT / NEW_REFERENCE_EXT: u16 words, node, creation, words
                let k = self.u16(pos)?;
                if k > 5 {
                    return Err(Stop::Python);
                }
                let (node, p) = self.term(pos + 2, depth + 1)?;
                if !node.bind(py).is_instance(self.atom).map_err(Self::py_err)? {
                    return Err(Stop::Python);
                }
                self.charge(cost::OPAQUE)?;
                let cr = if tag == 90 { 4 } else { 1 };
                self.take(p, cr + 4 * k)?;
                let mut text = String::from("#Ref<0");
                for i in (0..k).rev() {
                    text.push_str(&format!(".{}", self.u32(p + cr + 4 * i)?));
                }
                text.push('>');
                (
                    self.opaque.call1((text,)).map_err(Self::py_err)?.unbind(),
                    p + cr + 4 * k,
                )
            }
            _ => return Err(Stop::Python),
        })
    }
}

/// Decode the one term at `data[pos..]`; return it and where it ends. `ValueError("decline")`
/// for anything the Python decoder should handle (see the module comment), `ValueError("over
/// budget")` for a term that would build more than `budget` words.
/// `atoms`: a dict the caller keeps across calls, so that each distinct atom is built once.
/// A panic (pyo3 panics when CPython cannot allocate an object) is caught here and raised as
/// `ValueError("panic")`: it never unwinds into the interpreter nor aborts it.
#[pyfunction]
#[pyo3(signature = (data, pos, atom, opaque, atoms = None, budget = usize::MAX))]
pub fn etf_decode(
    py: Python<'_>,
    data: &[u8],
    pos: usize,
    atom: &Bound<'_, PyAny>,
    opaque: &Bound<'_, PyAny>,
    atoms: Option<&Bound<'_, PyDict>>,
    budget: usize,
) -> PyResult<(PyObject, usize)> {
    let run = std::panic::AssertUnwindSafe(|| {
        let mut d = Dec {
            py,
            data,
            atom,
            opaque,
            shared: atoms,
            left: budget,
            atoms: HashMap::new(),
        };
        d.term(pos, 0)
    });
    match std::panic::catch_unwind(run) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Stop::Budget)) => Err(PyValueError::new_err("over budget")),
        Ok(Err(Stop::Python)) => Err(PyValueError::new_err("decline")),
        Err(_) => {
            // pyo3 may have set a Python error before panicking (a MemoryError): clear it
            drop(PyErr::take(py));
            Err(PyValueError::new_err("panic"))
        }
    }
}

/// `collector.live.raw_text(term)`: exactly `format_term(term)` (collector/terms.py), written
/// here for the containers and the integers, which are nearly all of allocator data; every
/// other object (atoms, strings, floats, binaries, pids, booleans) goes through `fmt`, the
/// Python format_term itself, once per distinct atom or string. The recursion is bounded by
/// etf.py's MAX_DEPTH, as the terms come from the decoder; deeper input is refused.
#[pyfunction]
pub fn term_text(
    py: Python<'_>,
    term: &Bound<'_, PyAny>,
    fmt: &Bound<'_, PyAny>,
) -> PyResult<String> {
    // as etf_decode: a panic (an allocation CPython refused) is an error, never an abort
    let run = std::panic::AssertUnwindSafe(|| {
        let mut out = String::with_capacity(1 << 16);
        let cache = PyDict::new_bound(py);
        write_term(term, fmt, &cache, &mut out, 0).map(|_| out)
    });
    std::panic::catch_unwind(run).unwrap_or_else(|_| {
        drop(PyErr::take(py));
        Err(PyValueError::new_err("the native term writer failed"))
    })
}

fn write_term(
    t: &Bound<'_, PyAny>,
    fmt: &Bound<'_, PyAny>,
    cache: &Bound<'_, PyDict>,
    out: &mut String,
    depth: usize,
) -> PyResult<()> {
    if depth > MAX_DEPTH + 1 {
        return Err(PyValueError::new_err("term nested too deep"));
    }
    if t.is_exact_instance_of::<pyo3::types::PyLong>() {
        match t.extract::<i64>() {
            Ok(n) => out.push_str(&n.to_string()),
            Err(_) => out.push_str(&t.str()?.to_cow()?),
        }
        return Ok(());
    }
    if let Ok(tuple) = t.downcast_exact::<PyTuple>() {
        out.push('{');
        for (i, x) in tuple.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_term(&x, fmt, cache, out, depth + 1)?;
        }
        out.push('}');
        return Ok(());
    }
    if let Ok(list) = t.downcast_exact::<PyList>() {
        out.push('[');
        for (i, x) in list.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_term(&x, fmt, cache, out, depth + 1)?;
        }
        out.push(']');
        return Ok(());
    }
    if t.is_instance_of::<PyString>() {
        // keyed by type too: Atom("a") == "a" but prints without quotes
        let key = (t.get_type(), t.clone());
        if let Some(s) = cache.get_item(&key)? {
            out.push_str(&s.downcast::<PyString>()?.to_cow()?);
            return Ok(());
        }
        let s = fmt.call1((t,))?;
        out.push_str(&s.downcast::<PyString>()?.to_cow()?);
        cache.set_item(key, s)?;
        return Ok(());
    }
    let s = fmt.call1((t,))?;
    out.push_str(&s.downcast::<PyString>()?.to_cow()?);
    Ok(())
}
