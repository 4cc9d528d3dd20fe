"""Two snapshots of a node, before and after a change: what moved, and did the change help.

`diff(a, b)` returns a `Diff` record (advice/diff_records.py) whose `to_json()` is what
`beamalloc diff --json` prints; the terminal reporter (reporters/diff.py) and the web UI's compare
page (webui/compare.py) read its fields; they are documented in docs/diff.md. Every number is read
from `analyze()` (analyzer/analysis.py: the per-type sums `type_sums`, the totals over all
allocators, the per-instance carrier counts), never recomputed here. What this module adds is the
judgement: the verdict is about the bytes still unused after the change, not the sign of the
change, so a 3 % drop that leaves 158 MiB unused is "barely helped", never a success. Its words
are advice/wording.py's (`diff_headline`, `diff_lines`, `diff_notes`).
"""

from __future__ import annotations

import json
from typing import Any

from beamalloc import flags as fl
from beamalloc.advice import wording
from beamalloc.advice.diff_records import (
    SCHEMA,
    Diff,
    DiffVerdict,
    Numbers,
    OptionChange,
    RssChange,
    Side,
    TypeDiff,
)
from beamalloc.advice.rules import MIN_UNUSED, usage_level
from beamalloc.analyzer.analysis import Analysis, analyze
from beamalloc.analyzer.options import first_scheduler_options, format_option, option_unit
from beamalloc.snapshot import Snapshot

__all__ = ["SCHEMA", "Diff", "diff", "level", "load_moved", "option_changes", "verdict"]

#: Below this change of unused bytes (and below NOISE_SHARE of A's unused) nothing moved: two
#: reads of an idle node a second apart differ by a few hundred KiB.
NOISE_BYTES = 1 << 20
NOISE_SHARE = 0.02
#: A drop of unused bytes at least this large (relative to A's) is a real effect of the change;
#: a smaller one "barely helped" while MIN_UNUSED or more stays unused.
HELPED_SHARE = 0.25
#: Used bytes that moved by this share of A's (and NOISE_BYTES) mean the load changed between
#: the sides: said first, and the flags judged on unused bytes per used byte (issue 22 item 9).
LOAD_SHARE = 0.10
#: One allocator type's unused bytes growing this much (and by GREW_SHARE of its own) is said
#: even where the total fell.
GREW_BYTES = 8 << 20
GREW_SHARE = 0.25


def _side(a: Analysis, label: str | None) -> Side:
    return Side(label, a.node, a.source, a.taken_at, a.otp_release, a.erts_version, a.os_pid,
                a.os.rss)


def _numbers(allocated: int, used: int, mbcs: int, sbcs: int) -> Numbers:
    return Numbers(mbcs, sbcs, allocated, used, allocated - used,
                   used / allocated if allocated else None)


def _per_type(a: Analysis) -> dict[str, Numbers]:
    counts: dict[str, list[int]] = {}
    for r in a.allocators:  # carrier counts per instance (recon's container_value)
        c = counts.setdefault(r.allocator, [0, 0])
        c[0] += r.mbcs_carriers
        c[1] += r.sbcs_carriers
    return {t.allocator: _numbers(t.allocated, t.used, *counts.get(t.allocator, (0, 0)))
            for t in a.allocator_types}


def _total(a: Analysis) -> Numbers:
    t = a.totals_all
    mbcs = sum(r.mbcs_carriers for r in a.allocators)
    sbcs = sum(r.sbcs_carriers for r in a.allocators)
    return _numbers(t.allocated, t.used, mbcs, sbcs)


def level(unused: int | None, usage: float | None) -> str:
    """ok, warn or bad for what a side still holds unused: rules.usage_level, which weighs the
    bytes with R2's usage thresholds, as every other page and table colours it."""
    if unused is None or usage is None:
        return "ok"
    return usage_level(usage, unused)


def _row(name: str, a: Numbers | None, b: Numbers | None) -> TypeDiff:
    assert a is not None or b is not None
    return TypeDiff(name, a, b, None if a is None or b is None else b.minus(a),
                    level(b.unused, b.usage) if b is not None else "ok", _relative(a, b))


def _relative(a: Numbers | None, b: Numbers | None) -> float | None:
    if a is None or b is None or not a.unused:
        return None
    return (b.unused - a.unused) / a.unused


# ---- the +M options that differ -----------------------------------------------------------


def _same_value(x: Any, y: Any) -> bool:
    """Equal option values, whichever reader typed them (a crash dump's "true" and a live
    node's true; "512" and 512); never by their rounded display (32768 and 32800 KiB of mmbcs
    both read "32.0 MiB")."""
    def norm(v: Any) -> Any:
        if isinstance(v, str):
            low = v.strip().lower()
            if low in ("true", "false"):
                return low == "true"
            if low.lstrip("-").isdigit():
                return int(low)
        return v
    return json.dumps(norm(x), sort_keys=True) == json.dumps(norm(y), sort_keys=True)


