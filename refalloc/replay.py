"""Replay a trace under a flag set and return what the collectors return: a Snapshot.

:func:`replay_snapshot` is the one entry point: it replays through refalloc (beamalloc._refalloc)
and builds a :class:`~beamalloc.snapshot.Snapshot` with source ``"replay"`` straight from the
native result, which has the fields of ``erlang:system_info({allocator, A})``
(docs/erts/alloc_util.md §6.1), so the analyzer, the recommender and the web UI read a replay
exactly like a node. :func:`run` is its ``--json`` run object.

A run is the dict that ``beamalloc replay --json`` prints per flag set:
``{"flags", "snapshot", "analysis", "peak", "series"}`` (docs/refalloc.md).

Replay statistics have no "since last call" period: a Triple is (current, max, max).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from beamalloc.errors import InputError
from beamalloc.flags import (
    Flag,
    FlagError,
    FlagSet,
    effective_config,
    effective_globals,
    parse,
    replay_config,
)
from beamalloc.snapshot import (
    AllocatorInstance,
    BlockStats,
    CarrierStats,
    MsegInstance,
    PoolStats,
    Snapshot,
    Triple,
)
from beamalloc.trace import (
    MAGIC,
    TraceError,
    TraceHeader,
    convert,
    native_csv_rows,
    read_header,
)
from beamalloc.versions import modelled_otp

__all__ = ["SERIES_COLUMNS", "ReplayResult", "replay_checkpoints", "replay_histories",
           "replay_histories_under", "replay_snapshot", "run", "snapshot_from"]

SERIES_COLUMNS = ("t_ns", "carriers_size", "blocks_size", "mseg_cached")
#: The model's version string is recorded in each snapshot (which model produced it).
VERSIONS = ("0.9", "3.0")


class ReplayResult:
    """One replay: the flags as given, the Snapshot, the peak and the footprint series.
    `flag_list` is `flags` as typed flags, one each in the order `flags` names them (what a
    table lays out flag by flag, never by splitting the text)."""

    def __init__(
        self,
        flags: str,
        snapshot: Snapshot,
        peak: dict[str, Any],
        series: list[dict[str, int]],
        native: dict[str, Any],
        flag_list: tuple[Flag, ...] = (),
    ) -> None:
        self.flags = flags
        self.flag_list = flag_list
        self.snapshot = snapshot
        self.peak = peak
        self.series = series
        self.native = native

    def to_run(self) -> dict[str, Any]:
        """The `--json` run object; `analysis` is exactly `beamalloc analyze --json`'s output."""
        from beamalloc.analyzer.analysis import analyze

        return {
            "flags": self.flags,
            "snapshot": self.snapshot.to_dict(),
            "analysis": analyze(self.snapshot).to_json(),
            "peak": self.peak,
            "series": self.series,
        }


def _flagset(flags: FlagSet | str | None, otp: int) -> FlagSet:
    if flags is None:
        return FlagSet(otp=otp)
    if isinstance(flags, FlagSet):
        return flags
    try:
        return parse(flags, otp=otp)
    except FlagError as e:
        raise InputError(str(e)) from None


def _native_replay(
    path: Path, config: dict[str, Any], schedulers: int, sample_every_ns: int
) -> dict[str, Any]:
    from beamalloc import _refalloc

    with open(path, "rb") as f:
        binary = f.read(len(MAGIC)) == MAGIC
    try:
        if binary:
            return _refalloc.replay(str(path), config, schedulers, sample_every_ns)
        # CSV: plain rows replay straight from the file; a row that path declines
        # (refalloc/src/csv.rs) sends the whole file through the trace reader's conversion.
        rows = native_csv_rows(path)
        if rows is not None:
            native = _refalloc.replay(str(path), config, schedulers, sample_every_ns, csv=rows)
            if "declined" not in native:
                return native
        import tempfile  # a CSV's conversion alone needs it

        with tempfile.TemporaryDirectory() as tmp:  # converted once, streaming
            tmp_path = Path(tmp) / "trace.batr"
            convert(path, tmp_path, to="binary")
            try:
                return _refalloc.replay(str(tmp_path), config, schedulers, sample_every_ns)
            except ValueError as e:  # name the user's file, not the converted copy
                raise TraceError(str(e).replace(str(tmp_path), str(path))) from None
    except ValueError as e:  # TraceError and the native reader's one-line errors
        raise InputError(str(e)) from None


# --- native result -> Snapshot ------------------------------------------------------------------
# The native result has the shape of erlang:system_info({allocator, A}) (docs/erts/alloc_util.md
# §6.1) as plain dicts and lists, so it maps field by field onto the model.


def _section(s: dict[str, Any]) -> CarrierStats:
    return CarrierStats(
        blocks={
            typ: BlockStats(count=Triple(*b["count"]), size=Triple(*b["size"]))
            for typ, b in s["blocks"].items()
        },
        carriers=Triple(*s["carriers"]),
        carriers_size=Triple(*s["carriers_size"]),
        mseg_carriers=s["mseg_alloc_carriers"],
        sys_carriers=s["sys_alloc_carriers"],
        mseg_carriers_size=s["mseg_alloc_carriers_size"],
        sys_carriers_size=s["sys_alloc_carriers_size"],
    )


