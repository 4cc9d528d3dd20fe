//! One pass from the bytes of an `erlang:system_info({allocator, A})` reply to its records:
//! `alloc_reply(data, pos, alloc, classes, numeric, budget, max_instance) -> AllocReply | None`,
//! behind collector/system_info.py `native_info` (issue 28 item 2: a +S 64 snapshot's 586
//! instances were ETF -> Python terms -> proplists -> records, 25 ms of its CPU).
//!
//! The fast path of a fallback, never a second reader: it accepts the shape an OTP 23+ node
//! sends for an alloc_util allocator (docs/erts/alloc_util.md §6.1: `[{instance, N, Props}]`,
//! per-type `blocks`, `{Name, Giga, Ones}` counters) and declines (None) everything else, which
//! the caller then decodes with etf.rs and reads with system_info.py as before, with the same
//! results and the same errors. So its accepted set is kept inside both readers' accepted sets:
//! - the decoder's (etf.rs): the tags it reads here are a subset, with its limits or tighter
//!   (nesting, bignums of 8 bytes at most, the word budget charged for every atom);
//! - system_info.py's (instance_from_props and what it calls): a property list's items are all
//!   `{atom, ...}` tuples with no key twice, every number it reads an integer 0..2^64-1;
//! - Snapshot.check's `_plainly_valid` (beamalloc/snapshot.py): what it declines is not proven
//!   plain there either, so the records it returns skip that check (build.py says so).
//!
//! Within that set it builds exactly what system_info.py builds (the same dataclasses, fields in
//! the same order, plain str and int values) and writes exactly the text term_text.rs writes of
//! the decoded term (`AllocReply.text`, the raw term's part). tests/test_alloc_reply.py and the
//! fuzzer tests/fuzz/atheris_alloc.py hold both to the Python path on mutated real replies.
// pyo3 0.22's `#[pyfunction]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::etf::{cost, MAX_DEPTH};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use std::collections::HashMap;
use std::fmt::Write;

/// Erlang's reserved words (term_text.rs RESERVED): an atom spelled as one is quoted.
const RESERVED: [&str; 28] = [
    "after", "and", "andalso", "band", "begin", "bnot", "bor", "bsl", "bsr", "bxor", "case",
    "catch", "cond", "div", "end", "fun", "if", "let", "maybe", "not", "of", "or", "orelse",
    "receive", "rem", "try", "when", "xor",
];
/// Deepest nesting read here: under the decoder's MAX_DEPTH, so what is read here it reads.
const DEPTH: usize = MAX_DEPTH - 16;
/// call counters are {Name, Giga, Ones} (docs/erts/recon-formulas.md §0)
const GIGA: u128 = 1_000_000_000;
/// The most terms a reply may hold here (a +S 1024 node's largest reply has ~0.4 M: 1,025
/// instances of ~350); past it, decline. The decoder's budget charges nothing for a small
/// integer, so a peer's list of 16 M of them is within it, and would be 0.8 GB of nodes here.
const MAX_NODES: usize = 1 << 20;
/// The longest option text Snapshot.check proves plain (`_plain_str`).
const MAX_TEXT: usize = 4096;

/// A term of the reply, in preorder: a container's items follow it up to `end`.
#[derive(Clone, Copy)]
struct Node {
    tag: u8,
    /// items of a tuple or list
    arity: u32,
    /// the index after this node's subtree
    end: u32,
    /// an integer's value
    val: i128,
    /// an atom's or a string's bytes in the input
    at: u32,
    len: u32,
    /// this term's text in `out`
    t0: u32,
    t1: u32,
}

const INT: u8 = 1;
const ATOM: u8 = 2;
const TUPLE: u8 = 3;
const LIST: u8 = 4; // NIL too (arity 0)
const STR: u8 = 5; // STRING_EXT the decoder makes a str (printable, not empty)
const OTHER: u8 = 6; // a list of small integers from STRING_EXT, a binary: text only

struct Parse<'a> {
    data: &'a [u8],
    nodes: Vec<Node>,
    out: String,
    left: usize,
    /// each distinct atom's number (a node's `at`), its name and its text
    ids: HashMap<&'a [u8], u32, Fx>,
    atoms: Vec<(&'a [u8], String)>,
}