def option_changes(a: Snapshot, b: Snapshot) -> list[OptionChange]:
    """Options of each allocator type (its first scheduler instance, analyzer/options.py) whose
    value differs between A and B: the flag change, as the two VMs report it."""
    oa, ob = first_scheduler_options(a), first_scheduler_options(b)
    out = []
    for name in sorted(set(oa) | set(ob)):
        va, vb = oa.get(name, {}), ob.get(name, {})
        for k in sorted(set(va) | set(vb)):
            x, y = va.get(k), vb.get(k)
            if _same_value(x, y):
                continue  # the same value, told apart only by how a reader typed it
            letter = fl.ALLOCATOR_LETTERS.get(name)
            out.append(OptionChange(name, k, f"+M{letter}{k}" if letter else f"{name}:{k}",
                                    option_unit(k), x, y, format_option(k, x),
                                    format_option(k, y)))
    return out


# ---- the verdict --------------------------------------------------------------------------


def _per_used(side: Numbers) -> float | None:
    """Unused bytes per used byte: what a side's flags leave empty for the data it holds."""
    return side.unused / side.used if side.used else None


def load_moved(a: Numbers, b: Numbers) -> float | None:
    """The change of used bytes from A to B as a share of A's, where the load moved (by
    LOAD_SHARE and NOISE_BYTES at least); None where it did not."""
    du = b.used - a.used
    if not a.used or abs(du) < NOISE_BYTES or abs(du) < LOAD_SHARE * a.used:
        return None
    return du / a.used


def verdict(a: Numbers, b: Numbers, flags_changed: bool, types: list[TypeDiff]) -> DiffVerdict:
    """outcome (helped, helped_partly, barely_helped, unchanged, worse), level (ok, warn, bad:
    by what B still holds unused, never by the sign alone), headline and lines (A's and B's
    totals `a` and `b`). The change is judged on unused bytes per used byte, so a lighter load
    on B is never credited to the flags; where the load moved, the headline says so first."""
    du = b.unused - a.unused
    ra, rb = _per_used(a), _per_used(b)
    # the judged change: of unused per used byte (= of unused bytes where the load held still)
    rel = (rb - ra) / ra if ra and rb is not None else (du / a.unused if a.unused else None)
    load = load_moved(a, b)
    left = level(b.unused, b.usage)
    noise = max(NOISE_BYTES, NOISE_SHARE * a.unused)
    if abs(du) < noise and (load is None or rel is None or abs(rel) < NOISE_SHARE):
        outcome, lvl = "unchanged", left
    elif (rel if load is not None and rel is not None else du) > 0:
        outcome, lvl = "worse", "bad" if left != "ok" else "warn"
    elif b.unused < MIN_UNUSED:
        outcome, lvl = "helped", "ok"
    elif rel is not None and -rel >= HELPED_SHARE:
        outcome, lvl = "helped_partly", "warn" if left != "ok" else "ok"
    else:
        outcome, lvl = "barely_helped", "warn" if left == "ok" else left
    both = [t for t in types if t.delta is not None]
    top = None
    if both and outcome != "unchanged":
        top = max(both, key=lambda t: abs(t.delta.unused) if t.delta else 0)
        if top.delta is None or not top.delta.unused:
            top = None
    # a type that grew while the total did not: said, not averaged away
    grew = [t for t in both if outcome != "worse" and t.delta is not None and t.a is not None
            and t.delta.unused >= GREW_BYTES and t.delta.unused >= GREW_SHARE * t.a.unused]
    worst = max((t for t in types if t.b is not None), key=lambda t: t.b.unused if t.b else 0,
                default=None)
    if worst is not None and worst.b is not None and worst.b.unused < MIN_UNUSED:
        worst = None
    return DiffVerdict(
        outcome, lvl,
        wording.diff_headline(outcome, a, b, load, rel, (ra, rb), b.unused < MIN_UNUSED),
        wording.diff_lines(a, b, load, top, grew, worst, flags_changed),
        load, (ra, rb), rel)


def diff(a: Snapshot, b: Snapshot, labels: tuple[str | None, str | None] = (None, None),
         analyses: tuple[Analysis, Analysis] | None = None) -> Diff:
    """A before, B after. `labels` name where each came from (a path, a node, a store sample);
    `analyses`: their analyze() results where the caller has them already (the web UI's cache)."""
    aa, ab = analyses if analyses is not None else (analyze(a), analyze(b))
    sa, sb = _side(aa, labels[0]), _side(ab, labels[1])
    ta, tb = _per_type(aa), _per_type(ab)
    names = list(dict.fromkeys([*tb, *ta]))
    types = [_row(n, ta.get(n), tb.get(n)) for n in names
             if any(s is not None and s.carriers_size for s in (ta.get(n), tb.get(n)))]
    types.sort(key=lambda t: max(s.unused if s is not None else 0 for s in (t.a, t.b)),
               reverse=True)
    total_a, total_b = _total(aa), _total(ab)
    changes = option_changes(a, b)
    rss = None
    if sa.rss is not None and sb.rss is not None:
        rss = RssChange(sa.rss, sb.rss, sb.rss - sa.rss)
    return Diff(
        a=sa,
        b=sb,
        same_node=sa.node == sb.node,
        same_otp=(sa.otp_release, sa.erts_version) == (sb.otp_release, sb.erts_version),
        notes=wording.diff_notes(sa, sb),
        verdict=verdict(total_a, total_b, bool(changes), types),
        total=_row("total", total_a, total_b),
        rss=rss,
        types=types,
        flags=changes,
    )
