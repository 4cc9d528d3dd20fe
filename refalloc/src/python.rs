//! The pyo3 surface: `replay(trace_path, config, schedulers, sample_every_ns, csv=None) -> dict`.
//! `config` is `beamalloc.flags.replay_config(...)`; the result mirrors
//! `erlang:system_info({allocator, A})` per allocator and instance (docs/erts/alloc_util.md §6.1), plus a footprint
//! series and the anomalies seen.
// pyo3 0.22's `#[pyfunction]` expansion converts PyErr into PyErr; newer clippy flags it.
#![allow(clippy::useless_conversion)]

use crate::config::{Globals, InstanceConfig, Strategy};
use crate::csv::{replay_rows, Declined, Types};
use crate::heap::Heap;
use crate::replay::Replay;
use crate::stats::{Cm, Section};
use crate::trace::TraceReader;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom};

/// Where a CSV trace's rows start and the header's type table (`beamalloc.trace.native_csv_rows`).
pub type CsvRows = (u64, u64, HashMap<String, u64>, u64);

fn get<'py, T: FromPyObject<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    d.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("config: missing key {key:?}")))?
        .extract()
}

fn instance_config(d: &Bound<'_, PyDict>) -> PyResult<InstanceConfig> {
    let name: String = get(d, "strategy")?;
    let strategy = Strategy::parse(&name)
        .ok_or_else(|| PyValueError::new_err(format!("config: unknown strategy {name:?}")))?;
    let cp: Option<String> = get(d, "cp")?;
    let letter: String = get(d, "letter")?;
    Ok(InstanceConfig {
        alloc_no: get(d, "number")?,
        instance: get(d, "instance")?,
        strategy,
        atags: get(d, "atags")?,
        ramv: get(d, "ramv")?,
        sbct: get(d, "sbct")?,
        asbcst: get(d, "asbcst")?,
        rsbcst: get(d, "rsbcst")?,
        rsbcmt: get(d, "rsbcmt")?,
        rmbcmt: get(d, "rmbcmt")?,
        mmbcs: get(d, "mmbcs")?,
        mmmbc: get(d, "mmmbc")?,
        mmsbc: get(d, "mmsbc")?,
        lmbcs: get(d, "lmbcs")?,
        smbcs: get(d, "smbcs")?,
        mbcgs: get(d, "mbcgs")?,
        acul: get(d, "acul")?,
        acnl: get(d, "acnl")?,
        acfml: get(d, "acfml")?,
        cp: cp.and_then(|s| s.chars().next()),
        mbsd: get(d, "mbsd")?,
        main_carrier: get(d, "main_carrier")?,
        literal: letter == "I",
    })
}

fn cm(py: Python<'_>, c: Cm) -> PyObject {
    (c.cur, c.max, c.max).into_py(py)
}

fn section(py: Python<'_>, s: &Section, name: &str) -> PyResult<PyObject> {
    let d = PyDict::new_bound(py);
    let blocks = PyDict::new_bound(py);
    if s.blocks.max > 0 {
        let b = PyDict::new_bound(py);
        b.set_item("count", cm(py, s.blocks))?;
        b.set_item("size", cm(py, s.blocks_size))?;
        blocks.set_item(name, b)?;
    }
    d.set_item("blocks", blocks)?;
    d.set_item("carriers", cm(py, s.carriers))?;
    d.set_item("mseg_alloc_carriers", s.mseg_carriers)?;
    d.set_item("sys_alloc_carriers", s.sys_carriers)?;
    d.set_item("carriers_size", cm(py, s.carriers_size))?;
    d.set_item("mseg_alloc_carriers_size", s.mseg_carriers_size)?;
    d.set_item("sys_alloc_carriers_size", s.sys_carriers_size)?;
    Ok(d.into_py(py))
}

