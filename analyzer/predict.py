"""What the replay predicts for the recommender's flags (docs/design.md "What it does" 4; issue 3,
must-hold 6).

For a finding, a trace that shows the finding's symptom is synthesized from the snapshot
(refalloc/tracegen.py), replayed through refalloc under the flags the node runs with (read from the
snapshot's options, :func:`node_flags`) and under those flags followed by the proposal, and the
affected allocator's carrier bytes, unused bytes and carrier (mseg/sys_alloc) calls are compared.

Trace models (:func:`choose_model`):

* ``large_binaries`` for R7 on binary_alloc (blocks above sbct), fitted to the sbc blocks;
* ``ets_churn`` for ets_alloc, fitted to its peak and current rows;
* ``spike_and_drop`` for binary_alloc and eheap_alloc (binaries, process heaps) after a peak
  (max blocks >= 2 x current), fitted to the average block size, the live set (current
  blocks), the peak (max blocks) and the churn since the peak (alloc calls beyond the peak's
  blocks); the drop frees at random, so survivors are
  spread over every carrier: the worst case for any placement, and what the snapshot cannot rule
  out (it has no per-carrier data);
* ``stationary_mix`` otherwise: every allocator's current live set, then churn.

Traces are bounded (``max_events``, scaled down keeping block sizes and the live/peak ratio) and
seeded, so a prediction is the same on every run. Any failure gives no prediction and a reason;
the recommender never fails because of the replay.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from beamalloc.analyzer import metrics as m
from beamalloc.analyzer.analysis import instance_sums
from beamalloc.analyzer.findings import Facts
from beamalloc.analyzer.options import first_scheduler_options
from beamalloc.analyzer.records import MIN_GAIN
from beamalloc.flags import (
    ALLOCATOR_LETTERS,
    NO_MIGRATION,
    Flag,
    FlagSet,
    GlobalConfig,
    effective_config,
)
from beamalloc.snapshot import Snapshot
from beamalloc.trace import (
    ALLOCATOR_NUMBERS,
    Event,
    open_trace,
)
from beamalloc.units import human
from beamalloc.versions import modelled_otp

#: Events per synthesized trace: a few hundred thousand keep `beamalloc recommend` within
#: seconds (Python writes the trace at ~200 k events/s; refalloc replays at ~3 M events/s).
MAX_EVENTS = 200_000
SEED = 7
#: Orders of the blocks inside each carrier drawn for a carrier-seeded prediction: the
#: carrier data gives how many blocks a carrier holds and its free blocks' sizes, not their
#: order, so the prediction is the median of these draws and their spread its band.
CARRIER_VARIANTS = 3
#: Events of one allocator taken from a trace (`recommend --trace`): a minute of a busy node's
#: binary_alloc, replayed within seconds.
MAX_TRACED = 1_000_000
#: Blocks a carrier-seeded trace rebuilds before it coarsens them (tracegen.from_carriers):
#: fitted, within `recommend`'s few seconds; traced, finer, since coarse fillers shift where
#: the traced blocks land (the spikes workload: -73 % at 100,000 blocks, -65 % uncoarsened,
#: measured -65 %), and a traced prediction is a slower, deliberate run anyway.
CARRIER_BLOCKS = {"fitted": 30_000, "traced": 250_000}
#: A placement flag set that removes less than this share of the allocator's unused bytes in
#: the replay is not worth a restart: the one gain floor (analyzer/records.py MIN_GAIN).
MIN_UNUSED_SAVING = MIN_GAIN
#: The replay under the node's own flags must leave at least this share of the snapshot's unused
#: bytes (scaled) for the prediction to judge the advice: else the trace missed the symptom.
MIN_FIDELITY = 0.5
#: Rules whose flags aim at carrier bytes; the others trade memory for speed (R6, R7) or act on
#: RSS (R10), which the demotion must not judge by carrier bytes.
PLACEMENT_RULES = ("R3", "R4", "R5", "R9", "R13")
#: What the replay cannot show for a rule; said beside its prediction.
NOT_MODELLED = {
    "R10": "acful lets the OS take back free pages of pooled carriers (MADV_FREE: LazyFree, "
    "MemAvailable; VmRSS until the kernel needs them); carrier bytes, which the replay counts, "
    "do not change",
    "R6": "cached segments are resident but not in carrier bytes; the gain is fewer mmap calls",
}
#: The user-size overhead of a block: header, plus an atag on binary/driver_alloc
#: (docs/erts/alloc_util.md §3.1).
_OVERHEAD = {"binary_alloc": 16, "driver_alloc": 16}

#: Options read from the snapshot and rendered as flags, in the order erts processes them
#: (`as` before `ac*`, docs/erts/tuning.md §0.2 item 2). (option, config attribute)
_PARAMS = (
    ("e", "e"), ("t", "t"), ("as", "strategy"), ("atags", "atags"), ("ramv", "ramv"),
    ("sbct", "sbct"), ("asbcst", "asbcst"), ("rsbcst", "rsbcst"), ("rsbcmt", "rsbcmt"),
    ("rmbcmt", "rmbcmt"), ("mmbcs", "mmbcs"), ("mmmbc", "mmmbc"), ("mmsbc", "mmsbc"),
    ("lmbcs", "lmbcs"), ("smbcs", "smbcs"), ("mbcgs", "mbcgs"), ("acul", "acul"),
    ("acful", "acful"), ("acnl", "acnl"), ("acfml", "acfml"),
)  # fmt: skip
#: Models whose survivors are chosen at random (the worst case for placement); a best case with
#: few stragglers is replayed beside them, since a snapshot cannot show how survivors spread.
RANDOM_SURVIVORS = ("spike_and_drop", "ets_churn")
#: Allocators whose post-peak state the spike model stands for: a burst of binaries, or of
#: processes whose heaps go when they exit (docs/erts/tuning.md §1 R3, R4).
SPIKE_ALLOCATORS = ("binary_alloc", "eheap_alloc")
_KB_PARAMS = ("sbct", "asbcst", "mmbcs", "lmbcs", "smbcs")


class PredictionError(Exception):
    """Why there is no prediction (one line)."""


def otp_of(snap: Snapshot) -> int:
    return modelled_otp(snap.otp_release)


def node_flags(snap: Snapshot) -> FlagSet:
    """The `+M` flags that give the options in force in `snap` (its first scheduler instances),
    against the modelled defaults for its scheduler count: each option that differs becomes a
    flag, in erts' processing order, checked against the flags before it (so `+MBas bf` alone
    stands for `as bf, acul 0`). Options that no flag can reproduce are left at the default."""
    schedulers = snap.schedulers or 1
    otp = otp_of(snap)
    opts = first_scheduler_options(snap)
    flags: list[Flag] = []
    for name, o in sorted(opts.items()):
        letter = ALLOCATOR_LETTERS.get(name)
        if letter is None or letter == "Z":
            continue
        for param, attr in _PARAMS:
            if param not in o or (letter in NO_MIGRATION and param.startswith("ac")):
                continue
            want = o[param]
            if param == "t" and isinstance(want, int) and not isinstance(want, bool):
                want = want > 0  # a crash dump prints `t` as its instance count, live `true`
            cfg = effective_config(FlagSet(tuple(flags), otp=otp), schedulers, otp=otp)[name]
            if getattr(cfg, attr) == want:
                continue
            if param in _KB_PARAMS and isinstance(want, int) and want % 1024:
                continue  # not a KiB value: no flag gives it
            candidate = Flag(letter, param, want)
            try:
                effective_config(FlagSet((*flags, candidate), otp=otp), schedulers, otp=otp)
            except ValueError:
                continue
            flags.append(candidate)
    defaults = GlobalConfig()
    for inst in snap.mseg[:1]:
        for param in ("mcs", "rmcbf", "amcbf"):
            v = inst.options.get(param)
            if isinstance(v, int) and not isinstance(v, bool) and v != getattr(defaults, param):
                if param == "amcbf" and v % 1024:
                    continue
                flags.append(Flag("M", param, v))
    return FlagSet(tuple(flags), otp=otp)


# --- trace models ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """A synthesized trace: which generator, its parameters, and its scale against the node."""

    generator: str
    params: tuple[tuple[str, Any], ...]
    scale: float
    fitted: str  # what it is fitted to, in words

    @property
    def key(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        return self.generator, self.params

    def to_json(self, events: int) -> dict[str, Any]:
        return {"generator": self.generator, "events": events, "scale": round(self.scale, 4),
                "params": dict(self.params), "fitted_to": self.fitted}  # fmt: skip


def _spike(f: Facts, name: str, max_events: int, schedulers: int,
           churn_after: float = 0.5) -> Model:  # fmt: skip
    a = f.allocators[name]
    live = a.mbcs_blocks  # the spike is of mbcs blocks (pooled ones included, like recon)
    peak = max(a.max_mbcs_blocks, live)
    avg = a.mbcs_used / live if live else 1000.0
    # The generator allocates `peak + churn` blocks; the node made `alloc` calls: the rest is
    # churn, half before the spike and half after the drop.
    churn = max(a.call("alloc") - peak, 0)
    events = 2 * peak + 2 * churn
    scale = min(1.0, max_events / events) if events else 1.0
    params = (
        ("schedulers", schedulers),
        ("base_live", max(round(live * scale), schedulers)),
        ("spike_factor", round(peak / live, 3) if live else 1.0),
        ("mean_size", max(round(avg) - _OVERHEAD.get(name, 8), 1)),
        ("churn", round(churn * scale)),
        ("allocator", name),
        ("churn_after", churn_after),
    )
    when = (
        "half of them after the drop" if churn_after == 0.5
        else "none after the drop (with half after it, survivors moved and the trace did not "
        "keep the node's unused bytes)"
    )  # fmt: skip
    fitted = (
        f"{name}: {live} live blocks of {human(round(avg))} on average, {peak} at the peak, "
        f"{a.call('alloc')} allocations, {when}; the drop keeps survivors chosen at random"
    )
    return Model("spike_and_drop", params, scale, fitted)


def _large(f: Facts, name: str, max_events: int, schedulers: int) -> Model:
    a = f.allocators[name]
    live = max(a.sbcs_blocks, a.max_sbcs_blocks // 2, 1)
    avg = a.sbcs_used / a.sbcs_blocks if a.sbcs_blocks else float(a.sbct or 512 * 1024) * 2
    events = min(max(2 * a.call("alloc"), 20 * live), max_events)
    params = (("schedulers", schedulers), ("live", live), ("events", events),
              ("mean_size", round(avg) - _OVERHEAD.get(name, 8)))  # fmt: skip
    fitted = (
        f"{name}: {live} live single-block-carrier blocks of {human(round(avg))} on "
        f"average, {a.call('alloc')} allocations"
    )
    return Model("large_binaries", params, 1.0, fitted)


def _ets(f: Facts, name: str, max_events: int, schedulers: int) -> Model:
    a = f.allocators[name]
    peak = max(a.max_mbcs_blocks, a.mbcs_blocks, 1)
    avg = a.mbcs_used / a.mbcs_blocks if a.mbcs_blocks else 200.0
    cycles = 2
    per_row = 2.2 * cycles  # fill, update a quarter, delete to a tenth, refill
    scale = min(1.0, max_events / (per_row * peak))
    params = (("schedulers", schedulers), ("rows", max(round(peak * scale), schedulers)),
              ("cycles", cycles), ("mean_size", max(round(avg) - 8, 16)))  # fmt: skip
    fitted = (
        f"{name}: {peak} rows at the peak of {human(round(avg))} on average, deleted "
        f"down to a tenth ({a.mbcs_blocks} live now)"
    )
    return Model("ets_churn", params, scale, fitted)


def _mix(f: Facts, max_events: int) -> Model:
    live = sum(a.mbcs_blocks + a.sbcs_blocks for a in f.allocators.values())
    max_live = max(min(max_events // 3, 100_000), 1)
    scale = min(1.0, max_live / live) if live else 1.0
    params = (("max_live", max_live), ("max_events", max_events))
    fitted = (
        f"every allocator's current live set ({live} blocks) and its turnover; no peak, "
        "so it cannot show what a spike leaves behind"
    )
    return Model("stationary_mix", params, scale, fitted)


def _stragglers_model(f: Facts, name: str, max_events: int, schedulers: int) -> Model | None:
    """The favourable reading of a post-peak snapshot: the live set was allocated before the
    peak and is kept, and the peak's blocks are all freed but for one straggler in each carrier
    the node had at its peak (the fewest survivors that still pin those carriers)."""
    a = f.allocators.get(name)
    if a is None or not a.mbcs_blocks:
        return None
    live, peak = a.mbcs_blocks, max(a.max_mbcs_blocks, a.mbcs_blocks)
    if peak < 2 * live:
        return None
    avg = a.mbcs_used / live
    churn = max(a.call("alloc") - peak, 0)
    scale = min(1.0, max_events / (2 * peak + 2 * churn))
    carriers = max(a.max_allocated // max(int(a.options.get("lmbcs") or 0), 1 << 20), schedulers)
    params = (
        ("schedulers", schedulers),
        ("allocator", name),
        ("live", max(round(live * scale), schedulers)),
        ("peak", max(round(peak * scale), schedulers)),
        ("stragglers", max(round(carriers * scale), schedulers)),
        ("mean_size", max(round(avg) - _OVERHEAD.get(name, 8), 1)),
        ("churn", round(churn * scale)),
    )
    fitted = (
        f"{name}: {live} live blocks kept from before the peak of {peak}, the peak freed but "
        f"for one straggler per carrier of the peak ({carriers})"
    )
    return Model("stragglers", params, scale, fitted)


def _carriers_model(snap: Snapshot, f: Facts, name: str, variant: int,
                    trace: Path | None = None) -> Model | None:  # fmt: skip
    """The node's own carriers of `name` rebuilt and run forward (tracegen.from_carriers), or
    None where the snapshot has no carrier data for it. `variant` draws another order of the
    blocks inside each carrier, which the carrier data does not give. With `trace` (the node's
    own events from `beamalloc trace -o`), those run forward instead of the fitted workload."""
    carriers = snap.carriers_of(name)
    a = f.allocators.get(name)
    if not carriers or a is None:
        return None
    pooled = sum(c.in_pool for c in carriers)
    blocks = sum(c.blocks for c in carriers)
    # The peak in single-block carriers left no carrier behind: the counters give it.
    peak_sbcs = max(a.max_sbcs_blocks - a.sbcs_blocks, 0)
    peak_size = a.max_sbcs_allocated // a.max_sbcs_blocks if a.max_sbcs_blocks else 0
    params = (("allocator", name), ("schedulers", f.schedulers or 1), ("sbct", a.sbct),
              ("peak_sbcs", peak_sbcs), ("peak_sbc_size", peak_size),
              ("trace", str(trace) if trace else None),
              ("max_blocks", CARRIER_BLOCKS["traced" if trace else "fitted"]),
              ("variant", variant))  # fmt: skip
    again = (
        f"; then its peak of {a.max_sbcs_blocks} single-block-carrier blocks of "
        f"{human(peak_size)} comes back and goes" if peak_sbcs else ""
    )
    start = (
        f"{name}: its {len(carriers)} carriers as instrument:carriers/1 reports them "
        f"({pooled} pooled, {blocks} blocks), each block kept where its carrier holds it; "
    )
    if trace is not None:
        return Model("from_carriers", params, 1.0, start + f"then the node's own {name} "
                     f"events from {trace.name} (at most {MAX_TRACED} of them)")  # fmt: skip
    fitted = start + f"then the live set of the carriers at least half full turns over once{again}"
    return Model("from_carriers", params, 1.0, fitted)


def traced_events(path: str | Path, allocator: str, limit: int = MAX_TRACED) -> Iterator[Event]:
    """The first `limit` events of one allocator in a trace file (docs/trace-format.md)."""
    number = ALLOCATOR_NUMBERS[allocator]
    with open_trace(path) as r:
        yield from islice((ev for ev in r if ev.allocator == number), limit)


def choose_model(f: Facts, allocator: str, rule: str, *, max_events: int = MAX_EVENTS) -> Model:
    """The trace that shows the finding's symptom (module docstring)."""
    schedulers = f.schedulers or 1
    a = f.allocators.get(allocator)
    if a is not None:
        live = a.mbcs_blocks + a.sbcs_blocks
        peak = a.max_mbcs_blocks + a.max_sbcs_blocks
        if rule == "R7" and allocator == "binary_alloc":
            return _large(f, allocator, max_events, schedulers)
        if allocator == "ets_alloc":
            return _ets(f, allocator, max_events, schedulers)
        if allocator in SPIKE_ALLOCATORS and live and peak >= 2 * live:
            return _spike(f, allocator, max_events, schedulers)
    return _mix(f, max_events)


