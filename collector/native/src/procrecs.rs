//! A crash dump's =proc sections read natively (issue 28 item 1): what collector/procdump.py
//! `ProcSections` with advice/holders.py `DumpMembers` (the groups, the sums, the top-N the
//! holders name) and collector/dumptables.py `DumpTables` (the few processes the cause of death
//! names) make of them, with no Python object or call per process. The scan hands each
//! complete =proc section over here (python_dumpscan.rs `DumpScan`); Python feeds the others
//! (the last section of a dump, the sections after =end). The Python classes stay the reference
//! (tests/fuzz/reader_props.py reads every input both ways).
//!
//! What is a name, a spawn call, a program counter or a state (procdump.py `_derived`, the
//! name test) is asked of Python once per distinct value, so the regexes and Unicode rules stay
//! Python's own; all the rest (keys, counts, sums, ranks) is byte work here. Text is the dump's
//! bytes, each one character (latin-1): byte order is the order of Python's strings.
#![allow(clippy::useless_conversion)]

use crate::dumpscan::{py_space, Want};
use memchr::memmem;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use std::collections::HashMap;
use std::sync::Arc;

/// procdump.MAX_WORDS: sizes above 2^61 words are no node's.
const MAX_WORDS: u128 = (1 << 61) - 1;
/// procdump.MAX_CACHE: the derived values kept, past which the cache starts again.
const MAX_CACHE: usize = 1 << 16;
/// dumptables: processes kept by memory, active ones besides, a value's characters read.
const TOP_PROCS: usize = 8;
const MAX_ACTIVE: usize = 4;
const TABLE_VALUE: usize = 200;
/// procdump.KEYS' order: the PROC_INTS, then State, Name, Spawned as, Program counter.
const INTS: usize = 10;
const YOUNG: usize = 0;
const OLD: usize = 1;
const UNUSED0: usize = 2;
const UNUSED1: usize = 3;
const FRAG: usize = 4;
const BIN0: usize = 5;
const BIN1: usize = 6;
const MEMORY: usize = 7;
const QUEUE: usize = 8;
const REDS: usize = 9;
const STATE: usize = 10;
const NAME: usize = 11;
const SPAWNED: usize = 12;
const PCX: usize = 13;

fn strip(b: &[u8]) -> &[u8] {
    let sp = |c: &u8| py_space(*c as char);
    let a = b.iter().position(|c| !sp(c)).unwrap_or(b.len());
    let e = b.iter().rposition(|c| !sp(c)).map_or(a, |i| i + 1);
    &b[a..e.max(a)]
}

/// dumpscan.parse's count: `[0-9]{1,20}` once stripped, at most MAX_WORDS.
fn count(v: &[u8]) -> Option<u128> {
    count_max(v, MAX_WORDS)
}

fn count_max(v: &[u8], max: u128) -> Option<u128> {
    let v = strip(v);
    if v.is_empty() || v.len() > 20 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let x = v.iter().fold(0u128, |x, &d| x * 10 + u128::from(d - b'0'));
    (x <= max).then_some(x)
}

fn latin1(py: Python<'_>, s: &[u8]) -> PyObject {
    crate::python_dumpscan::latin1(py, s)
}

/// A string Python derived: the object handed back, and its text to compare and key by
/// (UTF-8, whose byte order is the characters' order).
struct Str {
    py: PyObject,
    s: String,
}