/// FxHash (rustc's): atom names are short and ours to hash, no adversary gains by collisions
/// beyond the decoder's own bounds (the budget charges every atom).
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut it = bytes.chunks_exact(8);
        for c in &mut it {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517cc1b727220a95);
        }
        let mut w = 0u64;
        for (i, &b) in it.remainder().iter().enumerate() {
            w |= (b as u64) << (8 * i);
        }
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517cc1b727220a95);
    }
    fn write_u8(&mut self, i: u8) {
        self.0 = (self.0.rotate_left(5) ^ i as u64).wrapping_mul(0x517cc1b727220a95);
    }
    fn write_usize(&mut self, i: usize) {
        self.0 = (self.0.rotate_left(5) ^ i as u64).wrapping_mul(0x517cc1b727220a95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl std::hash::BuildHasher for Fx {
    type Hasher = Fx;
    fn build_hasher(&self) -> Fx {
        Fx(0)
    }
}

/// `n` in decimal, as Python's str() of an int.
fn decimal(out: &mut String, n: i128) {
    let mut buf = [0u8; 40];
    let mut i = buf.len();
    // u64 arithmetic: every value read here fits (bignums of 8 bytes at most)
    let mut m = n.unsigned_abs() as u64;
    loop {
        i -= 1;
        buf[i] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    // ASCII digits
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or("0"));
}

/// io_lib's printable_latin1_list, as etf.rs `printable`: STRING_EXT is a str exactly then.
fn printable(b: u8) -> bool {
    (32..127).contains(&b) || b >= 160 || matches!(b, b'\n' | b'\r' | b'\t' | 11 | 8 | 12 | 27)
}

/// Python's str.isprintable() of a Latin-1 code point (term_text.rs `is_printable`).
fn py_printable(c: u8) -> bool {
    if c < 0x80 {
        (0x20..0x7f).contains(&c)
    } else {
        c >= 0xa1 && c != 0xad
    }
}

/// What term_text.rs `quoted` writes of Latin-1 text between `q` quotes.
fn quote(out: &mut String, s: &[u8], q: u8) {
    out.push(q as char);
    for &c in s {
        if c == b'\\' {
            out.push_str("\\\\");
        } else if c == q {
            out.push('\\');
            out.push(q as char);
        } else if py_printable(c) {
            out.push(c as char);
        } else {
            write!(out, "\\{c:03o}").ok();
        }
    }
    out.push(q as char);
}

impl<'a> Parse<'a> {
    fn get(&self, pos: usize, k: usize) -> Option<&'a [u8]> {
        self.data.get(pos..pos.checked_add(k)?)
    }

    fn charge(&mut self, words: usize) -> Option<()> {
        self.left = self.left.checked_sub(words)?;
        Some(())
    }

    /// The term at `pos` (its tag), `depth` deep: its nodes pushed, its text written; the
    /// position after it, or None to decline.
    fn term(&mut self, pos: usize, depth: usize) -> Option<usize> {
        if depth > DEPTH || self.nodes.len() >= MAX_NODES {
            return None;
        }
        let tag = *self.data.get(pos)?;
        let pos = pos + 1;
        let idx = self.nodes.len();
        let t0 = self.out.len() as u32;
        let mut node = Node {
            tag: INT,
            arity: 0,
            end: 0,
            val: 0,
            at: 0,
            len: 0,
            t0,
            t1: 0,
        };
        self.nodes.push(node);
        let end = match tag {
            97 => {
                node.val = *self.data.get(pos)? as i128;
                pos + 1
            }
            98 => {
                self.charge(cost::INT)?;
                let b = self.get(pos, 4)?;
                node.val = i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i128;
                pos + 4
            }
            110 => {
                // SMALL_BIG_EXT of 8 bytes at most (a count is a machine word)
                let k = *self.data.get(pos)? as usize;
                if k > 8 {
                    return None;
                }
                let b = self.get(pos + 1, 1 + k)?;
                self.charge(cost::INT + k / 8)?;
                let mut a = [0u8; 8];
                a[..k].copy_from_slice(&b[1..]);
                let n = u64::from_le_bytes(a) as i128;
                node.val = if b[0] != 0 { -n } else { n };
                pos + 2 + k
            }
            100 | 115 | 118 | 119 => {
                let (k, at) = if tag == 119 || tag == 115 {
                    (*self.data.get(pos)? as usize, pos + 1)
                } else {
                    let b = self.get(pos, 2)?;
                    (u16::from_be_bytes([b[0], b[1]]) as usize, pos + 2)
                };
                let name = self.get(at, k)?;
                self.charge(cost::bytes(k) + cost::CONTAINER)?;
                let id = match self.ids.get(name) {
                    Some(&id) => id,
                    None => {
                        if !name.is_ascii() || k > MAX_TEXT {
                            // one spelling per name (keys compare by their number), and
                            // names Snapshot.check proves plain
                            return None;
                        }
                        let plain = name.first().is_some_and(|c| c.is_ascii_lowercase())
                            && name
                                .iter()
                                .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'@');
                        let mut text = String::new();
                        let s = std::str::from_utf8(name).ok()?; // ASCII
                        if plain && !RESERVED.contains(&s) {
                            text.push_str(s);
                        } else {
                            quote(&mut text, name, b'\'');
                        }
                        let id = self.atoms.len() as u32;
                        self.atoms.push((name, text));
                        self.ids.insert(name, id);
                        id
                    }
                };
                node.tag = ATOM;
                node.at = id;
                self.out.push_str(&self.atoms[id as usize].1);
                at + k
            }
            104 | 105 => {
                let (count, mut p) = if tag == 104 {
                    (*self.data.get(pos)? as usize, pos + 1)
                } else {
                    let b = self.get(pos, 4)?;
                    (
                        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize,
                        pos + 4,
                    )
                };
                self.get(p, count)?; // every element takes a byte at least
                self.charge(cost::CONTAINER.checked_add(count)?)?;
                node.tag = TUPLE;
                node.arity = count as u32;
                self.out.push('{');
                for i in 0..count {
                    if i > 0 {
                        self.out.push(',');
                    }
                    p = self.term(p, depth + 1)?;
                }
                self.out.push('}');
                p
            }
            106 => {
                self.charge(cost::CONTAINER)?;
                node.tag = LIST;
                self.out.push_str("[]");
                pos
            }
            108 => {
                let b = self.get(pos, 4)?;
                let count = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let mut p = pos + 4;
                self.get(p, count)?;
                self.charge(cost::CONTAINER.checked_add(count)?)?;
                node.tag = LIST;
                node.arity = count as u32;
                self.out.push('[');
                for i in 0..count {
                    if i > 0 {
                        self.out.push(',');
                    }
                    p = self.term(p, depth + 1)?;
                }
                if *self.data.get(p)? != 106 {
                    return None; // improper
                }
                self.out.push(']');
                p + 1
            }
            107 => {
                let b = self.get(pos, 2)?;
                let k = u16::from_be_bytes([b[0], b[1]]) as usize;
                let raw = self.get(pos + 2, k)?;
                if raw.iter().all(|&c| printable(c)) {
                    self.charge(cost::bytes(k) + cost::CONTAINER)?;
                    node.tag = STR; // "" too: a str, written [] as term_text.rs writes it
                    if k == 0 {
                        self.out.push_str("[]");
                    } else {
                        quote(&mut self.out, raw, b'"');
                    }
                } else {
                    self.charge(cost::CONTAINER + k)?;
                    node.tag = OTHER;
                    self.out.push('[');
                    for (i, c) in raw.iter().enumerate() {
                        if i > 0 {
                            self.out.push(',');
                        }
                        write!(self.out, "{c}").ok();
                    }
                    self.out.push(']');
                }
                node.at = (pos + 2) as u32;
                node.len = k as u32;
                pos + 2 + k
            }
            109 => {
                let b = self.get(pos, 4)?;
                let k = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let raw = self.get(pos + 4, k)?;
                self.charge(cost::bytes(k))?;
                node.tag = OTHER;
                self.out.push_str("<<");
                for (i, c) in raw.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    write!(self.out, "{c}").ok();
                }
                self.out.push_str(">>");
                pos + 4 + k
            }
            _ => return None, // floats, pids, ports, references, funs, maps: not ours to read
        };
        if node.tag == INT {
            decimal(&mut self.out, node.val);
        }
        node.end = self.nodes.len() as u32;
        node.t1 = self.out.len() as u32;
        self.nodes[idx] = node;
        Some(end)
    }
}