def _write(model: Model, snap: Snapshot, path: Path, seed: int) -> int:
    from beamalloc.refalloc import tracegen

    p = dict(model.params)
    if model.generator == "from_carriers":
        name = p["allocator"]
        then = traced_events(p["trace"], name) if p["trace"] else None
        n, _ = tracegen.from_carriers(path, snap.carriers_of(name), allocator=name,
                                      schedulers=p["schedulers"], sbct=p["sbct"],
                                      peak_sbcs=p["peak_sbcs"], peak_sbc_size=p["peak_sbc_size"],
                                      max_blocks=p["max_blocks"], then=then,
                                      seed=seed + p["variant"])  # fmt: skip
        return n
    if model.generator == "stragglers":
        return tracegen.stragglers(path, seed=seed, **p)
    if model.generator == "spike_and_drop":
        return tracegen.spike_and_drop(path, seed=seed, **p)
    if model.generator == "large_binaries":
        return tracegen.large_binaries(path, seed=seed, **p)
    if model.generator == "ets_churn":
        return tracegen.ets_churn(path, seed=seed, **p)
    return tracegen.stationary_mix(snap, path, seed=seed, **p)


# --- replay and compare ---------------------------------------------------------------------------


def _figures(snap: Snapshot, allocator: str | None) -> dict[str, int]:
    """Final and peak carrier bytes, unused bytes, carrier calls of one allocator (or all)."""
    insts = [i for i in m.util_instances(snap, recon_only=False)
             if allocator is None or i.allocator == allocator]  # fmt: skip
    now = instance_sums(insts)
    csize, bsize = now["allocated"], now["used"]
    peak = sum(i.mbcs.carriers_size.max + i.sbcs.carriers_size.max for i in insts)
    mseg = sum(i.calls.get("mseg_alloc", 0) for i in insts)
    sysc = sum(i.calls.get("sys_alloc", 0) for i in insts)
    return {"carriers_size": csize, "peak_carriers_size": peak, "unused": csize - bsize,
            "mseg_alloc_calls": mseg, "sys_alloc_calls": sysc,
            "carrier_calls": mseg + sysc}  # fmt: skip


