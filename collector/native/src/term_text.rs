//! The one writer of Erlang term text (the `~p`-like text a Snapshot keeps in `.raw`):
//! `term_text(term, atom, opaque) -> str`, which collector/terms.py's `format_term` calls.
//! Compact text that terms.parse_term reads back to an equal term:
//!
//! ```text
//! Atom -> name, quoted when not a plain atom; Opaque -> its text; str -> "..." ([] if
//! empty); bool -> true/false; int; float -> repr with digits both sides of the point;
//! bytes -> <<1,2>>; tuple -> {..}; list -> [..]; None -> undefined
//! ```
//!
//! Anything else raises TypeError. The walk keeps its own stack (no recursion), so any depth
//! writes; each distinct atom and string object is written once and copied after (allocator
//! data repeats a few hundred).
// pyo3 0.22's `#[pyfunction]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyList, PyLong, PyString, PyStringData, PyTuple};
use std::collections::HashMap;
use std::fmt::Write;

/// Erlang's reserved words: an atom spelled as one needs quotes.
const RESERVED: [&str; 28] = [
    "after", "and", "andalso", "band", "begin", "bnot", "bor", "bsl", "bsr", "bxor", "case",
    "catch", "cond", "div", "end", "fun", "if", "let", "maybe", "not", "of", "or", "orelse",
    "receive", "rem", "try", "when", "xor",
];

struct Writer<'py, 'a> {
    py: Python<'py>,
    atom: &'a Bound<'py, PyAny>,
    opaque: &'a Bound<'py, PyAny>,
    out: String,
    /// text of each atom or string object written, by address: the term holds them all alive
    seen: HashMap<usize, String>,
    /// str.isprintable() of the code points above Latin-1 met so far
    printable: HashMap<u32, bool>,
}

/// A container being written: its items from `next` on are still to come.
struct Frame<'py> {
    items: Bound<'py, PyAny>,
    tuple: bool,
    next: usize,
    len: usize,
}