/// The keys the builder looks for, by index into Build.key (their atom numbers in the reply).
const KEYS: [&str; 23] = [
    "instance",
    "versions",
    "options",
    "mbcs",
    "sbcs",
    "mbcs_pool",
    "calls",
    "fix_types",
    "raw_blocks",
    "blocks",
    "carriers",
    "carriers_size",
    "mseg_alloc_carriers",
    "sys_alloc_carriers",
    "mseg_alloc_carriers_size",
    "sys_alloc_carriers_size",
    "count",
    "size",
    "blocks_size",
    "foreign_blocks",
    "true",
    "false",
    "atags",
];
const K_INSTANCE: usize = 0;
const K_VERSIONS: usize = 1;
const K_OPTIONS: usize = 2;
const K_MBCS: usize = 3;
const K_SBCS: usize = 4;
const K_POOL: usize = 5;
const K_CALLS: usize = 6;
const K_FIX: usize = 7;
const K_RAW_BLOCKS: usize = 8;
const K_BLOCKS: usize = 9;
const K_CARRIERS: usize = 10;
const K_CARRIERS_SIZE: usize = 11;
const K_COUNT: usize = 16;
const K_SIZE: usize = 17;
const K_TRUE: usize = 20;
const K_FALSE: usize = 21;
const K_ATAGS: usize = 22;
/// A count this large is a signed counter of the VM gone negative (snapshot.py WRAP): the
/// carrier scan's sums take it as 0, as collect.py's _stat does.
const WRAP: u64 = 1 << 63;
/// What pool_stats leaves out of its counters (system_info.py _POOL_STATS).
const POOL_STATS: [usize; 6] = [K_BLOCKS, 18, K_RAW_BLOCKS, 19, K_CARRIERS, K_CARRIERS_SIZE];