fn py_str(py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Option<Arc<Str>>> {
    if o.is_none() {
        return Ok(None);
    }
    let s = o.downcast::<PyString>()?.to_str()?.to_owned();
    Ok(Some(Arc::new(Str { py: o.clone().unbind().into_py(py), s })))
}

/// procdump._derived of a value: (initial call, current function, state).
#[derive(Default)]
struct Derived {
    mfa: Option<Arc<Str>>,
    pc: Option<Arc<Str>>,
    status: Option<Arc<Str>>,
}

/// One process as proc_of makes it (sizes in bytes), kept while some rank may name it.
struct Rec {
    seq: u64,
    pid: Vec<u8>,
    name: Option<Arc<Str>>,
    spawned: Arc<Derived>,
    pc: Arc<Derived>,
    state: Arc<Derived>,
    reds: Option<u128>,
    memory: u128,
    heap: u128,
    total: u128,
    queue: u128,
    bin: u128,
    used: u128,
    unused: u128,
}

impl Rec {
    fn idle(&self) -> bool {
        self.queue == 0 && self.state.status.as_ref().is_some_and(|s| s.s == "waiting")
    }
}

/// procdump.ProcSections' Group of one initial call.
struct Group {
    key: PyObject,
    count: u64,
    memory: u128,
    heap: u128,
    queue: u128,
    bin: u128,
    names: Vec<PyObject>,
    idle: u64,
    idle_heap: u128,
}

/// holders._GroupSums of one initial call.
#[derive(Default)]
struct Members {
    otp_count: u64,
    otp_memory: u128,
    largest: Option<u128>,
    otp_idle: u64,
    otp_idle_heap: u128,
    names: Vec<Arc<Str>>,
    waits: Vec<(Arc<Str>, u64)>,
    wait_ix: HashMap<String, usize>,
}

/// A rank DumpMembers keeps: its measure, how many, whether of idle processes only.
struct Top {
    measure: fn(&Rec) -> u128,
    n: usize,
    idle_only: bool,
    best: Vec<(u128, Arc<Rec>)>,
}

/// (-v, pid, seq): holders._keep's order.
fn top_order(a: &(u128, Arc<Rec>), b: &(u128, Arc<Rec>)) -> std::cmp::Ordering {
    b.0.cmp(&a.0).then_with(|| a.1.pid.cmp(&b.1.pid)).then_with(|| a.1.seq.cmp(&b.1.seq))
}

/// DumpMembers' part: what it keeps of the processes.
struct Keep {
    system_names: std::collections::HashSet<String>,
    system_modules: std::collections::HashSet<String>,
    tops: Vec<Top>,
    min_idle_heap: u128,
    big: Vec<Arc<Rec>>,
    groups: HashMap<String, usize>,
    members: Vec<(PyObject, Members)>,
}

/// A process DumpTables may keep: (memory, -seq, seq, pid, text).
type Ranked = (u128, i64, u64, Vec<u8>, Vec<u8>);
/// DumpMembers.native(): system names, system modules, [(measure, n, idle only)], MIN_IDLE_HEAP.
type KeepSpec = (Vec<String>, Vec<String>, Vec<(String, usize, bool)>, u128);

/// DumpTables' =ets part: the count, the bad ones, the words, the TOP_ETS largest tables.
#[derive(Default)]
struct Ets {
    seq: u64,
    count: u64,
    bad: u64,
    words: u128,
    /// at most TOP_ETS, the largest by (words, -seq): (words, -seq, seq, owner, text)
    top: Vec<Ranked>,
}

/// dumptables.TOP_ETS.
const TOP_ETS: usize = 50;
/// snapshot.UINT64_MAX // 8: a table's words beyond it are no node's.
const MAX_ETS_WORDS: u128 = (u64::MAX / 8) as u128;

/// dumptables._push: keep `item` among the `n` largest of `top` by its first two fields.
fn push(top: &mut Vec<Ranked>, n: usize, item: Ranked) {
    if top.len() < n {
        top.push(item);
        return;
    }
    if let Some((i, m)) = top.iter().enumerate().min_by_key(|(_, x)| (x.0, x.1)) {
        if (item.0, item.1) > (m.0, m.1) {
            top[i] = item;
        }
    }
}

/// DumpTables' part: the processes ranked by memory, and the active ones.
#[derive(Default)]
struct Tables {
    on: bool,
    seq: u64,
    count: u64,
    bad: u64,
    /// at most TOP_PROCS, the largest by (memory, -seq)
    top: Vec<Ranked>,
    active: Vec<(u64, Vec<u8>, Vec<u8>)>,
}

/// The =proc sections of one dump: ProcSections' and DumpMembers' part (`keep`, when the
/// holders are read) and DumpTables' (`tables`, when on).
#[pyclass(module = "beamalloc._refalloc")]
pub struct ProcSink {
    values: Want,
    derive: PyObject,
    name_of: PyObject,
    cache: HashMap<Vec<u8>, Arc<Derived>>,
    /// name_of of each Name value seen (registered names repeat in a dump only so far)
    names: HashMap<Vec<u8>, Option<Arc<Str>>>,
    none: Arc<Derived>,
    /// "State: " and "\nMemory: " (DumpTables._passed_over's finds)
    finders: Box<(memmem::Finder<'static>, memmem::Finder<'static>)>,
    #[pyo3(get, set)]
    ws: u64,
    keep: Option<Keep>,
    sections: u64,
    read: u64,
    skipped: Vec<(u64, String)>,
    sums: [u128; 5],
    groups: HashMap<Vec<u8>, usize>,
    group_list: Vec<Group>,
    seq: u64,
    t: Tables,
    ets: Ets,
    /// the Words line of an =ets section
    words: Want,
    /// whether every reader of the =proc sections is here (no ProcSections of Python's)
    #[pyo3(get, set)]
    whole: bool,
}

fn measure(name: &str) -> PyResult<fn(&Rec) -> u128> {
    Ok(match name {
        "binary_bytes" => |r| r.bin,
        "total_heap_bytes" => |r| r.total,
        "message_queue_len" => |r| r.queue,
        _ => return Err(pyo3::exceptions::PyValueError::new_err(format!("no measure {name}"))),
    })
}

/// The values proc_of reads of a section: each key's first line, stripped after at most
/// `limit` bytes of it (DumpTables reads 200); the first INTS as counts where they are (the
/// index of the first that is not), the others as text.
struct Vals<'a> {
    ints: [Option<u128>; INTS],
    /// which of the INTS keys have a line (a count or not)
    present: [bool; INTS],
    bad: Option<usize>,
    text: [Option<&'a [u8]>; 4],
}

fn vals<'a>(want: &Want, body: &'a [u8], limit: usize) -> Vals<'a> {
    let mut v = Vals { ints: [None; INTS], present: [false; INTS], bad: None, text: [None; 4] };
    for (i, r) in want.line_values(body).into_iter().enumerate() {
        let Some((a, b)) = r else { continue };
        let raw = &body[a..b.min(a.saturating_add(limit))];
        if i < INTS {
            v.present[i] = true;
            v.ints[i] = count(raw);
            if v.ints[i].is_none() && v.bad.is_none() {
                v.bad = Some(i);
            }
        } else {
            v.text[i - INTS] = Some(strip(raw));
        }
    }
    v
}

