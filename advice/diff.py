"""Two snapshots of a node, before and after a change: what moved, and did the change help.

`diff(a, b)` returns the plain dict that `beamalloc diff --json` prints, the terminal reporter
(reporters/diff.py) renders and the web UI's compare page (webui/compare.py) shows; its fields
are documented in docs/diff.md. Every number is read from `analyze()` (analyzer/analysis.py: the
per-type sums `type_sums`, the totals over all allocators, the per-instance carrier counts), never
recomputed here. What this module adds is the judgement: the verdict is about the bytes still
unused after the change, not the sign of the change, so a 3 % drop that leaves 158 MiB unused is
"barely helped", never a success.
"""

from __future__ import annotations

import json
from typing import Any

from beamalloc import flags as fl
from beamalloc.advice import wording
from beamalloc.advice.rules import MIN_UNUSED, usage_level
from beamalloc.analyzer.analysis import Analysis, analyze
from beamalloc.analyzer.options import first_scheduler_options, format_option, option_unit
from beamalloc.snapshot import Snapshot
from beamalloc.units import human, pct

SCHEMA = "beamalloc.diff/2"

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

#: The numbers compared per allocator type and for the total (docs/diff.md, "JSON (`--json`)").
FIELDS = ("mbcs_carriers", "sbcs_carriers", "carriers_size", "used", "unused", "usage")


def _side(a: Analysis, label: str | None) -> dict[str, Any]:
    return {"label": label, "node": a.node, "source": a.source, "taken_at": a.taken_at,
            "otp_release": a.otp_release, "erts_version": a.erts_version,
            "os_pid": a.os_pid, "rss": a.os.rss}


def _numbers(allocated: int, used: int, mbcs: int, sbcs: int) -> dict[str, Any]:
    return {"mbcs_carriers": mbcs, "sbcs_carriers": sbcs, "carriers_size": allocated,
            "used": used, "unused": allocated - used,
            "usage": used / allocated if allocated else None}


def _per_type(a: Analysis) -> dict[str, dict[str, Any]]:
    counts: dict[str, list[int]] = {}
    for r in a.allocators:  # carrier counts per instance (recon's container_value)
        c = counts.setdefault(r.allocator, [0, 0])
        c[0] += r.mbcs_carriers
        c[1] += r.sbcs_carriers
    return {t.allocator: _numbers(t.allocated, t.used, *counts.get(t.allocator, (0, 0)))
            for t in a.allocator_types}


def _total(a: Analysis) -> dict[str, Any]:
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


