"""`beamalloc replay`'s terminal table: the flag sets side by side, per allocator the trace used
(final / peak of each replay, refalloc/replay.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from beamalloc.refalloc.replay import ReplayResult
from beamalloc.snapshot import Snapshot
from beamalloc.units import human, pct


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
    usage = f"{pct(bsize[0] / csize[0], 0)}" if csize[0] else "-"
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
    """One table, the flag sets side by side, per allocator the trace used (a flag set that
    does not fit beside the others goes to a second table, the metrics repeated)."""
    from beamalloc.reporters.table import Col, print_table

    def header(r: ReplayResult) -> str:  # a flag per line: a long set stays narrow
        return "\n".join(f.render() for f in r.flag_list) or "(defaults)"

    from rich.text import Text

    blank = [""] * len(results)
    rows: list[list[str | Text]] = [
        [Text("all allocators", style="bold"), *blank],
        ["footprint peak", *(human(r.peak["footprint"].get("carriers_size", 0))
                             for r in results)],
        ["mseg cache at peak", *(human(r.peak["footprint"].get("mseg_cached", 0))
                                 for r in results)],
    ]
    ends = [2]
    for name in _active(results):  # the allocator a heading row, its metrics under it
        per_run = [dict(allocator_rows(r.snapshot, name)) for r in results]
        rows.append([Text(name, style="bold"), *blank])
        rows += [[metric, *(p[metric] for p in per_run)] for metric in per_run[0]]
        ends.append(len(rows) - 1)
    print_table(console, "refalloc replay (final / peak)", [
        Col("allocator / metric", "left", key=True),
        *(Col(header(r)) for r in results)], rows, ends=ends)
    for r in results:
        for note in r.snapshot.notes:
            console.print(f"[{r.flags or 'defaults'}] {note}", markup=False)
