//! The pyo3 surface of `history.rs`: `history_trace(path, header_json, params) -> events`
//! writes one history; `history_replays(histories, configs, schedulers)` replays several,
//! under one or more flag sets, without writing them, forked where they part.
use crate::history::{replay_under, write, Params};
use crate::python::{new_replay, result};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::Mutex;

fn get(d: &Bound<'_, PyDict>, key: &str) -> PyResult<u64> {
    d.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("history: missing key {key:?}")))?
        .extract()
}

/// An optional key of `d`, `default` where it is absent.
fn opt(d: &Bound<'_, PyDict>, key: &str, default: u64) -> PyResult<u64> {
    d.get_item(key)?.map_or(Ok(default), |v| v.extract())
}

/// The history `params` describe (module doc of `history_trace`).
fn params(params: &Bound<'_, PyDict>) -> PyResult<Params> {
    Ok(Params {
        live: get(params, "live")?,
        peak: get(params, "peak")?,
        before: get(params, "before")?,
        after: get(params, "after")?,
        passes: get(params, "passes")? != 0,
        stragglers: get(params, "stragglers")?,
        rebuild: opt(params, "rebuild", 0)? != 0,
        phase: opt(params, "phase", 500)?,
        lo: get(params, "lo")?,
        hi: get(params, "hi")?,
        allocator: get(params, "allocator")?,
        type_: get(params, "type")?,
        instances: get(params, "instances")?,
        seed: get(params, "seed")?,
    })
}

/// Write a history trace (`params`: live, peak, before, after, passes, stragglers, lo, hi,
/// allocator, type, instances, seed; optional: rebuild, phase); returns its event count.
#[pyfunction]
pub fn history_trace(
    py: Python<'_>,
    path: &str,
    header_json: &str,
    params: &Bound<'_, PyDict>,
) -> PyResult<u64> {
    let p = self::params(params)?;
    py.allow_threads(|| write(path, header_json, p))
        .map_err(|e| PyValueError::new_err(format!("{path}: {e}")))
}

/// Replay histories without writing them: `histories` is a list of (the index of its config in
/// `configs`, each a `beamalloc.flags.replay_config`; params as for `history_trace`;
/// checkpoints: ascending event counts); the result, per history, the `replay(...,
/// checkpoints=...)` result of its trace under its config at each checkpoint, equal to it
/// (history.rs `replay_under`). The GIL is released while the models run, on up to `workers`
/// threads (0: one per core), and taken for each result.
#[pyfunction]
#[pyo3(signature = (histories, configs, schedulers, sample_every_ns = 1_000_000_000, workers = 0))]
pub fn history_replays(
    py: Python<'_>,
    histories: Vec<(usize, Bound<'_, PyDict>, Vec<u64>)>,
    configs: Vec<Bound<'_, PyDict>>,
    schedulers: usize,
    sample_every_ns: u64,
    workers: usize,
) -> PyResult<PyObject> {
    let mut models = Vec::with_capacity(configs.len());
    let mut names = Vec::with_capacity(configs.len());
    for config in &configs {
        let (model, n) = new_replay(config, schedulers, sample_every_ns)?;
        models.push(model);
        names.push(n);
    }
    let jobs: Vec<(usize, Params, Vec<u64>)> = histories
        .iter()
        .map(|(m, p, cps)| Ok((*m, params(p)?, cps.clone())))
        .collect::<PyResult<_>>()?;
    let workers = if workers == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        workers
    };
    let out: Mutex<Vec<Vec<PyResult<PyObject>>>> =
        Mutex::new((0..jobs.len()).map(|_| Vec::new()).collect());
    let (jobs_ref, out_ref, names_ref) = (&jobs, &out, &names);
    py.allow_threads(move || {
        replay_under(models, jobs_ref, workers, |i, rp| {
            let names = names_ref.get(jobs_ref[i].0).map_or(&[][..], Vec::as_slice);
            let r = Python::with_gil(|py| result(py, rp, names));
            out_ref.lock().unwrap()[i].push(r);
        })
    })
    .map_err(|e| PyValueError::new_err(e.0))?;
    let list = PyList::empty_bound(py);
    for runs in out.into_inner().unwrap() {
        let inner = PyList::empty_bound(py);
        for r in runs {
            inner.append(r?)?;
        }
        list.append(inner)?;
    }
    Ok(list.into_py(py))
}
