"""Replay a trace under a flag set and return what the collectors return: a Snapshot.

`run(trace, flags)` replays through refalloc (beamalloc._refalloc) and builds a
:class:`~beamalloc.snapshot.Snapshot` with source ``"replay"`` from the native result, which is
shaped like ``erlang:system_info({allocator, A})`` (docs/erts/alloc_util.md §6.1): the terms go
through
:func:`beamalloc.collector.system_info.add_system_info`, the same code path a live snapshot takes,
so the analyzer, the recommender and the web UI read a replay exactly like a node.

A run is the dict that ``beamalloc replay --json`` prints per flag set:
``{"flags", "snapshot", "analysis", "peak", "series"}`` (docs/refalloc.md).

Replay statistics have no "since last call" period: a Triple is (current, max, max).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from beamalloc.collector.system_info import add_system_info
from beamalloc.errors import InputError
from beamalloc.flags import FlagError, FlagSet, effective_config, parse, replay_config
from beamalloc.snapshot import Snapshot
from beamalloc.trace import MAGIC, TraceError, TraceHeader, convert, read_header
from beamalloc.units import human

__all__ = ["SERIES_COLUMNS", "ReplayResult", "compare", "replay_snapshot", "run", "snapshot_from"]

SERIES_COLUMNS = ("t_ns", "carriers_size", "blocks_size", "mseg_cached")
#: The model's version string is recorded in each snapshot (which model produced it).
VERSIONS = ("0.9", "3.0")


class ReplayResult:
    """One replay: the flags as given, the Snapshot, the peak and the footprint series."""

    def __init__(
        self,
        flags: str,
        snapshot: Snapshot,
        peak: dict[str, Any],
        series: list[dict[str, int]],
        native: dict[str, Any],
    ) -> None:
        self.flags = flags
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
            "analysis": analyze(self.snapshot),
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


def _otp_major(header: TraceHeader) -> int:
    try:
        major = int(str(header.otp).split(".")[0])
    except ValueError:
        return 25
    return major if major in (25, 26, 27) else 25


def _native_replay(
    path: Path, config: dict[str, Any], schedulers: int, sample_every_ns: int
) -> dict[str, Any]:
    from beamalloc import _refalloc

    with open(path, "rb") as f:
        binary = f.read(len(MAGIC)) == MAGIC
    try:
        if binary:
            return _refalloc.replay(str(path), config, schedulers, sample_every_ns)
        with tempfile.TemporaryDirectory() as tmp:  # CSV: converted once, streaming
            tmp_path = Path(tmp) / "trace.batr"
            convert(path, tmp_path, to="binary")
            try:
                return _refalloc.replay(str(tmp_path), config, schedulers, sample_every_ns)
            except ValueError as e:  # name the user's file, not the converted copy
                raise TraceError(str(e).replace(str(tmp_path), str(path))) from None
    except ValueError as e:  # TraceError and the native reader's one-line errors
        raise InputError(str(e)) from None


# --- native result -> system_info terms -> Snapshot ----------------------------------------------


def _blocks(d: dict[str, Any], triple: bool) -> list[tuple]:
    out = []
    for typ, b in d.items():
        if triple:
            out.append((typ, [("count", *b["count"]), ("size", *b["size"])]))
        else:
            out.append((typ, [("count", b["count"]), ("size", b["size"])]))
    return out


def _section(s: dict[str, Any]) -> list[tuple]:
    return [
        ("blocks", _blocks(s["blocks"], True)),
        ("carriers", *s["carriers"]),
        ("mseg_alloc_carriers", s["mseg_alloc_carriers"]),
        ("sys_alloc_carriers", s["sys_alloc_carriers"]),
        ("carriers_size", *s["carriers_size"]),
        ("mseg_alloc_carriers_size", s["mseg_alloc_carriers_size"]),
        ("sys_alloc_carriers_size", s["sys_alloc_carriers_size"]),
    ]


def _instance_term(inst: dict[str, Any], options: list[tuple[str, Any]]) -> list[tuple]:
    props: list[tuple] = [("versions", *VERSIONS), ("options", options)]
    props.append(("mbcs", _section(inst["mbcs"])))
    if "mbcs_pool" in inst:
        p = inst["mbcs_pool"]
        pool: list[tuple] = [
            ("blocks", _blocks(p["blocks"], False)),
            ("carriers", p["carriers"]),
            ("carriers_size", p["carriers_size"]),
        ]
        pool += [(k, p[k]) for k in ("fetch", "fail", "skip_size") if k in p]
        props.append(("mbcs_pool", pool))
    props.append(("sbcs", _section(inst["sbcs"])))
    props.append(("calls", list(inst["calls"].items())))
    return props


def _mseg_term(m: dict[str, Any], mcs: int) -> list[tuple]:
    calls = [
        (k, m[k])
        for k in (
            "mseg_alloc",
            "mseg_dealloc",
            "mseg_realloc",
            "mseg_create",
            "mseg_destroy",
            "mseg_check_cache",
        )
        if k in m
    ]
    status = [
        ("cached_segments", m["cached_segments"]),
        ("cache_hits", m["cache_hits"]),
        ("segments", *m["segments"]),
        ("segments_watermark", m["segments"][2]),
        ("segments_size", *m["segments_size"]),
    ]
    return [
        ("version", "0.9"),
        ("options", [("amcbf", 4194304), ("rmcbf", 20), ("mcs", mcs)]),
        ("memkind", [("name", "all memory"), ("status", status), ("calls", calls)]),
    ]


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
        term = [
            (
                "instance",
                i["instance"],
                _instance_term(i, cfg.for_instance(i["instance"], schedulers=schedulers).options()),
            )
            for i in insts
        ]
        add_system_info(snap, name, term)
    from beamalloc.flags import effective_globals

    glob = effective_globals(flags, schedulers, otp=flags.otp)
    add_system_info(
        snap,
        "mseg_alloc",
        [("instance", m["instance"], _mseg_term(m, glob.mcs)) for m in native["mseg_alloc"]],
    )
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
    try:
        header = read_header(path)
    except TraceError as e:
        raise InputError(str(e)) from None
    s = schedulers or header.schedulers
    fs = _flagset(flags, _otp_major(header))
    try:
        config = replay_config(fs, s, otp=fs.otp)
    except FlagError as e:
        raise InputError(str(e)) from None
    native = _native_replay(path, config, s, sample_every_ns)
    snap = snapshot_from(native, fs, s, header)
    series = _series(native)
    given = flags if isinstance(flags, str) else (fs.render() if flags is not None else "")
    return ReplayResult(given, snap, _peak(snap, series), series, native)


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


def compare(
    trace: str | Path,
    flag_sets: Sequence[FlagSet | str | None],
    *,
    schedulers: int | None = None,
    sample_every_ns: int = 100_000_000,
) -> list[dict[str, Any]]:
    """One run per flag set, in the order given."""
    return [
        run(trace, f, schedulers=schedulers, sample_every_ns=sample_every_ns) for f in flag_sets
    ]


# --- terminal output ------------------------------------------------------------------------------


def _active(results: Sequence[ReplayResult]) -> list[str]:
    """Allocators that the trace used in any run (others hold only idle main carriers)."""
    names: dict[str, None] = {}
    for r in results:
        for inst in r.snapshot.allocators:
            if any(
                v
                for k, v in inst.calls.items()
                if k.endswith(("_alloc", "_realloc")) and not k.startswith(("mseg", "sys"))
            ):
                names.setdefault(inst.allocator, None)
    return list(names)


def allocator_rows(snap: Snapshot, name: str) -> list[tuple[str, str]]:
    """(metric, value) rows of one allocator in one replay: final / peak."""
    insts = snap.instances(name)

    def tot(f: Any) -> tuple[int, int]:
        cur = sum(f(i).current for i in insts)
        return cur, sum(f(i).max for i in insts)

    carriers = tot(lambda i: i.mbcs.carriers + i.sbcs.carriers)
    csize = tot(lambda i: i.mbcs.carriers_size + i.sbcs.carriers_size)
    blocks = tot(lambda i: i.mbcs.block_count + i.sbcs.block_count)
    bsize = tot(lambda i: i.mbcs.block_size + i.sbcs.block_size)
    sbcs = tot(lambda i: i.sbcs.carriers_size)
    # Pooled carriers and their blocks are counted apart (mbcs_pool, docs/erts/alloc_util.md §5);
    # they are still mapped.
    pools = [i.mbcs_pool for i in insts if i.mbcs_pool is not None]
    pool = sum(p.carriers_size for p in pools)
    carriers = (carriers[0] + sum(p.carriers for p in pools), carriers[1])
    csize = (csize[0] + pool, csize[1])
    blocks = (blocks[0] + sum(p.block_count for p in pools), blocks[1])
    bsize = (bsize[0] + sum(p.block_size for p in pools), bsize[1])
    calls: dict[str, int] = {}
    for i in insts:
        for k, v in i.calls.items():
            calls[k] = calls.get(k, 0) + v
    usage = f"{bsize[0] / csize[0]:.0%}" if csize[0] else "-"
    return [
        ("carriers final / peak", f"{carriers[0]} / {carriers[1]}"),
        ("carriers size final / peak", f"{human(csize[0])} / {human(csize[1])}"),
        ("  of which sbcs", f"{human(sbcs[0])} / {human(sbcs[1])}"),
        ("  of which pooled (final)", human(pool)),
        ("blocks final / peak", f"{blocks[0]} / {blocks[1]}"),
        ("blocks size final / peak", f"{human(bsize[0])} / {human(bsize[1])}"),
        ("usage (final)", usage),
        (
            "mseg alloc / dealloc / realloc",
            f"{calls.get('mseg_alloc', 0)} / {calls.get('mseg_dealloc', 0)} / "
            f"{calls.get('mseg_realloc', 0)}",
        ),
        (
            "sys alloc / free / realloc",
            f"{calls.get('sys_alloc', 0)} / {calls.get('sys_free', 0)} / "
            f"{calls.get('sys_realloc', 0)}",
        ),
    ]


def render(results: Sequence[ReplayResult], console: Any) -> None:
    """One table, the flag sets side by side, per allocator the trace used."""
    from rich.table import Table

    table = Table(title="refalloc replay (final / peak)", show_lines=False)
    table.add_column("allocator")
    table.add_column("metric")
    for r in results:
        table.add_column(r.flags or "(defaults)", justify="right")
    table.add_row(
        "all",
        "footprint peak",
        *(human(r.peak["footprint"].get("carriers_size", 0)) for r in results),
    )
    table.add_row(
        "",
        "mseg cache at peak",
        *(human(r.peak["footprint"].get("mseg_cached", 0)) for r in results),
    )
    for name in _active(results):
        per_run = [dict(allocator_rows(r.snapshot, name)) for r in results]
        for i, metric in enumerate(per_run[0]):
            table.add_row(
                name if i == 0 else "",
                metric,
                *(p[metric] for p in per_run),
                end_section=i == len(per_run[0]) - 1,
            )
    console.print(table)
    for r in results:
        for note in r.snapshot.notes:
            console.print(f"[{r.flags or 'defaults'}] {note}")