def _pool(p: dict[str, Any]) -> PoolStats:
    return PoolStats(
        blocks={typ: (b["count"], b["size"]) for typ, b in p["blocks"].items()},
        carriers=p["carriers"],
        carriers_size=p["carriers_size"],
        counters={k: p[k] for k in ("fetch", "fail", "skip_size") if k in p},
    )


def _instance(name: str, inst: dict[str, Any], options: list[tuple[str, Any]]) -> AllocatorInstance:
    return AllocatorInstance(
        allocator=name,
        instance=inst["instance"],
        options=dict(options),
        mbcs=_section(inst["mbcs"]),
        sbcs=_section(inst["sbcs"]),
        mbcs_pool=_pool(inst["mbcs_pool"]) if "mbcs_pool" in inst else None,
        calls=dict(inst["calls"]),
        versions=list(VERSIONS),
    )


_MSEG_CALLS = ("mseg_alloc", "mseg_dealloc", "mseg_realloc", "mseg_create", "mseg_destroy",
               "mseg_check_cache")  # fmt: skip


def _mseg(m: dict[str, Any], mcs: int) -> MsegInstance:
    return MsegInstance(
        instance=m["instance"],
        options={"amcbf": 4194304, "rmcbf": 20, "mcs": mcs},
        cached_segments=m["cached_segments"],
        cache_hits=m["cache_hits"],
        segments=Triple(*m["segments"]),
        segments_watermark=m["segments"][2],
        segments_size=Triple(*m["segments_size"]),
        calls={k: m[k] for k in _MSEG_CALLS if k in m},
    )


def snapshot_from(
    native: dict[str, Any], flags: FlagSet, schedulers: int, header: TraceHeader | None = None
) -> Snapshot:
    """A Snapshot (source "replay") from `_refalloc.replay`'s result under `flags`."""
    header = header or TraceHeader(schedulers=schedulers)
    configs = effective_config(flags, schedulers, otp=flags.otp)
    snap = Snapshot(
        node=header.node or "replay",
        source="replay",
        otp_release=str(header.otp),
        erts_version=header.erts,
        wordsize=8,
        schedulers=schedulers,
    )
    for name, insts in native["allocators"].items():
        cfg = configs[name]
        snap.allocators += [
            _instance(name, i, cfg.for_instance(i["instance"], schedulers=schedulers).options())
            for i in insts
        ]
    glob = effective_globals(flags, schedulers, otp=flags.otp)
    snap.mseg += [_mseg(m, glob.mcs) for m in native["mseg_alloc"]]
    snap.extra["alloc_util"] = {"0": {"mmc": glob.mmc, "ycs": glob.ycs, "sac": glob.sac}}
    snap.extra["replay"] = {
        "flags": flags.render(),
        "events": native["events"],
        "live_blocks": native["live_blocks"],
        "anomalies": dict(native["anomalies"]),
    }
    if any(native["anomalies"].values()):
        a = native["anomalies"]
        snap.notes.append(
            "replay: events the model could not apply as given: "
            + ", ".join(f"{k} {v}" for k, v in a.items() if v)
        )
    return snap


def _series(native: dict[str, Any]) -> list[dict[str, int]]:
    cols = tuple(native["footprint_columns"])
    return [dict(zip(cols, row, strict=True)) for row in native["footprint"]]


def _peak(snap: Snapshot, series: list[dict[str, int]]) -> dict[str, Any]:
    """The footprint sample with the most carrier bytes, and per allocator the maxima of its
    instances (each instance's own maximum, summed: an upper bound of the simultaneous peak)."""
    top = max(series, key=lambda s: s["carriers_size"]) if series else {}
    allocs: dict[str, dict[str, int]] = {}
    for inst in snap.allocators:
        a = allocs.setdefault(
            inst.allocator,
            dict.fromkeys(
                (
                    "carriers",
                    "carriers_size",
                    "mbcs_carriers_size",
                    "sbcs_carriers_size",
                    "blocks",
                    "blocks_size",
                ),
                0,
            ),
        )
        for sec, key in ((inst.mbcs, "mbcs_carriers_size"), (inst.sbcs, "sbcs_carriers_size")):
            a["carriers"] += sec.carriers.max
            a["carriers_size"] += sec.carriers_size.max
            a[key] += sec.carriers_size.max
            a["blocks"] += sec.block_count.max
            a["blocks_size"] += sec.block_size.max
    return {"footprint": dict(top), "allocators": allocs}


def replay_snapshot(
    trace: str | Path,
    flags: FlagSet | str | None = None,
    *,
    schedulers: int | None = None,
    sample_every_ns: int = 100_000_000,
) -> ReplayResult:
    """Replay `trace` under `flags` (a `+M` string, a FlagSet, or None for the defaults)."""
    path = Path(trace)
    header, fs, s, config = _setup(path, flags, schedulers)
    native = _native_replay(path, config, s, sample_every_ns)
    snap = snapshot_from(native, fs, s, header)
    series = _series(native)
    given, shown = _given(flags, fs)
    return ReplayResult(given, snap, _peak(snap, series), series, native, shown)