fn heap_info(py: Python<'_>, h: &Heap, name: &str) -> PyResult<PyObject> {
    let out = PyList::empty_bound(py);
    let prefix = name.trim_end_matches("_alloc");
    for inst in &h.instances {
        let d = PyDict::new_bound(py);
        let st = &inst.stats;
        d.set_item("instance", inst.cfg.instance)?;
        d.set_item("mbcs", section(py, &st.mbcs, name)?)?;
        d.set_item("sbcs", section(py, &st.sbcs, name)?)?;
        if inst.cfg.pool_enabled() {
            let p = PyDict::new_bound(py);
            let blocks = PyDict::new_bound(py);
            if st.pool.blocks > 0 {
                let b = PyDict::new_bound(py);
                b.set_item("count", st.pool.blocks)?;
                b.set_item("size", st.pool.blocks_size)?;
                blocks.set_item(name, b)?;
            }
            p.set_item("blocks", blocks)?;
            p.set_item("carriers", st.pool.carriers)?;
            p.set_item("carriers_size", st.pool.carriers_size)?;
            p.set_item("fetch", st.pool.fetch)?;
            p.set_item("fail", st.pool.fail)?;
            p.set_item("skip_size", st.pool.skip_size)?;
            p.set_item("abandoned", st.pool.abandoned)?;
            d.set_item("mbcs_pool", p)?;
        }
        let c = PyDict::new_bound(py);
        let k = &st.calls;
        c.set_item(format!("{prefix}_alloc"), k.alloc)?;
        c.set_item(format!("{prefix}_free"), k.free)?;
        c.set_item(format!("{prefix}_realloc"), k.realloc)?;
        c.set_item("mseg_alloc", k.mseg_alloc)?;
        c.set_item("mseg_dealloc", k.mseg_dealloc)?;
        c.set_item("mseg_realloc", k.mseg_realloc)?;
        c.set_item("sys_alloc", k.sys_alloc)?;
        c.set_item("sys_free", k.sys_free)?;
        c.set_item("sys_realloc", k.sys_realloc)?;
        d.set_item("calls", c)?;
        out.append(d)?;
    }
    Ok(out.into_py(py))
}

/// A model under `config` (`beamalloc.flags.replay_config`), empty, and the allocator names
/// by number that `result` reports under.
pub(crate) fn new_replay(
    config: &Bound<'_, PyDict>,
    schedulers: usize,
    sample_every_ns: u64,
) -> PyResult<(Replay, Vec<String>)> {
    let g: Bound<'_, PyDict> = get(config, "globals")?;
    let globals = Globals {
        mcs: get(&g, "mcs")?,
        amcbf: get(&g, "amcbf")?,
        rmcbf: get(&g, "rmcbf")?,
        ycs: get(&g, "ycs")?,
        mmc: get(&g, "mmc")?,
        sac: get(&g, "sac")?,
        scs: get(&g, "scs")?,
    };
    let allocs: Bound<'_, PyDict> = get(config, "allocators")?;
    let mut names = vec![String::new(); crate::replay::MAX_ALLOC_NO + 1];
    let mut cfgs = Vec::new();
    for (name, list) in allocs.iter() {
        let name: String = name.extract()?;
        let mut v = Vec::new();
        for item in list.downcast::<PyList>()?.iter() {
            v.push(instance_config(item.downcast::<PyDict>()?)?);
        }
        if let Some(f) = v.first() {
            if (f.alloc_no as usize) < names.len() {
                names[f.alloc_no as usize] = name;
            }
        }
        cfgs.push(v);
    }
    Ok((
        Replay::new(globals, schedulers + 1, cfgs, sample_every_ns),
        names,
    ))
}

/// Replay a binary trace under `config` (from `beamalloc.flags.replay_config`).
///
/// `csv`: (offset, line, types, next_type) of a CSV trace's rows (`native_csv_rows`): replayed
/// straight from the CSV by the fast path; a row it declines returns `{"declined": line}`
/// and the caller converts the file with the reader (python_trace.rs) and replays that.
///
/// `checkpoints` (a binary trace's event counts, ascending): the result is `{"checkpoints":
/// [...]}`, one result of the usual shape per count, the model as it stood after that many
/// events (`Replay::run_reader_at`, which stops at the last); a count past the trace's end is
/// a ValueError.
#[pyfunction]
#[pyo3(signature = (trace_path, config, schedulers, sample_every_ns = 1_000_000_000, csv = None,
                    checkpoints = None))]