impl<'py> Writer<'py, '_> {
    /// Python's str.isprintable() of one code point (what terms.py's quoting used).
    fn is_printable(&mut self, c: u32) -> PyResult<bool> {
        if c < 0x80 {
            return Ok((0x20..0x7f).contains(&c));
        }
        if c <= 0xff {
            return Ok(c >= 0xa1 && c != 0xad); // NBSP (Zs) and SOFT HYPHEN (Cf) are not
        }
        if let Some(&p) = self.printable.get(&c) {
            return Ok(p);
        }
        let p = char_of(self.py, c)?
            .call_method0("isprintable")?
            .extract::<bool>()?;
        self.printable.insert(c, p);
        Ok(p)
    }

    /// `s` between `q` quotes: backslash and `q` escaped, what does not print as \ooo.
    fn quoted(&mut self, s: &Bound<'py, PyString>, q: char) -> PyResult<String> {
        let mut out = String::with_capacity(s.len()? + 2);
        out.push(q);
        // SAFETY: read under the GIL while `s` is alive and not mutated (str is immutable)
        let units: Vec<u32> = match unsafe { s.data()? } {
            PyStringData::Ucs1(b) => b.iter().map(|&c| c as u32).collect(),
            PyStringData::Ucs2(b) => b.iter().map(|&c| c as u32).collect(),
            PyStringData::Ucs4(b) => b.to_vec(),
        };
        for c in units {
            if c == '\\' as u32 {
                out.push_str("\\\\");
            } else if c == q as u32 {
                out.push('\\');
                out.push(q);
            } else if self.is_printable(c)? {
                // printable code points are never surrogates
                out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
            } else {
                write!(out, "\\{c:03o}").ok();
            }
        }
        out.push(q);
        Ok(out)
    }

    fn atom_text(&mut self, s: &Bound<'py, PyString>) -> PyResult<String> {
        if let Ok(name) = s.to_str() {
            let b = name.as_bytes();
            let plain = b.first().is_some_and(|c| c.is_ascii_lowercase())
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'@');
            if plain && !RESERVED.contains(&name) {
                return Ok(name.to_owned());
            }
        }
        self.quoted(s, '\'')
    }

    /// Write `t`; a tuple or list opens and is returned as a frame to fill.
    fn put(&mut self, t: &Bound<'py, PyAny>) -> PyResult<Option<Frame<'py>>> {
        if t.is_exact_instance_of::<PyLong>() {
            match t.extract::<i64>() {
                Ok(n) => write!(self.out, "{n}").ok(),
                Err(_) => write!(self.out, "{}", t.str()?).ok(),
            };
            return Ok(None);
        }
        if let Ok(tuple) = t.downcast::<PyTuple>() {
            self.out.push('{');
            return Ok(Some(Frame {
                items: t.clone(),
                tuple: true,
                next: 0,
                len: tuple.len(),
            }));
        }
        if let Ok(list) = t.downcast::<PyList>() {
            self.out.push('[');
            return Ok(Some(Frame {
                items: t.clone(),
                tuple: false,
                next: 0,
                len: list.len(),
            }));
        }
        if let Ok(s) = t.downcast::<PyString>() {
            let key = t.as_ptr() as usize;
            if let Some(text) = self.seen.get(&key) {
                self.out.push_str(text);
                return Ok(None);
            }
            let text = if t.is_instance(self.atom)? {
                self.atom_text(s)?
            } else if t.is_instance(self.opaque)? {
                s.to_cow()?.into_owned()
            } else if s.len()? == 0 {
                "[]".to_owned()
            } else {
                self.quoted(s, '"')?
            };
            self.out.push_str(&text);
            self.seen.insert(key, text);
            return Ok(None);
        }
        if let Ok(b) = t.downcast::<PyBool>() {
            self.out
                .push_str(if b.is_true() { "true" } else { "false" });
        } else if t.is_instance_of::<PyLong>() {
            write!(self.out, "{}", t.str()?).ok();
        } else if t.is_instance_of::<PyFloat>() {
            // Erlang floats need digits on both sides of the point: 5e-324 is 5.0e-324
            let r = t.repr()?;
            let r = r.to_cow()?;
            let (mant, exp) = match r.find('e') {
                Some(i) => (&r[..i], &r[i..]),
                None => (&r[..], ""),
            };
            self.out.push_str(mant);
            if !mant.contains('.') {
                self.out.push_str(".0");
            }
            self.out.push_str(exp);
        } else if let Ok(b) = t.downcast::<PyBytes>() {
            self.out.push_str("<<");
            for (i, x) in b.as_bytes().iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                write!(self.out, "{x}").ok();
            }
            self.out.push_str(">>");
        } else if t.is_none() {
            self.out.push_str("undefined");
        } else {
            let name = t.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "cannot format {name} as an Erlang term"
            )));
        }
        Ok(None)
    }

    fn write(&mut self, term: &Bound<'py, PyAny>) -> PyResult<()> {
        let mut stack: Vec<Frame<'py>> = Vec::new();
        if let Some(f) = self.put(term)? {
            stack.push(f);
        }
        while let Some(top) = stack.last_mut() {
            if top.next >= top.len {
                self.out.push(if top.tuple { '}' } else { ']' });
                stack.pop();
                continue;
            }
            if top.next > 0 {
                self.out.push(',');
            }
            let item = if top.tuple {
                top.items.downcast::<PyTuple>()?.get_item(top.next)?
            } else {
                top.items.downcast::<PyList>()?.get_item(top.next)?
            };
            top.next += 1;
            if let Some(f) = self.put(&item)? {
                stack.push(f);
            }
        }
        Ok(())
    }
}

fn char_of(py: Python<'_>, c: u32) -> PyResult<Bound<'_, PyAny>> {
    py.import_bound("builtins")?.getattr("chr")?.call1((c,))
}

/// `format_term(term)` (collector/terms.py): `atom` and `opaque` are terms.py's Atom and Opaque.
/// A panic (an allocation CPython refused) is a ValueError, never an abort.
#[pyfunction]
pub fn term_text(
    py: Python<'_>,
    term: &Bound<'_, PyAny>,
    atom: &Bound<'_, PyAny>,
    opaque: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let run = std::panic::AssertUnwindSafe(|| {
        let mut w = Writer {
            py,
            atom,
            opaque,
            out: String::with_capacity(1 << 12),
            seen: HashMap::new(),
            printable: HashMap::new(),
        };
        w.write(term).map(|_| w.out)
    });
    std::panic::catch_unwind(run).unwrap_or_else(|_| {
        drop(PyErr::take(py));
        Err(PyValueError::new_err("the native term writer failed"))
    })
}