/// proc_of's checks, in its order: why a section is skipped, or its (young, old, frag,
/// unused) words.
fn sizes(v: &Vals<'_>) -> Result<(u128, u128, u128, u128), String> {
    if !v.present[YOUNG] {
        return Err("no 'Stack+heap' line".into());
    }
    if !v.present[OLD] {
        return Err("no 'OldHeap' line".into());
    }
    if let Some(b) = v.bad {
        return Err(format!("'{}' is not a number a node can hold", INT_NAMES[b]));
    }
    // no value is bad: each present one is a count
    let (young, old) = (v.ints[YOUNG].unwrap_or(0), v.ints[OLD].unwrap_or(0));
    let unused = v.ints[UNUSED0].unwrap_or(0) + v.ints[UNUSED1].unwrap_or(0);
    if unused > young + old {
        return Err("more heap unused than the heap's size".into());
    }
    Ok((young, old, v.ints[FRAG].unwrap_or(0), unused))
}

/// procdump.PROC_INTS, as a skipped section names them.
const INT_NAMES: [&str; INTS] = ["Stack+heap", "OldHeap", "Heap unused", "OldHeap unused",
    "Heap fragment data", "BinVHeap", "OldBinVHeap", "Memory", "Message queue length",
    "Reductions"];

impl ProcSink {
    fn derived(&mut self, py: Python<'_>, v: Option<&[u8]>) -> PyResult<Arc<Derived>> {
        let Some(v) = v else { return Ok(self.none.clone()) };
        if let Some(d) = self.cache.get(v) {
            return Ok(d.clone());
        }
        if self.cache.len() > MAX_CACHE {
            self.cache.clear();
        }
        let t = self.derive.call1(py, (latin1(py, v),))?;
        let t = t.bind(py).downcast::<PyTuple>()?.clone();
        let d = Arc::new(Derived { mfa: py_str(py, &t.get_item(0)?)?,
                                   pc: py_str(py, &t.get_item(1)?)?,
                                   status: py_str(py, &t.get_item(2)?)? });
        self.cache.insert(v.to_vec(), d.clone());
        Ok(d)
    }