def _row(name: str, a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    delta = None
    if a is not None and b is not None:
        delta = {k: (None if a[k] is None or b[k] is None else b[k] - a[k]) for k in FIELDS}
    last = b if b is not None else a
    assert last is not None
    return {"allocator": name, "a": a, "b": b, "delta": delta,
            "level": level(b["unused"], b["usage"]) if b is not None else "ok",
            "relative_unused": _relative(a, b)}


def _relative(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if a is None or b is None or not a["unused"]:
        return None
    return (b["unused"] - a["unused"]) / a["unused"]


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


def option_changes(a: Snapshot, b: Snapshot) -> list[dict[str, Any]]:
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
            out.append({"allocator": name, "option": k,
                        "flag": f"+M{letter}{k}" if letter else f"{name}:{k}",
                        "unit": option_unit(k), "a": x, "b": y,
                        "a_text": format_option(k, x), "b_text": format_option(k, y)})
    return out


# ---- the verdict --------------------------------------------------------------------------


def _pct(x: float) -> str:
    return wording.change(x, 1)


def _per_used(side: dict[str, Any]) -> float | None:
    """Unused bytes per used byte: what a side's flags leave empty for the data it holds."""
    return side["unused"] / side["used"] if side["used"] else None


def load_moved(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """The change of used bytes from A to B as a share of A's, where the load moved (by
    LOAD_SHARE and NOISE_BYTES at least); None where it did not."""
    du = b["used"] - a["used"]
    if not a["used"] or abs(du) < NOISE_BYTES or abs(du) < LOAD_SHARE * a["used"]:
        return None
    return du / a["used"]


def verdict(total: dict[str, Any], flags_changed: bool, types: list[dict[str, Any]]
            ) -> dict[str, Any]:
    """outcome (helped, helped_partly, barely_helped, unchanged, worse), level (ok, warn, bad:
    by what B still holds unused, never by the sign alone), headline and lines. The change is
    judged on unused bytes per used byte, so a lighter load on B is never credited to the flags;
    where the load moved, the headline says so first."""
    a, b = total["a"], total["b"]
    du = b["unused"] - a["unused"]
    ra, rb = _per_used(a), _per_used(b)
    # the judged change: of unused per used byte (= of unused bytes where the load held still)
    rel = (rb - ra) / ra if ra and rb is not None else (du / a["unused"] if a["unused"] else None)
    load = load_moved(a, b)
    still = f"{human(b['unused'])} still unused"
    if load is None:
        moved = (f"unused {human(a['unused'])} → {human(b['unused'])}"
                 + (f" ({_pct(du / a['unused'])})" if a["unused"] else ""))
        less = f"{human(-du)} less unused" + (f" ({_pct(rel)})" if rel is not None else "")
    else:
        moved = (f"unused per used byte {ra:.2f} → {rb:.2f}" + (f" ({_pct(rel)})" if rel
                                                                 is not None else ""))
        less = moved
    left = level(b["unused"], b["usage"])
    noise = max(NOISE_BYTES, NOISE_SHARE * a["unused"])
    if abs(du) < noise and (load is None or rel is None or abs(rel) < NOISE_SHARE):
        outcome, lvl = "unchanged", left
        head = (f"no change: {human(b['unused'])} unused before and after"
                + ("" if b["unused"] >= MIN_UNUSED else " (too little to matter)"))
    elif (rel if load is not None and rel is not None else du) > 0:
        outcome, lvl = "worse", "bad" if left != "ok" else "warn"
        head = (f"worse: unused grew by {human(du)} ({moved})" if load is None and du > 0
                else f"worse: {moved}")
    elif b["unused"] < MIN_UNUSED:
        outcome, lvl = "helped", "ok"
        head = f"helped: {moved}"
    elif rel is not None and -rel >= HELPED_SHARE:
        outcome, lvl = "helped_partly", "warn" if left != "ok" else "ok"
        head = f"helped partly: {less}, but {still}"
    else:
        outcome, lvl = "barely_helped", "warn" if left == "ok" else left
        head = (f"barely helped: {still} (only {human(-du)} less"
                + (f", {_pct(rel)})" if rel is not None else ")") if load is None
                else f"barely helped: {still} ({moved})")
    if load is not None:  # the load first: then what the flags did for the data held
        head = (f"the load moved (used {human(a['used'])} → {human(b['used'])}, {_pct(load)}); "
                f"judged per used byte: {head}")
    lines = [f"carriers {human(a['carriers_size'])} → {human(b['carriers_size'])}, used "
             f"{human(a['used'])} → {human(b['used'])}, usage "
             f"{_usage(a['usage'])} → {_usage(b['usage'])} (all allocators)"]
    if load is not None:
        lines.append(f"raw unused {human(a['unused'])} → {human(b['unused'])}"
                     + (f" ({_pct(du / a['unused'])})" if a["unused"] else "")
                     + ": not the flags' doing alone, the data held changed too")
    both = [t for t in types if t["delta"] is not None]
    if both and outcome != "unchanged":
        top = max(both, key=lambda t: abs(t["delta"]["unused"]))
        if top["delta"]["unused"]:
            lines.append(f"most of the change is in {top['allocator']}: unused "
                         f"{human(top['a']['unused'])} → {human(top['b']['unused'])}, usage "
                         f"{_usage(top['a']['usage'])} → {_usage(top['b']['usage'])}")
    for t in both:  # a type that grew while the total did not: said, not averaged away
        grew = t["delta"]["unused"]
        if outcome != "worse" and grew >= GREW_BYTES and grew >= GREW_SHARE * t["a"]["unused"]:
            lines.append(f"but unused grew in {t['allocator']}: {human(t['a']['unused'])} → "
                         f"{human(t['b']['unused'])}")
    worst = max((t for t in types if t["b"] is not None), key=lambda t: t["b"]["unused"],
                default=None)
    if worst is not None and worst["b"]["unused"] >= MIN_UNUSED:
        lines.append(f"the most unused in B: {worst['allocator']}, {human(worst['b']['unused'])}"
                     f" of {human(worst['b']['carriers_size'])} "
                     f"(usage {_usage(worst['b']['usage'])})")
    if not flags_changed:
        lines.append("no +M option differs between A and B: what changed is the workload or "
                     "the time, not the flags")
    return {"outcome": outcome, "level": lvl, "headline": head, "lines": lines,
            "load_change": load, "unused_per_used": [ra, rb], "judged_change": rel}


def _usage(u: float | None) -> str:
    return pct(u)


def _notes(sa: dict[str, Any], sb: dict[str, Any]) -> list[str]:
    """What makes A and B not a like-for-like pair, said before any number."""
    notes = []
    if sa["node"] != sb["node"]:
        notes.append(f"different nodes: A is {sa['node']}, B is {sb['node']}; the difference "
                     "mixes their workloads with any flag change")
    elif sa["os_pid"] and sb["os_pid"] and sa["os_pid"] != sb["os_pid"]:
        notes.append(f"{sa['node']} restarted between A and B (OS pid {sa['os_pid']} → "
                     f"{sb['os_pid']}): B started afresh")
    va, vb = (sa["otp_release"], sa["erts_version"]), (sb["otp_release"], sb["erts_version"])
    if va != vb and all(va) and all(vb):
        notes.append(f"different OTP versions: A runs OTP {va[0]} (erts {va[1]}), B OTP {vb[0]} "
                     f"(erts {vb[1]}); defaults and strategies may differ")
    elif va != vb:
        which = " and ".join(t for t, v in (("A", va), ("B", vb)) if not all(v))
        notes.append(f"the OTP version of {which} is unknown (a recon file does not say): "
                     "a change of OTP between them cannot be ruled out")
    return notes


def diff(a: Snapshot, b: Snapshot, labels: tuple[str | None, str | None] = (None, None),
         analyses: tuple[Analysis, Analysis] | None = None) -> dict[str, Any]:
    """A before, B after. `labels` name where each came from (a path, a node, a store sample);
    `analyses`: their analyze() results where the caller has them already (the web UI's cache)."""
    aa, ab = analyses if analyses is not None else (analyze(a), analyze(b))
    sa, sb = _side(aa, labels[0]), _side(ab, labels[1])
    ta, tb = _per_type(aa), _per_type(ab)
    names = list(dict.fromkeys([*tb, *ta]))
    types = [_row(n, ta.get(n), tb.get(n)) for n in names
             if (ta.get(n) or {}).get("carriers_size") or (tb.get(n) or {}).get("carriers_size")]
    types.sort(key=lambda t: max((t[s] or {}).get("unused", 0) for s in ("a", "b")),
               reverse=True)
    total = _row("total", _total(aa), _total(ab))
    changes = option_changes(a, b)
    rss = None
    if sa["rss"] is not None and sb["rss"] is not None:
        rss = {"a": sa["rss"], "b": sb["rss"], "delta": sb["rss"] - sa["rss"]}
    return {
        "schema": SCHEMA,
        "a": sa,
        "b": sb,
        "same_node": sa["node"] == sb["node"],
        "same_otp": (sa["otp_release"], sa["erts_version"]) == (sb["otp_release"],
                                                                sb["erts_version"]),
        "notes": _notes(sa, sb),
        "verdict": verdict(total, bool(changes), types),
        "total": total,
        "rss": rss,
        "types": types,
        "flags": changes,
    }