/// The records' classes, the strings the builder reuses, and what it has built.
struct Build<'py, 'a> {
    py: Python<'py>,
    data: &'a [u8],
    nodes: &'a [Node],
    text: &'a str,
    atoms: &'a [(&'a [u8], String)],
    alloc: &'a Bound<'py, PyString>,
    numeric: &'a Bound<'py, PyAny>,
    max_instance: u64,
    cls: [Bound<'py, PyAny>; 6],
    names: [Bound<'py, PyString>; 25],
    empty: Bound<'py, PyTuple>,
    /// each atom's name as a str, made once; and whether it names a numeric option
    strs: Vec<Option<Bound<'py, PyString>>>,
    numeric_of: Vec<Option<bool>>,
    /// KEYS' atom numbers (u32::MAX: not in the reply)
    key: [u32; 23],
    /// what collect.py's carrier scan needs, summed as its _section and _block_count sum the
    /// term: this instance's carriers and their bytes, the reply's blocks, and atags
    carriers: u128,
    carrier_bytes: u128,
    blocks: u128,
    atags: bool,
}

// The classes, in the order system_info.py passes them.
const INSTANCE: usize = 0;
const CARRIERS: usize = 1;
const BLOCKS: usize = 2;
const POOL: usize = 3;
const TRIPLE: usize = 4;
const FIX: usize = 5;

// Field names (interned once per call), by index into Build.names.
const FIELDS: [&str; 25] = [
    "allocator",
    "instance",
    "options",
    "mbcs",
    "sbcs",
    "mbcs_pool",
    "calls",
    "fix_types",
    "versions", // AllocatorInstance 0..9
    "blocks",
    "carriers",
    "carriers_size",
    "mseg_carriers",
    "sys_carriers",
    "mseg_carriers_size",
    "sys_carriers_size", // CarrierStats 9..16
    "count",
    "size",     // BlockStats 16..18
    "counters", // PoolStats: blocks, carriers, carriers_size, counters 18
    "current",
    "last_max",
    "max", // Triple 19..22
    "type",
    "allocated",
    "used", // FixType 22..25
];

/// Items of the container node `i`, by index.
fn items(nodes: &[Node], i: usize) -> impl Iterator<Item = usize> + '_ {
    let mut j = i + 1;
    let end = nodes[i].end as usize;
    std::iter::from_fn(move || {
        if j >= end {
            return None;
        }
        let k = j;
        j = nodes[j].end as usize;
        Some(k)
    })
}

type P<T> = PyResult<Option<T>>;
/// A property list: (key's atom number, its tuple node), in order.
type Props = Vec<(u32, usize)>;

impl<'py, 'a> Build<'py, 'a> {
    fn is_key(&self, i: usize, k: usize) -> bool {
        self.nodes[i].tag == ATOM && self.nodes[i].at == self.key[k]
    }