    /// procdump.valid_name of a Name value (stripped, not empty), once per distinct value.
    fn name(&mut self, py: Python<'_>, n: &[u8]) -> PyResult<Option<Arc<Str>>> {
        if let Some(x) = self.names.get(n) {
            return Ok(x.clone());
        }
        if self.names.len() > MAX_CACHE {
            self.names.clear();
        }
        let x = py_str(py, self.name_of.call1(py, (latin1(py, n),))?.bind(py))?;
        self.names.insert(n.to_vec(), x.clone());
        Ok(x)
    }

    /// ProcSections.feed of a =proc section, with DumpMembers.add of its process.
    fn proc_section(&mut self, py: Python<'_>, header: &[u8], body: Option<&[u8]>, offset: u64)
                    -> PyResult<()> {
        self.sections += 1;
        let pid = strip(header.get(6..).unwrap_or(&[]));
        if !is_pid(pid, usize::MAX) {
            self.skipped.push((offset, ": not a pid after =proc:".into()));
            return Ok(());
        }
        let body = body.unwrap_or(&[]);
        let v = vals(&self.values, body, usize::MAX);
        let (young, old, frag, unused) = match sizes(&v) {
            Ok(s) => s,
            Err(why) => {
                self.skipped.push((offset, format!(" ({}): {why}", pid_text(pid))));
                return Ok(());
            }
        };
        let spawned = self.derived(py, v.text[SPAWNED - INTS])?;
        let pc = self.derived(py, v.text[PCX - INTS])?;
        let state = self.derived(py, v.text[STATE - INTS])?;
        let name = match v.text[NAME - INTS] {
            Some(n) if !n.is_empty() => self.name(py, n)?,
            _ => None,
        };
        let ws = u128::from(self.ws);
        let total = (young + old + frag) * ws;
        self.seq += 1;
        let rec = Rec {
            seq: self.seq, pid: pid.to_vec(), name, spawned, pc, state, reds: v.ints[REDS],
            memory: v.ints[MEMORY].unwrap_or(total), heap: young * ws, total,
            queue: v.ints[QUEUE].unwrap_or(0),
            bin: (v.ints[BIN0].unwrap_or(0) + v.ints[BIN1].unwrap_or(0)) * ws,
            used: (young + old - unused) * ws, unused: unused * ws,
        };
        self.add(py, Arc::new(rec));
        Ok(())
    }

    /// ProcSections._add, then DumpMembers.add.
    fn add(&mut self, py: Python<'_>, p: Arc<Rec>) {
        self.read += 1;
        let idle = p.idle();
        let key: &[u8] = p.spawned.mfa.as_ref().map_or(b"?", |s| s.s.as_bytes());
        let gi = match self.groups.get(key) {
            Some(&i) => i,
            None => {
                let k = match &p.spawned.mfa {
                    Some(s) => s.py.clone_ref(py),
                    None => "?".into_py(py),
                };
                self.group_list.push(Group { key: k, count: 0, memory: 0, heap: 0, queue: 0,
                                             bin: 0, names: Vec::new(), idle: 0, idle_heap: 0 });
                self.groups.insert(key.to_vec(), self.group_list.len() - 1);
                self.group_list.len() - 1
            }
        };
        let g = &mut self.group_list[gi];
        g.count += 1;
        g.memory += p.memory;
        g.heap += p.total;
        g.queue += p.queue;
        g.bin += p.bin;
        if let Some(n) = &p.name {
            if g.names.len() < 3 {
                g.names.push(n.py.clone_ref(py));
            }
        }
        self.sums[0] += p.memory;
        self.sums[1] += p.total;
        self.sums[2] += p.queue;
        if idle {
            g.idle += 1;
            g.idle_heap += p.total;
            self.sums[3] += 1;
            self.sums[4] += p.total;
        }
        if let Some(k) = &mut self.keep {
            k.add(py, p, idle);
        }
    }

    /// DumpTables._finish of a =proc section (its pid stripped), as far as what it keeps
    /// depends on: the count, the bad ones, which rank (the rows are Python's, of the few kept).
    fn table_section(&mut self, arg: &[u8], text: &[u8], cut: bool) {
        let t = &mut self.t;
        t.seq += 1;
        t.count += 1;
        if cut || !is_pid(arg, 10) {
            t.bad += 1;
            return;
        }
        let seq = t.seq;
        let neg = -(seq as i64);
        let min = t.top.iter().map(|x| (x.0, x.1)).min();
        if t.top.len() >= TOP_PROCS
            && passed_over(&self.finders, text, neg, min.unwrap_or((0, 0)))
        {
            return;
        }
        let v = vals(&self.values, text, TABLE_VALUE);
        let Ok((young, old, frag, _)) = sizes(&v) else {
            t.bad += 1;
            return;
        };
        let memory = v.ints[MEMORY].unwrap_or(young + old + frag);
        if v.text[STATE - INTS].is_some_and(active) && t.active.len() < MAX_ACTIVE {
            t.active.push((seq, arg.to_vec(), text.to_vec()));
        }
        push(&mut t.top, TOP_PROCS, (memory, neg, seq, arg.to_vec(), text.to_vec()));
    }

    /// DumpTables._finish of an =ets section (its owner, stripped): counted, its words summed
    /// where they are a count, ranked (Python makes the rows of the TOP_ETS kept).
    fn ets_section(&mut self, arg: &[u8], text: &[u8], cut: bool) {
        let e = &mut self.ets;
        e.seq += 1;
        e.count += 1;
        // _ETS_KEYS: the first Words line's first 200 characters, stripped
        let w = self.words.line_values(text)[0]
            .and_then(|(a, b)| count_max(&text[a..b.min(a + TABLE_VALUE)], MAX_ETS_WORDS));
        let Some(w) = w.filter(|_| !cut) else {
            e.bad += 1;
            return;
        };
        e.words += w;
        push(&mut e.top, TOP_ETS, (w, -(e.seq as i64), e.seq, arg.to_vec(), text.to_vec()));
    }
}

/// dumptables.ACTIVE_STATES of a stripped State value (lower-cased: only ASCII letters lower
/// to ASCII ones).
fn active(state: &[u8]) -> bool {
    state.eq_ignore_ascii_case(b"running") || state.eq_ignore_ascii_case(b"garbing")
}

/// DumpTables._passed_over: ranked below the kept by its Memory line, and neither running nor
/// collecting, by two finds (not a line's start: "State: " anywhere).
fn passed_over(finders: &(memmem::Finder<'_>, memmem::Finder<'_>), text: &[u8], neg: i64,
               min: (u128, i64)) -> bool {
    let (Some(i), Some(k)) = (finders.0.find(text), finders.1.find(text)) else { return false };
    let line = |a: usize| {
        let a = a.min(text.len());
        let e = memchr::memchr(b'\n', &text[a..]).map_or(text.len(), |j| a + j);
        strip(&text[a..e])
    };
    if active(line(i + 7)) {
        return false;
    }
    let mem = line(k + 9);
    if mem.is_empty() || mem.len() > 20 || !mem.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let m = mem.iter().fold(0u128, |x, &d| x * 10 + u128::from(d - b'0'));
    (m, neg) <= min
}

/// `<A.B.C>` of decimal numbers, each of at most `most` digits (procdump's and dumptables'
/// _PID: `\d` of a latin-1 text is [0-9]).
fn is_pid(s: &[u8], most: usize) -> bool {
    let Some(inner) = s.strip_prefix(b"<").and_then(|s| s.strip_suffix(b">")) else {
        return false;
    };
    let parts: Vec<&[u8]> = inner.split(|&c| c == b'.').collect();
    parts.len() == 3
        && parts.iter().all(|p| !p.is_empty() && p.len() <= most && p.iter().all(u8::is_ascii_digit))
}

fn pid_text(pid: &[u8]) -> String {
    pid.iter().map(|&b| b as char).collect()
}

impl Keep {
    fn is_system(&self, p: &Rec) -> bool {
        if p.name.as_ref().is_some_and(|n| self.system_names.contains(&n.s)) {
            return true;
        }
        let ic = p.spawned.mfa.as_ref().map_or("", |s| s.s.as_str());
        let m = ic.split(':').next().unwrap_or("");
        self.system_modules.contains(m) || m.starts_with("erts_")
    }

