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
from beamalloc.analyzer.predict import PredictionError, Predictor, would_not_help
from beamalloc.analyzer.rules import evaluate
from beamalloc.flags import FlagSet
from beamalloc.snapshot import Snapshot
from beamalloc.units import human

SCHEMA = "beamalloc.recommend/1"
NO_PREDICT = "not predicted: --no-predict"


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


def _advice_json(a: Advice, pred: tuple[dict | None, str | None]) -> dict[str, Any]:
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
        "predicted": pred[0],
        "not_predicted": pred[1],
    }


Pred = tuple[dict[str, Any] | None, str | None]  # (prediction, why there is none)


def _predict_findings(
    snap: Snapshot, f: Facts, findings: list[Finding], advice: list[Advice]
) -> tuple[dict[int, Pred], list[dict[str, Any]], Pred]:
    """Replay each action finding's flags, demote those that would not help, and replay the
    flags that remain together. Returns per-finding predictions (by id), the demoted findings
    and the whole set's prediction; `advice` loses the demoted findings' flags in place."""
    preds: dict[int, Pred] = {}
    demoted: list[dict[str, Any]] = []
    with Predictor(snap, f) as pr:
        for fnd in findings:
            if fnd.level != "action" or not fnd.advice:
                continue
            fs = FlagSet(tuple(a.flag for a in fnd.advice), otp=pr.base.otp)
            try:
                p = pr.predict(fnd.allocator, fnd.rule, fs)
            except PredictionError as e:
                preds[id(fnd)] = (None, str(e))
                continue
            preds[id(fnd)] = (p, None)
            if would_not_help(p, fnd.rule):
                _demote(fnd, p)
                gone = {id(a) for a in fnd.advice}
                advice[:] = [a for a in advice if id(a) not in gone]
                demoted.append({"rule": fnd.rule, "allocator": fnd.allocator,
                                "flags": p["flags"], "predicted": p})  # fmt: skip
                fnd.advice = []
        whole: Pred = (None, "healthy: no flags to predict")
        if advice:
            whole = _predict_whole(pr, findings, advice)
    return preds, demoted, whole


def _demote(fnd: Finding, p: dict[str, Any]) -> None:
    b, a = p["before"]["unused"], p["after"]["unused"]
    fnd.level = "info"
    fnd.title += " (flags would not help)"
    fnd.message += (
        f" Flags would not help here: replayed through refalloc ({p['model']['generator']} "
        f"fitted to this snapshot), {p['flags']} frees only {p['unused_saving']:.0%} of "
        f"{p['allocator']}'s unused bytes ({human(b)} -> {human(a)}): the survivors are spread "
        "over every carrier, so no placement gives those carriers back. Not worth a restart."
    )


def _predict_whole(pr: Predictor, findings: list[Finding], advice: list[Advice]) -> Pred:
    """All proposed flags together, on the trace of each allocator an action finding is about."""
    fs = FlagSet(tuple(a.flag for a in advice), otp=pr.base.otp)
    runs, seen = [], set()
    try:
        for fnd in findings:
            if fnd.level == "action" and fnd.advice and fnd.allocator not in seen:
                seen.add(fnd.allocator)
                runs.append(pr.predict(fnd.allocator, fnd.rule, fs))
    except PredictionError as e:
        return None, str(e)
    return {"flags": fs.render(), "flags_before": runs[0]["flags_before"],
            "flags_after": runs[0]["flags_after"], "runs": runs,
            "summary": runs[0]["summary"]}, None  # fmt: skip


def recommend(
    snap: Snapshot, given_flags: str | None = None, *, predict: bool = True
) -> dict[str, Any]:
    """The recommendation (docs/recommend.md). With `predict`, each finding's flags are replayed
    through refalloc on a trace synthesized from `snap` (analyzer/predict.py), and placement
    advice the replay says would not help is demoted to information."""
    f = facts(snap)
    findings = evaluate(f)
    advice, notes = _merge(findings)
    advice, withheld = _lint_proposal(advice, snap, f)
    kept = {id(a) for a in advice}
    for finding in findings:  # a finding whose flags were all withheld is information only
        finding.advice = [a for a in finding.advice if id(a) in kept]
        if finding.level == "action" and not finding.advice:
            finding.level = "info"
    owner = {id(a): fnd for fnd in findings for a in fnd.advice}
    if predict:
        preds, demoted, whole = _predict_findings(snap, f, findings, advice)
    else:
        preds, demoted, whole = {}, [], (None, NO_PREDICT)
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
    none: Pred = (None, NO_PREDICT if not predict else None)

    def rec_pred(a: Advice) -> Pred:
        return preds.get(id(owner[id(a)]), none) if predict else none

    findings_json = []
    for x in findings:
        d = x.to_json()
        d["predicted"] = preds.get(id(x), (None, None))[0]
        findings_json.append(d)
    return {
        "schema": SCHEMA,
        "node": snap.node,
        "source": snap.source,
        "otp_release": snap.otp_release,
        "erts_version": snap.erts_version,
        "schedulers": snap.schedulers,
        "healthy": not advice,
        "emulator_flags": flags.render(),
        "recommendations": [_advice_json(a, rec_pred(a)) for a in advice],
        "findings": findings_json,
        "demoted": demoted,
        "lint": lint,
        "withheld": [i.to_json() for i in withheld],
        "notes": notes,
        "usage": round(f.usage, 4),
        "allocated": f.allocated,
        "used": f.used,
        "rss": f.rss,
        "prediction": whole[0],
        "not_predicted": whole[1],
    }