def _pct(before: int, after: int) -> float | None:
    return round(100.0 * (after - before) / before, 1) if before else None


@dataclass
class Predictor:
    """Predictions for one snapshot; traces and replays are shared between findings."""

    snap: Snapshot
    facts: Facts
    max_events: int = MAX_EVENTS
    seed: int = SEED
    #: The node's own allocation stream (`beamalloc trace -o`), replayed instead of a fitted one.
    trace: Path | None = None
    _tmp: tempfile.TemporaryDirectory | None = None
    _traces: dict[Any, tuple[Path, int]] = field(default_factory=dict)
    _runs: dict[Any, Snapshot] = field(default_factory=dict)
    _base: FlagSet | None = None

    def __enter__(self) -> Predictor:
        self._tmp = tempfile.TemporaryDirectory(prefix="beamalloc-predict-")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def base(self) -> FlagSet:
        if self._base is None:
            self._base = node_flags(self.snap)
        return self._base

    def _trace(self, model: Model) -> tuple[Path, int]:
        if model.key not in self._traces:
            assert self._tmp is not None, "use Predictor as a context manager"
            path = Path(self._tmp.name) / f"t{len(self._traces)}.batr"
            self._traces[model.key] = (path, _write(model, self.snap, path, self.seed))
        return self._traces[model.key]

    def _replay(self, model: Model, flags: FlagSet) -> Snapshot:
        from beamalloc.refalloc.replay import replay_snapshot

        key = (model.key, flags.render())
        if key not in self._runs:
            path, _ = self._trace(model)
            self._runs[key] = replay_snapshot(path, flags, schedulers=self.snap.schedulers
                                              or None).snapshot  # fmt: skip
        return self._runs[key]

    def predict(self, allocator: str | None, rule: str, flags: FlagSet) -> dict[str, Any]:
        """Replay `flags` (after the node's own) against the node's flags alone; raises
        PredictionError with one line if it cannot."""
        try:
            return self._predict(allocator, rule, flags)
        except PredictionError:
            raise
        except Exception as e:  # the replay must never break the advice
            raise PredictionError(f"replay failed: {type(e).__name__}: {e}") from e

    def _compare(self, model: Model, flags: FlagSet, target: str | None) -> dict[str, Any]:
        base = self.base
        before = _figures(self._replay(model, base), target)
        after = _figures(self._replay(model, FlagSet(base.flags + flags.flags, otp=base.otp)),
                         target)  # fmt: skip
        _, events = self._trace(model)
        node_unused = self.facts.allocators[target].unused if target else self.facts.unused
        fidelity = (
            before["unused"] / (node_unused * model.scale) if node_unused and model.scale else None
        )
        saving = (
            (before["unused"] - after["unused"]) / before["unused"] if before["unused"] else 0.0
        )
        keys = ("carriers_size", "peak_carriers_size", "unused", "carrier_calls")
        return {
            "model": model.to_json(events),
            "before": before,
            "after": after,
            "change_pct": {k: _pct(before[k], after[k]) for k in keys},
            "unused_saving": round(saving, 4),
            "node_unused": node_unused,
            "fidelity": round(fidelity, 3) if fidelity is not None else None,
            "reproduces_symptom": fidelity is not None and fidelity >= MIN_FIDELITY,
        }

    def _seeded(self, target: str, flags: FlagSet) -> dict[str, Any] | None:
        """The carrier-seeded comparison (the median of CARRIER_VARIANTS draws, with their
        spread as its band), or None where the snapshot has no carrier data for `target`."""
        runs = []
        for variant in range(CARRIER_VARIANTS):
            model = _carriers_model(self.snap, self.facts, target, variant, self.trace)
            if model is None:
                return None
            runs.append(self._compare(model, flags, target))
        runs.sort(key=lambda c: c["unused_saving"])
        out = runs[len(runs) // 2]
        pct = [c["change_pct"]["unused"] for c in runs]
        known = [x for x in pct if x is not None]
        out["band"] = {
            "unused_saving": [runs[0]["unused_saving"], runs[-1]["unused_saving"]],
            "unused_pct": [min(known), max(known)] if known else None,
            "variants": len(runs),
        }
        return out

    def _predict(self, allocator: str | None, rule: str, flags: FlagSet) -> dict[str, Any]:
        target = allocator if allocator in self.facts.allocators else None
        base = self.base
        seeded = self._seeded(target, flags) if target is not None else None
        if seeded is not None:
            out = {
                "allocator": target,
                "flags": flags.render(),
                "flags_before": base.render(),
                "flags_after": FlagSet(base.flags + flags.flags, otp=base.otp).render(),
                "seeded_from": "carriers",
                "workload": "traced" if self.trace else "fitted",
                **seeded,
                "not_modelled": NOT_MODELLED.get(rule),
                "best_case": None,
            }
            out["summary"] = summary_line(out)
            return out
        model = choose_model(self.facts, allocator or "", rule, max_events=self.max_events)
        compared = self._compare(model, flags, target)
        if model.generator == "spike_and_drop" and not compared["reproduces_symptom"]:
            # The snapshot cannot say when the churn happened. Churn after the drop lets the
            # survivors move and carriers empty; a node that still holds its unused bytes had
            # little of it, so the fit puts it all before the spike.
            still = _spike(self.facts, allocator or "", self.max_events,
                           self.facts.schedulers or 1, churn_after=0.0)  # fmt: skip
            retry = self._compare(still, flags, target)
            if retry["reproduces_symptom"]:
                model, compared = still, retry
        out: dict[str, Any] = {
            "allocator": target or "all",
            "flags": flags.render(),
            "flags_before": base.render(),
            "flags_after": FlagSet(base.flags + flags.flags, otp=base.otp).render(),
            "seeded_from": "counters",
            "workload": "fitted",
            "trace_unused": (f"{target or 'the node'} has no carrier data for the trace to start "
                             "from: a workload fitted to its counters is replayed instead")
            if self.trace else None,
            **compared,
            "band": None,
            "not_modelled": NOT_MODELLED.get(rule),
            "best_case": None,
        }
        if model.generator in RANDOM_SURVIVORS and target is not None:
            best = _stragglers_model(
                self.facts, target, self.max_events, self.facts.schedulers or 1
            )
            if best is not None:
                out["best_case"] = self._compare(best, flags, target)
                out["best_case"]["summary"] = _figures_line(out["best_case"], target)
        out["summary"] = summary_line(out)
        return out


def _pc(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.0f} %"


def _figures_line(c: dict[str, Any], allocator: str) -> str:
    b, a, ch = c["before"], c["after"], c["change_pct"]
    model = c["model"]
    scaled = f" at {model['scale']:.0%} of the node's size" if model["scale"] < 1 else ""
    return (
        f"replay of {model['generator']} ({model['events']} events{scaled}): {allocator} carriers "
        f"{human(b['carriers_size'])} -> {human(a['carriers_size'])} ({_pc(ch['carriers_size'])}), "
        f"unused {human(b['unused'])} -> {human(a['unused'])} ({_pc(ch['unused'])}), peak "
        f"{human(b['peak_carriers_size'])} -> {human(a['peak_carriers_size'])}, "
        f"mseg/sys_alloc calls {b['carrier_calls']} -> {a['carrier_calls']}"
    )


def summary_line(p: dict[str, Any]) -> str:
    """One line: what the replay predicts (and its favourable reading, if any)."""
    line = _figures_line(p, p["allocator"])
    band = p.get("band")
    if band and band["unused_pct"]:
        lo, hi = band["unused_pct"]
        line += (
            f" (from the node's own carriers; {_pc(lo)} to {_pc(hi)} over {band['variants']} "
            "orders of the blocks inside them)"
        )
    if p["model"]["generator"] in RANDOM_SURVIVORS:
        line += " (survivors at random: the worst case)"
    if not p["reproduces_symptom"]:
        line += (
            f"; the trace leaves {human(p['before']['unused'])} unused under the node's flags "
            f"where the node has {human(p['node_unused'])}: it does not reproduce this symptom"
        )
    best = p.get("best_case")
    if best is not None and best["reproduces_symptom"]:
        line += (
            f"; if the survivors are few stragglers (best case) unused "
            f"{_pc(best['change_pct']['unused'])}: without carrier data a snapshot cannot "
            "tell which"
        )
    if p["not_modelled"]:
        line += f"; not modelled: {p['not_modelled']}"
    return line


def would_not_help(p: dict[str, Any], rule: str) -> bool:
    """A placement finding whose flags the replay says save too little to restart for, in the
    worst case and in the best case (where the trace of that case reproduces the symptom)."""
    if rule not in PLACEMENT_RULES or not p["reproduces_symptom"]:
        return False
    best = p.get("best_case")
    cases = [p] + ([best] if best is not None and best["reproduces_symptom"] else [])
    return all(c["unused_saving"] < MIN_UNUSED_SAVING for c in cases)