pub fn replay(
    py: Python<'_>,
    trace_path: &str,
    config: &Bound<'_, PyDict>,
    schedulers: usize,
    sample_every_ns: u64,
    csv: Option<CsvRows>,
    checkpoints: Option<Vec<u64>>,
) -> PyResult<PyObject> {
    let (mut rp, names) = new_replay(config, schedulers, sample_every_ns)?;
    if csv.is_some() && checkpoints.is_some() {
        return Err(PyValueError::new_err(
            "checkpoints take a binary trace, not CSV rows",
        ));
    }
    if let Some((offset, line, types, next_type)) = csv {
        let mut t = Types::new(types, next_type);
        let mut f = File::open(trace_path)?;
        f.seek(SeekFrom::Start(offset))?;
        let read = py
            .allow_threads(|| replay_rows(&mut rp, f, line, &mut t, trace_path))
            .map_err(|e| PyValueError::new_err(e.0))?;
        if let Err(Declined(line)) = read {
            let out = PyDict::new_bound(py);
            out.set_item("declined", line)?;
            return Ok(out.into_py(py));
        }
    } else {
        let mut reader = TraceReader::open(trace_path).map_err(|e| PyValueError::new_err(e.0))?;
        let cps = checkpoints.unwrap_or_default();
        if cps.windows(2).any(|w| w[0] > w[1]) {
            return Err(PyValueError::new_err(
                "checkpoints must be in ascending order",
            ));
        }
        // Each checkpoint's result is built under the GIL, taken back for it alone.
        let mut at: Vec<PyResult<PyObject>> = Vec::with_capacity(cps.len());
        py.allow_threads(|| {
            rp.run_reader_at(&mut reader, &cps, |rp| {
                at.push(Python::with_gil(|py| result(py, rp, &names)))
            })
        })
        .map_err(|e| PyValueError::new_err(e.0))?;
        if at.len() < cps.len() {
            return Err(PyValueError::new_err(format!(
                "{trace_path}: checkpoint {} past the trace's {} events",
                cps[at.len()],
                rp.events
            )));
        }
        if !cps.is_empty() {
            // the replay stopped at the last checkpoint: no end state to return
            let out = PyDict::new_bound(py);
            let list = PyList::empty_bound(py);
            for r in at {
                list.append(r?)?;
            }
            out.set_item("checkpoints", list)?;
            return Ok(out.into_py(py));
        }
    }
    result(py, &rp, &names)
}

/// The model's state as `replay` returns it.
pub(crate) fn result(py: Python<'_>, rp: &Replay, names: &[String]) -> PyResult<PyObject> {
    let out = PyDict::new_bound(py);
    let allocators = PyDict::new_bound(py);
    for (n, h) in rp.heaps.iter().enumerate() {
        if let Some(h) = h {
            allocators.set_item(&names[n], heap_info(py, h, &names[n])?)?;
        }
    }
    out.set_item("allocators", allocators)?;
    out.set_item(
        "carriers",
        crate::python_carriers::carrier_map(py, &rp.heaps, names)?,
    )?;
    let mseg = PyList::empty_bound(py);
    for (i, m) in rp.env.msegs.iter().enumerate() {
        let d = PyDict::new_bound(py);
        let s = &m.stats;
        d.set_item("instance", i)?;
        d.set_item("cached_segments", m.cached_segments())?;
        d.set_item("cached_size", m.cached_size())?;
        d.set_item("cache_hits", s.cache_hits)?;
        d.set_item("segments", (s.segments, s.segments_max, s.segments_max))?;
        d.set_item(
            "segments_size",
            (s.segments_size, s.segments_size_max, s.segments_size_max),
        )?;
        d.set_item("mseg_alloc", s.calls_alloc)?;
        d.set_item("mseg_dealloc", s.calls_dealloc)?;
        d.set_item("mseg_realloc", s.calls_realloc)?;
        d.set_item("mseg_create", s.create)?;
        d.set_item("mseg_destroy", s.destroy)?;
        d.set_item("mseg_check_cache", s.check_cache)?;
        mseg.append(d)?;
    }
    out.set_item("mseg_alloc", mseg)?;
    let series: Vec<(u64, u64, u64, u64)> = rp
        .series
        .iter()
        .map(|s| (s.t_ns, s.carriers_size, s.blocks_size, s.mseg_cached))
        .collect();
    out.set_item("footprint", series)?;
    out.set_item(
        "footprint_columns",
        ("t_ns", "carriers_size", "blocks_size", "mseg_cached"),
    )?;
    let a = &rp.anomalies;
    let an = PyDict::new_bound(py);
    an.set_item("unknown_free", a.unknown_free)?;
    an.set_item("unknown_realloc", a.unknown_realloc)?;
    an.set_item("reused_id", a.reused_id)?;
    an.set_item("no_allocator", a.no_allocator)?;
    out.set_item("anomalies", an)?;
    out.set_item("events", rp.events)?;
    out.set_item("live_blocks", rp.live_blocks())?;
    Ok(out.into_py(py))
}