    /// An atom's name as a str (made once per call), or a STRING_EXT's text (Latin-1).
    fn text_of(&mut self, i: usize) -> Bound<'py, PyString> {
        let n = self.nodes[i];
        if n.tag == ATOM {
            if let Some(s) = &self.strs[n.at as usize] {
                return s.clone();
            }
            // ASCII: the bytes are the text
            let name = std::str::from_utf8(self.atoms[n.at as usize].0).unwrap_or("");
            let o = PyString::new_bound(self.py, name);
            self.strs[n.at as usize] = Some(o.clone());
            return o;
        }
        let b = &self.data[n.at as usize..(n.at + n.len) as usize];
        let s: String = b.iter().map(|&c| c as char).collect();
        PyString::new_bound(self.py, &s)
    }

    /// An integer 0..2^64-1 (system_info.py `_int`), else None.
    fn count(&self, i: usize) -> Option<u64> {
        let n = &self.nodes[i];
        if n.tag == INT && (0..=u64::MAX as i128).contains(&n.val) {
            Some(n.val as u64)
        } else {
            None
        }
    }

    fn int(&self, v: u64) -> PyResult<PyObject> {
        // SAFETY: under the GIL; a new reference or NULL with the error set
        unsafe {
            let raw = ffi::PyLong_FromUnsignedLongLong(v);
            if raw.is_null() {
                return Err(PyErr::fetch(self.py));
            }
            Ok(PyObject::from_owned_ptr(self.py, raw))
        }
    }

    /// A property list: `{atom, ...}` tuples only, no key twice (else decline).
    fn props(&self, i: usize) -> Option<Props> {
        if self.nodes[i].tag != LIST {
            return None;
        }
        let mut out: Props = Vec::with_capacity(self.nodes[i].arity as usize);
        for it in items(self.nodes, i) {
            let n = &self.nodes[it];
            if n.tag != TUPLE || n.arity < 2 || self.nodes[it + 1].tag != ATOM {
                return None;
            }
            let k = self.nodes[it + 1].at;
            if out.iter().any(|(o, _)| *o == k) {
                return None;
            }
            out.push((k, it));
        }
        Some(out)
    }

    /// The values of tuple node `t` after its key.
    fn values(&self, t: usize) -> Vec<usize> {
        items(self.nodes, t).skip(1).collect()
    }

    /// `{K, V}`'s V, else None.
    fn value(&self, t: usize) -> Option<usize> {
        if self.nodes[t].arity == 2 {
            Some(self.nodes[t + 1].end as usize)
        } else {
            None
        }
    }

    fn find(&self, p: &[(u32, usize)], k: usize) -> Option<usize> {
        let id = self.key[k];
        p.iter().find(|(o, _)| *o == id).map(|(_, t)| *t)
    }

    fn object(&self, cls: usize, fields: &[(usize, PyObject)]) -> PyResult<PyObject> {
        let py = self.py;
        // SAFETY: under the GIL; object.__new__(cls) with no arguments (what a dataclass's
        // __init__ starts from), then each field set as object.__setattr__ sets it, which a
        // frozen dataclass's own __setattr__ would refuse (dataclasses do the same).
        unsafe {
            let new = (*std::ptr::addr_of!(ffi::PyBaseObject_Type))
                .tp_new
                .expect("object.__new__");
            let raw = new(
                self.cls[cls].as_ptr() as *mut ffi::PyTypeObject,
                self.empty.as_ptr(),
                std::ptr::null_mut(),
            );
            if raw.is_null() {
                return Err(PyErr::fetch(py));
            }
            let obj = PyObject::from_owned_ptr(py, raw);
            for (name, v) in fields {
                if ffi::PyObject_GenericSetAttr(raw, self.names[*name].as_ptr(), v.as_ptr()) < 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(obj)
        }
    }

    /// `{K, C, L, M}` (its tuple node) as a Triple; a missing one is Triple(0, 0, 0).
    fn triple(&self, t: Option<usize>) -> P<PyObject> {
        let (c, l, m) = match t {
            None => (0, 0, 0),
            Some(t) => {
                if self.nodes[t].arity != 4 {
                    return Ok(None);
                }
                let a = self.nodes[t + 1].end as usize;
                let b = self.nodes[a].end as usize;
                let c = self.nodes[b].end as usize;
                match (self.count(a), self.count(b), self.count(c)) {
                    (Some(x), Some(y), Some(z)) => (x, y, z),
                    _ => return Ok(None),
                }
            }
        };
        let f = [(19, self.int(c)?), (20, self.int(l)?), (21, self.int(m)?)];
        Ok(Some(self.object(TRIPLE, &f)?))
    }

    /// The first value of a `{K, V, ...}` item read already (0 if absent or wrapped).
    fn first(&self, t: Option<usize>) -> u128 {
        match t.and_then(|t| self.count(self.nodes[t + 1].end as usize)) {
            Some(v) if v < WRAP => v as u128,
            _ => 0,
        }
    }

    /// `{K, N}`'s N, 0..2^64-1; a missing one is 0.
    fn single(&self, t: Option<usize>) -> Option<u64> {
        match t {
            None => Some(0),
            Some(t) => self.count(self.value(t)?),
        }
    }

    /// The `{blocks, [{Type, Props}]}` list of a section as (type's atom node, its Props);
    /// None to decline (a type twice, OTP 22's totals, recon's raw_blocks).
    fn typed(&self, p: &[(u32, usize)]) -> Option<Vec<(usize, Props)>> {
        if self.find(p, K_RAW_BLOCKS).is_some() {
            return None; // recon's normalized form: not what a node sends
        }
        let mut out: Vec<(usize, Props)> = Vec::new();
        if let Some(t) = self.find(p, K_BLOCKS) {
            let lst = self.value(t)?;
            if self.nodes[lst].tag != LIST {
                return None; // OTP 22's totals
            }
            for e in items(self.nodes, lst) {
                let n = self.nodes[e];
                if n.tag != TUPLE || n.arity != 2 || self.nodes[e + 1].tag != ATOM {
                    return None;
                }
                let ty = self.nodes[e + 1].at;
                if out.iter().any(|(o, _)| self.nodes[*o].at == ty) {
                    return None;
                }
                out.push((e + 1, self.props(self.nodes[e + 1].end as usize)?));
            }
        }
        Some(out)
    }

    /// system_info.py carrier_stats of the value node `s` (OTP 23+: blocks per type); `s`
    /// None: an absent section, every count 0.
    fn carrier_stats(&mut self, s: Option<usize>) -> P<PyObject> {
        let p = match s {
            None => Vec::new(),
            Some(s) => match self.props(s) {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        let Some(typed) = self.typed(&p) else {
            return Ok(None);
        };
        let blocks = PyDict::new_bound(self.py);
        for (ty, q) in typed {
            let (Some(count), Some(size)) = (
                self.triple(self.find(&q, K_COUNT))?,
                self.triple(self.find(&q, K_SIZE))?,
            ) else {
                return Ok(None);
            };
            self.blocks += self.first(self.find(&q, K_COUNT));
            let ty = self.text_of(ty);
            blocks.set_item(ty, self.object(BLOCKS, &[(16, count), (17, size)])?)?;
        }
        let (Some(carriers), Some(size)) = (
            self.triple(self.find(&p, K_CARRIERS))?,
            self.triple(self.find(&p, K_CARRIERS_SIZE))?,
        ) else {
            return Ok(None);
        };
        self.carriers += self.first(self.find(&p, K_CARRIERS));
        self.carrier_bytes += self.first(self.find(&p, K_CARRIERS_SIZE));
        let mut f = vec![(9, blocks.into_any().unbind()), (10, carriers), (11, size)];
        // mseg_alloc_carriers .. sys_alloc_carriers_size: fields 12..16, KEYS 12..16
        for k in 12..16 {
            let Some(v) = self.single(self.find(&p, k)) else {
                return Ok(None);
            };
            f.push((k, self.int(v)?));
        }
        Ok(Some(self.object(CARRIERS, &f)?))
    }

    /// system_info.py `_calls` of the property list `p`, leaving out `skip`: each value
    /// 0..2^64-1 (else decline: not plain for Snapshot.check).
    fn calls(&mut self, p: &[(u32, usize)], skip: &[usize]) -> P<Bound<'py, PyDict>> {
        let out = PyDict::new_bound(self.py);
        for &(k, t) in p {
            if skip.iter().any(|&s| self.key[s] == k) {
                continue;
            }
            let a = self.nodes[t + 1].end as usize; // the first value
            let n: u128 = match self.nodes[t].arity {
                3 => {
                    let b = self.nodes[a].end as usize;
                    match (self.count(a), self.count(b)) {
                        (Some(g), Some(o)) => g as u128 * GIGA + o as u128,
                        _ => return Ok(None),
                    }
                }
                2 => {
                    if self.nodes[a].tag == TUPLE && self.nodes[a].arity == 2 {
                        let b = self.nodes[a + 1].end as usize;
                        match (self.count(a + 1), self.count(b)) {
                            (Some(g), Some(o)) => g as u128 * GIGA + o as u128,
                            _ => return Ok(None),
                        }
                    } else {
                        match self.count(a) {
                            Some(c) => c as u128,
                            None => return Ok(None),
                        }
                    }
                }
                _ => return Ok(None),
            };
            if n > u64::MAX as u128 {
                return Ok(None);
            }
            let key = self.text_of(t + 1);
            out.set_item(key, self.int(n as u64)?)?;
        }
        Ok(Some(out))
    }

    /// system_info.py pool_stats (blocks per type as {count, N}, {size, N}).
    fn pool(&mut self, s: usize) -> P<PyObject> {
        let Some(p) = self.props(s) else {
            return Ok(None);
        };
        let Some(typed) = self.typed(&p) else {
            return Ok(None);
        };
        let blocks = PyDict::new_bound(self.py);
        for (ty, q) in typed {
            let (Some(c), Some(z)) = (
                self.single(self.find(&q, K_COUNT)),
                self.single(self.find(&q, K_SIZE)),
            ) else {
                return Ok(None);
            };
            self.blocks += self.first(self.find(&q, K_COUNT));
            let pair = PyTuple::new_bound(self.py, [self.int(c)?, self.int(z)?]);
            blocks.set_item(self.text_of(ty), pair)?;
        }
        let (Some(c), Some(z)) = (
            self.single(self.find(&p, K_CARRIERS)),
            self.single(self.find(&p, K_CARRIERS_SIZE)),
        ) else {
            return Ok(None);
        };
        self.carriers += self.first(self.find(&p, K_CARRIERS));
        self.carrier_bytes += self.first(self.find(&p, K_CARRIERS_SIZE));
        let Some(counters) = self.calls(&p, &POOL_STATS)? else {
            return Ok(None);
        };
        let f = [
            (9, blocks.into_any().unbind()),
            (10, self.int(c)?),
            (11, self.int(z)?),
            (18, counters.into_any().unbind()),
        ];
        Ok(Some(self.object(POOL, &f)?))
    }

    /// system_info.py `options`: each value an integer 0..2^64-1, true/false, an atom's name,
    /// or the text of another term (a number or a text proven plain, as Snapshot.check wants).
    fn options(&mut self, v: usize) -> P<Bound<'py, PyDict>> {
        let Some(p) = self.props(v) else {
            return Ok(None);
        };
        let out = PyDict::new_bound(self.py);
        for (k, t) in p {
            let Some(x) = self.value(t) else {
                return Ok(None);
            };
            let key = self.text_of(t + 1);
            let numeric = match self.numeric_of[k as usize] {
                Some(b) => b,
                None => {
                    let b = self.numeric.contains(&key)?;
                    self.numeric_of[k as usize] = Some(b);
                    b
                }
            };
            let n = self.nodes[x];
            let val: PyObject = match n.tag {
                INT => match self.count(x) {
                    Some(c) => self.int(c)?,
                    None => return Ok(None),
                },
                ATOM if numeric => return Ok(None),
                ATOM if self.is_key(x, K_TRUE) => {
                    self.atags |= k == self.key[K_ATAGS];
                    true.into_py(self.py)
                }
                ATOM if self.is_key(x, K_FALSE) => false.into_py(self.py),
                ATOM => self.text_of(x).into_any().unbind(),
                STR => return Ok(None), // a str option is kept as is: not this path's
                _ => {
                    let s = &self.text[n.t0 as usize..n.t1 as usize];
                    if numeric || s.len() > MAX_TEXT || !s.is_ascii() {
                        return Ok(None);
                    }
                    PyString::new_bound(self.py, s).into_any().unbind()
                }
            };
            out.set_item(key, val)?;
        }
        Ok(Some(out))
    }

    /// A `{K, V}` item's V through `f`; absent: `none`; any other shape: decline.
    fn section<T>(
        &mut self,
        p: &[(u32, usize)],
        k: usize,
        none: T,
        f: impl FnOnce(&mut Self, usize) -> P<T>,
    ) -> P<T> {
        match self.find(p, k) {
            None => Ok(Some(none)),
            Some(t) => match self.value(t) {
                Some(x) => f(self, x),
                None => Ok(None),
            },
        }
    }

    /// One `{instance, N, Props}` as system_info.py instance_from_props builds it.
    fn instance(&mut self, e: usize) -> P<PyObject> {
        let n = self.nodes[e];
        if n.tag != TUPLE || n.arity != 3 || !self.is_key(e + 1, K_INSTANCE) {
            return Ok(None);
        }
        let ixn = self.nodes[e + 1].end as usize;
        let Some(ix) = self.count(ixn) else {
            return Ok(None);
        };
        if ix > self.max_instance {
            return Ok(None);
        }
        let Some(p) = self.props(self.nodes[ixn].end as usize) else {
            return Ok(None);
        };
        let (mbcs, sbcs) = (self.find(&p, K_MBCS), self.find(&p, K_SBCS));
        (self.carriers, self.carrier_bytes) = (0, 0);
        if mbcs.is_none() && sbcs.is_none() {
            return Ok(None); // not an alloc_util instance: system_info.py keeps it in extra
        }
        let mut versions: PyObject = self.py.None();
        if let Some(t) = self.find(&p, K_VERSIONS) {
            let l = PyList::empty_bound(self.py);
            for x in self.values(t) {
                if !matches!(self.nodes[x].tag, ATOM | STR) {
                    return Ok(None);
                }
                l.append(self.text_of(x))?;
            }
            versions = l.into_any().unbind();
        }
        let none = self.py.None();
        let Some(options) = self.section(&p, K_OPTIONS, PyDict::new_bound(self.py), |b, x| {
            b.options(x)
        })?
        else {
            return Ok(None);
        };
        let mut sections = Vec::with_capacity(2);
        for s in [mbcs, sbcs] {
            let x = match s {
                None => None,
                Some(t) => match self.value(t) {
                    Some(x) => Some(x),
                    None => return Ok(None),
                },
            };
            let Some(stats) = self.carrier_stats(x)? else {
                return Ok(None);
            };
            sections.push(stats);
        }
        let Some(pool) = self.section(&p, K_POOL, none.clone_ref(self.py), |b, x| b.pool(x))?
        else {
            return Ok(None);
        };
        let Some(calls) = self.section(&p, K_CALLS, PyDict::new_bound(self.py), |b, x| match b
            .props(x)
        {
            Some(q) => b.calls(&q, &[]),
            None => Ok(None),
        })?
        else {
            return Ok(None);
        };
        let Some(fix) = self.section(&p, K_FIX, none, |b, x| b.fix_types(x))? else {
            return Ok(None);
        };
        let mut it = sections.into_iter();
        let (m, s) = (it.next().expect("mbcs"), it.next().expect("sbcs"));
        let f = [
            (0, self.alloc.clone().into_any().unbind()),
            (1, self.int(ix)?),
            (2, options.into_any().unbind()),
            (3, m),
            (4, s),
            (5, pool),
            (6, calls.into_any().unbind()),
            (7, fix),
            (8, versions),
        ];
        Ok(Some(self.object(INSTANCE, &f)?))
    }

    /// fix_types: `[{Type, Allocated, Used}]` as FixType records.
    fn fix_types(&mut self, x: usize) -> P<PyObject> {
        if self.nodes[x].tag != LIST {
            return Ok(None);
        }
        let l = PyList::empty_bound(self.py);
        for ft in items(self.nodes, x) {
            let m = self.nodes[ft];
            if m.tag != TUPLE || m.arity != 3 || self.nodes[ft + 1].tag != ATOM {
                return Ok(None);
            }
            let a = self.nodes[ft + 1].end as usize;
            let u = self.nodes[a].end as usize;
            let (Some(a), Some(u)) = (self.count(a), self.count(u)) else {
                return Ok(None);
            };
            let f = [
                (22, self.text_of(ft + 1).into_any().unbind()),
                (23, self.int(a)?),
                (24, self.int(u)?),
            ];
            l.append(self.object(FIX, &f)?)?;
        }
        Ok(Some(l.into_any().unbind()))
    }
}