    /// holders.DumpMembers.add (`idle`: the process's own idle, Proc.idle).
    fn add(&mut self, py: Python<'_>, p: Arc<Rec>, p_idle: bool) {
        let system = self.is_system(&p);
        let idle = p_idle && !system;
        for t in &mut self.tops {
            if idle || !t.idle_only {
                let v = (t.measure)(&p);
                if v != 0 {
                    t.best.push((v, p.clone()));
                    if t.best.len() >= 4 * t.n {
                        t.best.sort_by(top_order);
                        t.best.truncate(t.n);
                    }
                }
            }
        }
        if idle && p.total >= self.min_idle_heap {
            self.big.push(p.clone());
        }
        let Some(ic) = &p.spawned.mfa else { return };
        let gi = match self.groups.get(&ic.s) {
            Some(&i) => i,
            None => {
                self.members.push((ic.py.clone_ref(py), Members::default()));
                self.groups.insert(ic.s.clone(), self.members.len() - 1);
                self.members.len() - 1
            }
        };
        let g = &mut self.members[gi].1;
        if system {
            g.otp_count += 1;
            g.otp_memory += p.memory;
            if p_idle {
                g.otp_idle += 1;
                g.otp_idle_heap += p.total;
            }
            return;
        }
        g.largest = Some(g.largest.map_or(p.memory, |l| l.max(p.memory)));
        if let Some(n) = &p.name {
            let last = g.names.last().map(|x| x.s.as_str());
            if !g.names.iter().any(|x| x.s == n.s)
                && (g.names.len() < 3 || last.is_some_and(|l| n.s.as_str() < l))
            {
                // bisect.insort: after the equal ones (none: the names are distinct)
                let at = g.names.partition_point(|x| x.s <= n.s);
                g.names.insert(at, n.clone());
                g.names.truncate(3);
            }
        }
        if p_idle {
            if let Some(f) = &p.pc.pc {
                if !f.s.is_empty() {
                    match g.wait_ix.get(&f.s) {
                        Some(&i) => g.waits[i].1 += 1,
                        None => {
                            g.wait_ix.insert(f.s.clone(), g.waits.len());
                            g.waits.push((f.clone(), 1));
                        }
                    }
                }
            }
        }
    }
}

#[pymethods]
impl ProcSink {
    /// `keys`: procdump.KEYS; `derive`: procdump._derived; `name_of`: the name proc_of keeps
    /// of a Name value, or None; `keep`: None (DumpTables' part only) or DumpMembers.native()'s
    /// (system names, system modules, [(measure, n, idle only)], MIN_IDLE_HEAP).
    #[new]
    #[pyo3(signature = (keys, derive, name_of, keep=None))]
    fn new(keys: Vec<String>, derive: PyObject, name_of: PyObject,
           keep: Option<KeepSpec>)
           -> PyResult<ProcSink> {
        if keys.len() != PCX + 1 {
            return Err(pyo3::exceptions::PyValueError::new_err("procdump.KEYS changed"));
        }
        let keep = match keep {
            None => None,
            Some((names, modules, tops, min_idle_heap)) => Some(Keep {
                system_names: names.into_iter().collect(),
                system_modules: modules.into_iter().collect(),
                tops: tops.into_iter().map(|(m, n, idle_only)| {
                    Ok(Top { measure: measure(&m)?, n: n.max(1), idle_only, best: Vec::new() })
                }).collect::<PyResult<_>>()?,
                min_idle_heap, big: Vec::new(), groups: HashMap::new(), members: Vec::new(),
            }),
        };
        Ok(ProcSink {
            values: Want::new(keys.into_iter().map(|k| ((k + ": ").into_bytes(), false)).collect()),
            derive, name_of, cache: HashMap::new(), names: HashMap::new(),
            finders: Box::new((memmem::Finder::new(b"State: "), memmem::Finder::new(b"\nMemory: "))),
            none: Arc::new(Derived::default()), ws: 8,
            keep, sections: 0, read: 0, skipped: Vec::new(), sums: [0; 5],
            groups: HashMap::new(), group_list: Vec::new(), seq: 0, t: Tables::default(),
            ets: Ets::default(), words: Want::new(vec![(b"Words: ".to_vec(), false)]),
            whole: false,
        })
    }