def _given(flags: FlagSet | str | None, fs: FlagSet) -> tuple[str, tuple[Flag, ...]]:
    """The flags as the result names them: a string as given, a FlagSet rendered (canonical),
    and the same as typed flags."""
    if isinstance(flags, str):
        return flags, fs.flags
    shown = tuple(fs.canonical()) if flags is not None else ()
    return " ".join(f.render() for f in shown), shown


def _setup(path: Path, flags: FlagSet | str | None,
           schedulers: int | None) -> tuple[Any, FlagSet, int, Any]:
    """The trace's header, the flags as the release it was recorded on reads them, the
    schedulers replayed and the native config; InputError (one line) where one is wrong."""
    try:
        header = read_header(path)
    except TraceError as e:
        raise InputError(str(e)) from None
    s = schedulers or header.schedulers
    fs = _flagset(flags, modelled_otp(header.otp))
    try:
        config = replay_config(fs, s, otp=fs.otp)
    except FlagError as e:
        raise InputError(str(e)) from None
    return header, fs, s, config


def replay_checkpoints(
    trace: str | Path,
    flags: FlagSet | str | None,
    checkpoints: Sequence[int],
    *,
    schedulers: int | None = None,
    sample_every_ns: int = 100_000_000,
) -> list[ReplayResult]:
    """The model after each of `checkpoints` events (ascending) of a binary trace, in one pass:
    what :func:`replay_snapshot` gives for each prefix of `trace`, for the cost of the longest
    (the state after N events does not depend on the events after them). The histories a
    prediction tries extend one another by churn (advice/predict.py)."""
    path = Path(trace)
    header, fs, s, config = _setup(path, flags, schedulers)
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise InputError(f"{path}: checkpoints take a binary trace, not CSV")
    from beamalloc import _refalloc

    try:
        native = _refalloc.replay(str(path), config, s, sample_every_ns,
                                  checkpoints=list(checkpoints))  # fmt: skip
    except ValueError as e:
        raise InputError(str(e)) from None
    given, shown = _given(flags, fs)
    out = []
    for cp in native.get("checkpoints", ()):
        snap = snapshot_from(cp, fs, s, header)
        series = _series(cp)
        out.append(ReplayResult(given, snap, _peak(snap, series), series, cp, shown))
    return out


def replay_histories(
    histories: Sequence[tuple[TraceHeader, dict[str, int], Sequence[int]]],
    flags: FlagSet,
    schedulers: int,
    *,
    sample_every_ns: int = 100_000_000,
) -> list[list[ReplayResult]]:
    """What :func:`replay_checkpoints` gives for each history trace that tracegen.history would
    write (its header and native parameters: tracegen.history_params) at its checkpoints, the
    same to the byte, without writing them: the events go straight into the model, histories
    that share their events up to the drop replay them once and go on from copies of that model
    (refalloc/src/history.rs `replay`), on both cores with the GIL released."""
    return replay_histories_under([(flags, histories)], schedulers,
                                  sample_every_ns=sample_every_ns)[0]  # fmt: skip


def replay_histories_under(
    runs: Sequence[tuple[FlagSet, Sequence[tuple[TraceHeader, dict[str, int], Sequence[int]]]]],
    schedulers: int,
    *,
    sample_every_ns: int = 100_000_000,
) -> list[list[list[ReplayResult]]]:
    """:func:`replay_histories` of each (flags, histories) of `runs` in one call: the passes of
    every flag set share both cores (history.rs `replay_under`), where one flag set's single
    pass would leave one idle."""
    from beamalloc import _refalloc

    try:
        configs = [replay_config(flags, schedulers, otp=flags.otp) for flags, _ in runs]
        natives = _refalloc.history_replays([(m, p, list(cps)) for m, (_, hs) in enumerate(runs)
                                             for _, p, cps in hs],
                                            configs, schedulers, sample_every_ns)  # fmt: skip
    except (FlagError, ValueError) as e:
        raise InputError(str(e)) from None
    out = []
    first = 0
    for flags, histories in runs:
        given, shown = _given(flags, flags)
        per = []
        mine = natives[first:first + len(histories)]
        first += len(histories)
        for (header, _, _), cps in zip(histories, mine, strict=True):
            results = []
            for cp in cps:
                snap = snapshot_from(cp, flags, schedulers, header)
                series = _series(cp)
                results.append(ReplayResult(given, snap, _peak(snap, series), series, cp, shown))
            per.append(results)
        out.append(per)
    return out


def run(
    trace: str | Path,
    flags: FlagSet | str | None = None,
    *,
    schedulers: int | None = None,
    sample_every_ns: int = 100_000_000,
) -> dict[str, Any]:
    """One `--json` run object for `flags`."""
    return replay_snapshot(
        trace, flags, schedulers=schedulers, sample_every_ns=sample_every_ns
    ).to_run()