/// What the fast path read of one reply: its records and the text of its term.
#[pyclass(module = "beamalloc._refalloc", frozen)]
pub struct AllocReply {
    /// term_text of the decoded reply (the raw term's part; term_text.rs writes it as is)
    pub text: String,
    /// the AllocatorInstance records, in the reply's order (shared by every Snapshot built
    /// from this reply)
    #[pyo3(get)]
    pub instances: Py<PyList>,
    /// where the term ends in the input
    #[pyo3(get)]
    pub end: usize,
    /// (instance, carriers, their bytes) of each instance, its mbcs, sbcs and pool summed,
    /// wrapped counts as 0 (what collect.py's carrier scan reads of the term)
    #[pyo3(get)]
    pub carriers: Vec<(u64, u128, u128)>,
    /// the blocks of every instance and section (collect.py's _block_count of the term)
    #[pyo3(get)]
    pub blocks: u128,
    /// some instance has the option {atags, true}
    #[pyo3(get)]
    pub atags: bool,
}

#[pymethods]
impl AllocReply {
    #[getter]
    fn text(&self) -> &str {
        &self.text
    }
}

/// The reply at `data[pos]` (its tag) of `system_info({allocator, alloc})` as records, or None
/// when it is not the plain shape of an alloc_util allocator (the module comment): then the
/// caller decodes it (etf.rs) and reads it (system_info.py). `classes`: AllocatorInstance,
/// CarrierStats, BlockStats, PoolStats, Triple, FixType; `numeric`: the options that must be
/// integers (snapshot.py NUMERIC_OPTIONS); `budget`: the decoder's word budget (etf.py
/// MAX_WORDS); `max_instance`: the largest instance number Snapshot.check takes. A panic is
/// a ValueError, never an abort.
#[pyfunction]
#[pyo3(signature = (data, pos, alloc, classes, numeric, budget, max_instance))]
#[allow(clippy::too_many_arguments)]
pub fn alloc_reply(
    py: Python<'_>,
    data: &[u8],
    pos: usize,
    alloc: &Bound<'_, PyString>,
    classes: &Bound<'_, PyTuple>,
    numeric: &Bound<'_, PyAny>,
    budget: usize,
    max_instance: u64,
) -> PyResult<Option<AllocReply>> {
    let run = std::panic::AssertUnwindSafe(|| -> PyResult<Option<AllocReply>> {
        if data.len() > u32::MAX as usize / 2 {
            return Ok(None);
        }
        let mut p = Parse {
            data,
            nodes: Vec::with_capacity((data.len().saturating_sub(pos) / 5 + 16).min(MAX_NODES)),
            out: String::with_capacity(data.len().saturating_sub(pos) + 16),
            left: budget,
            ids: HashMap::with_hasher(Fx(0)),
            atoms: Vec::new(),
        };
        let Some(end) = p.term(pos, 1) else {
            return Ok(None);
        };
        if p.nodes[0].tag != LIST || p.nodes[0].arity == 0 {
            return Ok(None);
        }
        let cls: Vec<Bound<'_, PyAny>> = classes.iter().collect();
        let cls: [Bound<'_, PyAny>; 6] = match cls.try_into() {
            Ok(c) => c,
            Err(_) => return Err(PyValueError::new_err("alloc_reply: six classes")),
        };
        let names = FIELDS.map(|f| PyString::intern_bound(py, f));
        let key = KEYS.map(|k| p.ids.get(k.as_bytes()).copied().unwrap_or(u32::MAX));
        let n_atoms = p.atoms.len();
        let mut b = Build {
            py,
            data,
            nodes: &p.nodes,
            text: &p.out,
            atoms: &p.atoms,
            alloc,
            numeric,
            max_instance,
            cls,
            names,
            empty: PyTuple::empty_bound(py),
            strs: vec![None; n_atoms],
            numeric_of: vec![None; n_atoms],
            key,
            carriers: 0,
            carrier_bytes: 0,
            blocks: 0,
            atags: false,
        };
        let out = PyList::empty_bound(py);
        let mut carriers = Vec::with_capacity(p.nodes[0].arity as usize);
        for e in items(&p.nodes, 0) {
            match b.instance(e)? {
                Some(o) => out.append(o)?,
                None => return Ok(None),
            }
            let ix = b.count(b.nodes[e + 1].end as usize).unwrap_or(0);
            carriers.push((ix, b.carriers, b.carrier_bytes));
        }
        let (blocks, atags) = (b.blocks, b.atags);
        drop(b);
        Ok(Some(AllocReply {
            text: p.out,
            instances: out.unbind(),
            end,
            carriers,
            blocks,
            atags,
        }))
    });
    std::panic::catch_unwind(run).unwrap_or_else(|_| {
        drop(PyErr::take(py));
        Err(PyValueError::new_err("the native allocator reader failed"))
    })
}