    /// Whether DumpTables' part reads the sections (off past =end: crashdump reads none).
    #[getter]
    fn get_tables(&self) -> bool {
        self.t.on
    }

    #[setter]
    fn set_tables(&mut self, on: bool) {
        self.t.on = on;
    }

    /// Whether ProcSections' part reads the sections (DumpMembers keeps them).
    #[getter]
    fn procs(&self) -> bool {
        self.keep.is_some()
    }

    /// ProcSections.feed of a =proc section (header line, text, where it starts).
    #[pyo3(signature = (header, body, offset))]
    fn feed_proc(&mut self, py: Python<'_>, header: &[u8], body: Option<&[u8]>, offset: u64)
                 -> PyResult<()> {
        self.proc_section(py, header, body, offset)
    }

    /// DumpTables._finish of a =proc section (its pid, stripped; its text; cut or not).
    fn feed_table(&mut self, arg: &[u8], text: &[u8], cut: bool) {
        self.table_section(arg, text, cut);
    }

    /// DumpTables._finish of an =ets section (its owner, stripped; its text; cut or not).
    fn feed_ets(&mut self, arg: &[u8], text: &[u8], cut: bool) {
        self.ets_section(arg, text, cut);
    }

    /// DumpTables' =ets part: (sections, bad ones, words, [(seq, owner, text)] of the largest,
    /// in the dump's order: DumpTables makes their rows).
    fn ets_result(&self, py: Python<'_>) -> (u64, u64, u128, Vec<(u64, PyObject, PyObject)>) {
        let mut kept: Vec<&Ranked> = self.ets.top.iter().collect();
        kept.sort_by_key(|x| x.2);
        let rows = kept.into_iter().map(|x| (x.2, latin1(py, &x.3), latin1(py, &x.4))).collect();
        (self.ets.count, self.ets.bad, self.ets.words, rows)
    }

    /// DumpTables' part: (sections, bad ones, [(seq, pid, text)] of those it keeps: the
    /// largest and the active ones, in the dump's order: DumpTables makes their rows).
    fn table_result(&self, py: Python<'_>) -> (u64, u64, Vec<(u64, PyObject, PyObject)>) {
        let mut kept: Vec<(u64, &[u8], &[u8])> = self.t.top.iter()
            .map(|x| (x.2, x.3.as_slice(), x.4.as_slice()))
            .chain(self.t.active.iter().map(|x| (x.0, x.1.as_slice(), x.2.as_slice())))
            .collect();
        kept.sort_by_key(|x| x.0);
        kept.dedup_by_key(|x| x.0);
        let rows = kept.into_iter().map(|(s, a, t)| (s, latin1(py, a), latin1(py, t))).collect();
        (self.t.count, self.t.bad, rows)
    }

    /// ProcSections' and DumpMembers' part: (sections, read, [(offset, why)] skipped, the five
    /// sums, [(initial call, count, memory, heap, queues, binaries, names, idle, idle heap)],
    /// [(initial call, otp count, otp memory, largest, otp idle, otp idle heap, names,
    /// [(function, idle ones waiting there)])], [((pid, name, initial call, spawned as, current function, status), (reductions, memory, heap,
    /// total heap, queue, binaries, heap used, heap unused))] of the processes kept, in the
    /// dump's order).
    #[allow(clippy::type_complexity)]
    fn proc_result(&self, py: Python<'_>) -> PyResult<PyObject> {
        let groups: Vec<PyObject> = self.group_list.iter().map(|g| {
            (g.key.clone_ref(py), g.count, g.memory, g.heap, g.queue, g.bin,
             g.names.iter().map(|n| n.clone_ref(py)).collect::<Vec<_>>(), g.idle, g.idle_heap)
                .into_py(py)
        }).collect();
        let mut members: Vec<PyObject> = Vec::new();
        let mut kept: Vec<PyObject> = Vec::new();
        if let Some(k) = &self.keep {
            for (key, m) in &k.members {
                let names: Vec<PyObject> = m.names.iter().map(|n| n.py.clone_ref(py)).collect();
                let waits: Vec<(PyObject, u64)> =
                    m.waits.iter().map(|(f, n)| (f.py.clone_ref(py), *n)).collect();
                members.push((key.clone_ref(py), m.otp_count, m.otp_memory, m.largest,
                              m.otp_idle, m.otp_idle_heap, names, waits).into_py(py));
            }
            let mut recs: Vec<&Arc<Rec>> = k.big.iter().collect();
            for t in &k.tops {
                let mut best: Vec<&(u128, Arc<Rec>)> = t.best.iter().collect();
                best.sort_by(|a, b| top_order(a, b));
                recs.extend(best.into_iter().take(t.n).map(|x| &x.1));
            }
            recs.sort_by_key(|r| r.seq);
            recs.dedup_by_key(|r| r.seq);
            let s = |o: &Option<Arc<Str>>| o.as_ref().map(|x| x.py.clone_ref(py));
            for r in recs {
                let ic = s(&r.spawned.mfa);
                kept.push(((latin1(py, &r.pid), s(&r.name), ic.as_ref().map(|x| x.clone_ref(py)),
                            ic, s(&r.pc.pc), s(&r.state.status)),
                           (r.reds, r.memory, r.heap, r.total, r.queue, r.bin, r.used, r.unused))
                          .into_py(py));
            }
        }
        let skipped: Vec<(u64, &str)> = self.skipped.iter().map(|(o, w)| (*o, w.as_str())).collect();
        Ok((self.sections, self.read, skipped, self.sums.to_vec(), groups, members, kept)
            .into_py(py))
    }
}

impl ProcSink {
    /// Whether the scan hands it a complete section with this header instead of yielding it:
    /// an =ets section while DumpTables reads here, a =proc one where every reader of it does.
    pub fn takes(&self, header: &[u8]) -> bool {
        if header.starts_with(b"=ets:") {
            return self.t.on;
        }
        header.starts_with(b"=proc:") && self.whole && (self.t.on || self.keep.is_some())
    }

    /// A complete section the scan found that `takes` took (python_dumpscan.rs).
    pub fn section(&mut self, py: Python<'_>, header: &[u8], body: Option<&[u8]>, offset: u64)
                   -> PyResult<()> {
        if header.starts_with(b"=ets:") {
            let arg = strip(header.get(5..).unwrap_or(&[]));
            self.ets_section(arg, body.unwrap_or(&[]), false);
            return Ok(());
        }
        if self.keep.is_some() {
            self.proc_section(py, header, body, offset)?;
        }
        if self.t.on {
            let arg = strip(header.get(6..).unwrap_or(&[]));
            self.table_section(arg, body.unwrap_or(&[]), false);
        }
        Ok(())
    }
}
