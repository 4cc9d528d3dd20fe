"""Compose the rule base's advice into one flag set, lint it, and document every flag.

`recommend(snap)` returns the dict that `beamalloc recommend --json` prints (schema
`beamalloc.recommend/1`, docs/recommend.md). The flags are rendered by flags.FlagSet in its fixed
order (`as` before `acul`, tuning-lore.md §0.2 item 2). Any proposed flag that would trip our own
lint is withheld, so our recommendations never do (issue 3, must-hold 3).
"""

from __future__ import annotations

from typing import Any

from beamalloc.analyzer.findings import Advice, Facts, Finding, facts
from beamalloc.analyzer.lint import LintIssue, erts_of, lint_flags, lint_in_force
from beamalloc.analyzer.rules import evaluate
from beamalloc.flags import FlagSet
from beamalloc.snapshot import Snapshot

SCHEMA = "beamalloc.recommend/1"
REPLAY_PENDING = (
    "not predicted: the replay (refalloc) cannot yet replay a trace synthesized from a snapshot; "
    "once it can, predict() fills this field"
)


def predict(snap: Snapshot, flags: FlagSet) -> dict[str, Any] | None:
    """What the replay predicts for `flags` on this node: footprint and mmap traffic.

    The hook the replay will fill (DESIGN.md, "What it does" 4): synthesize a trace from the
    snapshot, replay it through refalloc under the node's flags and under `flags`, and return
    {"allocated": …, "unused": …, "mseg_calls": …} for both. Returns None until then.
    """
    del snap, flags
    return None


def _merge(findings: list[Finding]) -> tuple[list[Advice], list[str]]:
    """One value per (target, param); rules run in priority order, the first one wins."""
    chosen: dict[tuple[str, str], Advice] = {}
    notes = []
    for finding in findings:
        for adv in finding.advice:
            key = (adv.flag.target, adv.flag.param)
            if key not in chosen:
                chosen[key] = adv
            elif chosen[key].flag.value != adv.flag.value:
                notes.append(
                    f"{adv.rule} also suggested {adv.flag.render()}; "
                    f"{chosen[key].rule}'s {chosen[key].flag.render()} is kept"
                )
    return list(chosen.values()), notes


def in_force(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """Options of each allocator's first scheduler instance (instance 0 never pools, §2.3)."""
    out: dict[str, dict[str, Any]] = {}
    for inst in sorted(snap.allocators, key=lambda i: (i.instance == 0, i.instance)):
        out.setdefault(inst.allocator, dict(inst.options))
    return out


def _lint_proposal(
    advice: list[Advice], snap: Snapshot, f: Facts
) -> tuple[list[Advice], list[LintIssue]]:
    """Lint the proposal; withhold every flag of an allocator whose flags trip the lint."""
    erts = erts_of(f.erts_version, f.otp_release)
    base = in_force(snap)
    withheld: list[LintIssue] = []
    while advice:
        fs = FlagSet(tuple(a.flag for a in advice))
        issues = lint_flags(fs, where="proposed", base=base, schedulers=f.schedulers, erts=erts)
        if not issues:
            break
        bad = {i.allocator for i in issues} | {i.flag for i in issues}
        withheld += issues
        advice = [a for a in advice if a.allocator not in bad and a.flag.name not in bad]
    return advice, withheld


def _advice_json(a: Advice, snap: Snapshot) -> dict[str, Any]:
    value = a.flag.render().split(" ", 1)[1]
    return {
        "allocator": a.allocator,
        "flag": a.flag.name,
        "value": value,
        "rule": a.rule,
        "sources": list(a.sources),
        "reason": a.reason,
        "evidence": a.evidence,
        "cost": a.cost,
        "trade_off": a.trade_off,
        "predicted": predict(snap, FlagSet((a.flag,))),
    }


def recommend(snap: Snapshot, given_flags: str | None = None) -> dict[str, Any]:
    f = facts(snap)
    findings = evaluate(f)
    advice, notes = _merge(findings)
    advice, withheld = _lint_proposal(advice, snap, f)
    kept = {id(a) for a in advice}
    for finding in findings:  # a finding whose flags were all withheld is information only
        finding.advice = [a for a in finding.advice if id(a) in kept]
        if finding.level == "action" and not finding.advice:
            finding.level = "info"
    flags = FlagSet(tuple(a.flag for a in advice))
    rendered = flags.render().split()
    pairs = [" ".join(rendered[i : i + 2]) for i in range(0, len(rendered), 2)]
    advice.sort(key=lambda a: pairs.index(a.flag.render()))  # the order they are pasted in
    erts = erts_of(f.erts_version, f.otp_release)
    lint = [i.to_json() for i in lint_in_force(snap)]
    if given_flags is not None:
        base = in_force(snap)
        lint += [
            i.to_json()
            for i in lint_flags(given_flags, base=base, schedulers=f.schedulers, erts=erts)
        ]
    return {
        "schema": SCHEMA,
        "node": snap.node,
        "source": snap.source,
        "otp_release": snap.otp_release,
        "erts_version": snap.erts_version,
        "schedulers": snap.schedulers,
        "healthy": not advice,
        "emulator_flags": flags.render(),
        "recommendations": [_advice_json(a, snap) for a in advice],
        "findings": [x.to_json() for x in findings],
        "lint": lint,
        "withheld": [i.to_json() for i in withheld],
        "notes": notes,
        "usage": round(f.usage, 4),
        "allocated": f.allocated,
        "used": f.used,
        "rss": f.rss,
        "prediction": None if not advice else REPLAY_PENDING,
    }
