"""Compose the rule base's advice into one flag set, lint it, judge it, and build the verdict.

`verdict(snap)` returns the typed records (advice/records.py: the Verdict, each
Recommendation and Prediction), built once here; `recommend(snap)` their serialisation, the dict
`beamalloc recommend --json` prints (schema `beamalloc.recommend/2`, docs/recommend.md). Every
sentence comes from advice/wording.py. The flags are rendered by flags.FlagSet in its fixed
order (`as` before `acul`, docs/erts/tuning.md §0.2 item 2). Any proposed flag that would trip
our own lint is withheld, so our recommendations never do (issue 3, must-hold 3); a setting in
force that the lint calls wrong is weighed as a revert to OTP's default (issue 22 item 4).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from beamalloc.advice import wording
from beamalloc.advice.findings import NON_MIGRATING, Advice, AllocFacts, Facts, Finding, facts
from beamalloc.advice.holders import idle_verdict, verdict_holders
from beamalloc.advice.lint import LintIssue, lint_flags, lint_in_force
from beamalloc.advice.predict import PredictionError, Predictor, Turnover, node_flags
from beamalloc.advice.records import (
    CHANGE,
    HEALTHY,
    IN_FORCE,
    MIN_GAIN,
    NO_FLAG,
    UNDECIDED,
    FlagsInForce,
    Found,
    HeldBack,
    NoFlagEntry,
    Prediction,
    Proposal,
    Reason,
    Recommendation,
    Remedy,
    Revert,
    Total,
    Verdict,
    unknown,
)
from beamalloc.advice.rules import MIN_UNUSED, R6_MCS, evaluate, placement_flags
from beamalloc.analyzer.analysis import Coverage, carrier_bytes, coverage, type_rows
from beamalloc.analyzer.carriers import AllocatorCarrierMap, carrier_map
from beamalloc.analyzer.categories import MemoryPicture, picture
from beamalloc.analyzer.death import Death, death_of
from beamalloc.analyzer.options import first_scheduler_options
from beamalloc.flags import (
    ALLOCATOR_LETTERS,
    SUPPORTED_OTP,
    Flag,
    FlagSet,
    effective_config,
    effective_globals,
)
from beamalloc.snapshot import Snapshot
from beamalloc.versions import erts_of, otp_major

__all__ = ["CHANGE", "HEALTHY", "IN_FORCE", "MIN_GAIN", "NO_FLAG", "recommend", "verdict"]

SCHEMA = "beamalloc.recommend/2"
NO_PREDICT = "not predicted: --no-predict"
NO_RATE = ("one snapshot holds lifetime counters only: no rate of carrier calls, so no speed-trade "
           "flag (`recommend NODE` measures one over --rate-seconds; or --rate-from an earlier "
           "snapshot of the same node)")


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


#: Options of each allocator's first scheduler instance (analyzer/options.py).
in_force = first_scheduler_options


def _concerns(issue: LintIssue, a: Advice) -> bool:
    """Whether a lint issue on the proposal is about this flag (and only then holds it back)."""
    if issue.check == "lmbcs-sbct":  # the pair, and only the pair, of that allocator
        return a.allocator == issue.allocator and a.flag.param in ("lmbcs", "sbct", "smbcs")
    if issue.flag is not None:
        return a.flag.name == issue.flag
    return a.allocator == issue.allocator


def _lint_proposal(
    advice: list[Advice], snap: Snapshot, f: Facts
) -> tuple[list[Advice], list[LintIssue]]:
    """Lint the proposal; withhold the flags each issue concerns, the others of the allocator
    stay (a strategy change does not go with an lmbcs that tripped R8)."""
    erts = erts_of(f.erts_version, f.otp_release)
    base = in_force(snap)
    withheld: list[LintIssue] = []
    while advice:
        fs = FlagSet(tuple(a.flag for a in advice))
        issues = lint_flags(fs, where="proposed", base=base, schedulers=f.schedulers, erts=erts)
        if not issues:
            break
        withheld += issues
        kept = [a for a in advice if not any(_concerns(i, a) for i in issues)]
        if len(kept) == len(advice):  # an issue that names no flag we gave: its allocator's go
            gone = {i.allocator for i in issues}
            kept = [a for a in advice if a.allocator not in gone] if gone - {None} else []
        advice = kept
    return advice, withheld


class _Running:
    """The node's flags (predict.node_flags) and the configuration they give, computed once."""

    def __init__(self, snap: Snapshot) -> None:
        self.base = node_flags(snap)
        self.schedulers = snap.schedulers or 1
        self.config = effective_config(self.base, self.schedulers, otp=self.base.otp)
        self.globals = effective_globals(self.base, self.schedulers, otp=self.base.otp)

    def runs(self, a: Advice) -> bool:
        """Whether the node already runs with this flag's value (its effective configuration)."""
        fs, otp = FlagSet((*self.base.flags, a.flag), otp=self.base.otp), self.base.otp
        try:
            if a.flag.target == "M" or (a.flag.target, a.flag.param) == ("I", "scs"):  # globals
                return effective_globals(fs, self.schedulers, otp=otp) == self.globals
            return effective_config(fs, self.schedulers, otp=otp)[a.allocator] == self.config[
                a.allocator]  # fmt: skip
        except (ValueError, KeyError):
            return False


Pred = tuple[Prediction | None, str | None]  # (prediction, why there is none)


def _predict(pr: Predictor, allocator: str | None, rule: str, fs: FlagSet) -> Pred:
    try:
        return Prediction.from_dict(pr.predict(allocator, rule, fs)), None
    except PredictionError as e:
        return None, str(e)


def _recommendation(a: Advice, pred: Pred) -> Recommendation:
    return Recommendation(a.allocator, a.flag.name, a.flag.value_text(), a.rule, tuple(a.sources),
                          a.reason, a.evidence, a.cost, a.trade_off, *pred,
                          setting=a.flag)  # fmt: skip


def unmodelled_reason(snap: Snapshot) -> Reason | None:
    """Why no flag can be shown to help a node older than OTP 20, or None. The prediction
    replays OTP 25's allocators; before OTP 20 the strategies and defaults were others (carrier
    migration from OTP 17, the age-ordered strategies, acnl and acfml from 20.2.1:
    docs/erts/alloc_util.md §2.5), so it cannot show what a flag does there."""
    rel = str(snap.otp_release or "")
    erts = erts_of(snap.erts_version, snap.otp_release)
    if not ((erts is not None and erts < (9, 0)) or (rel[:1] == "R" and rel[1:3].isdigit())):
        return None
    return Reason("release_unmodelled", {"otp": rel or None, "erts": snap.erts_version})


def unmodelled_release(snap: Snapshot) -> str | None:
    """:func:`unmodelled_reason` in words (the what-if page's notice)."""
    r = unmodelled_reason(snap)
    return None if r is None else wording.reason(r)


def _hold_back(fnd: Finding, why: Reason, p: Prediction | None) -> tuple[Finding, HeldBack]:
    """`fnd` as information (a new finding: its flags leave the proposal, and it says why)."""
    held = HeldBack(fnd.rule, fnd.allocator, tuple(a.flag for a in fnd.advice), why,
                    fnd.rule in SPEED_RULES, p)  # fmt: skip
    return replace(fnd, level="info", advice=[], **wording.not_advised(fnd, why)), held


def _predict_whole(pr: Predictor, targets: list[tuple[str | None, str]],
                   advice: list[Advice]) -> tuple[dict[str, Any] | None, str | None]:  # fmt: skip
    """All proposed flags together, on the trace of each allocator advice is about."""
    fs = FlagSet(tuple(a.flag for a in advice), otp=pr.base.otp)
    runs = []
    try:
        for allocator, rule in targets:
            runs.append(pr.predict(allocator, rule, fs))
    except PredictionError as e:
        return None, str(e)
    return {"flags": fs.render(), "flags_before": runs[0]["flags_before"],
            "flags_after": runs[0]["flags_after"], "runs": runs,
            "summary": runs[0]["summary"]}, None  # fmt: skip


#: The rule whose model predicts a placement change of each allocator (a revert included).
_PLACEMENT_RULE = {"binary_alloc": "R3", "eheap_alloc": "R4", "ets_alloc": "R5"}


def _revert_flags(running: _Running, name: str) -> tuple[tuple[Flag, ...], tuple[Flag, ...]]:
    """A non-migrating strategy with acul 0 (lint `migration-off`): the node's flags that set
    it, and OTP's defaults for them (the default strategy, carrier migration on)."""
    letter = ALLOCATOR_LETTERS[name]
    default = effective_config(FlagSet((), otp=running.base.otp), running.schedulers,
                               otp=running.base.otp)[name]  # fmt: skip
    was = tuple(x for x in running.base.for_allocator(letter) if x.param in ("as", "acul", "t"))
    to = (Flag(letter, "as", default.strategy),
          *((Flag(letter, "acul", "de"),) if default.acul > 0 else ()))  # fmt: skip
    return was, to


def _reverts(pr: Predictor, f: Facts, running: _Running, issues: list[LintIssue],
             waste: list[str]) -> list[tuple[Revert, tuple[Flag, ...]]]:  # fmt: skip
    """Each setting in force the lint calls wrong on an allocator no flag is advised for and
    memory is at stake in: OTP's default for it, predicted, and advised where the prediction
    shows the gain (issue 22 item 4: never left standing under NO FLAG HELPS)."""
    out = []
    for i in issues:
        if i.check != "migration-off" or i.allocator not in waste:
            continue
        was, to = _revert_flags(running, i.allocator)
        fs = FlagSet(to, otp=running.base.otp)
        p, err = _predict(pr, i.allocator, _PLACEMENT_RULE.get(i.allocator, "R9"), fs)
        ok = p is not None and _memory_reason(p) is None
        out.append((Revert(i.allocator, i.check, tuple(was), tuple(to), p, err, ok), to))
    return out


def _revert_advice(rv: Revert, flags: tuple[Flag, ...], issue_rule: str) -> list[Advice]:
    return [Advice("lint", rv.allocator, x, wording.revert_reason(rv), wording.REVERT_COST, {},
                   (issue_rule,)) for x in flags]  # fmt: skip


# --- the discipline (issue 17, item 4) -----------------------------------------------------------

#: Carrier calls (mseg_alloc + sys_alloc, or mseg cache misses for R6) per second that a speed
#: trade must save: an mmap/munmap pair with its page faults costs some 10-50 µs, so below this
#: the CPU saved is well under 0.5 % of a core [heur].
MIN_RATE = 50.0
#: Rules whose flags buy speed with memory: they need a measured rate (never lifetime counters).
SPEED_RULES = ("R6", "R7")
#: Rules whose flag buys headroom before a crash, not memory or speed: the use they measured is
#: their evidence, and no replay of carriers can show it (docs/erts/tuning.md §1 R17).
HEADROOM_RULES = ("R17",)


def speed_trades(snap: Snapshot) -> list[str]:
    """The speed-trade rules that propose flags for `snap`: only they need a measured rate, so
    `recommend NODE` samples the node a second time only for them."""
    return sorted({x.rule for x in evaluate(facts(snap))
                   if x.rule in SPEED_RULES and x.level == "action" and x.advice})  # fmt: skip


#: A node (or an allocator) below this usage, with at least rules.MIN_UNUSED unused, is mostly
#: empty: never HEALTHY.
MOSTLY_EMPTY = 0.50


@dataclass(frozen=True)
class Rate:
    """Carrier calls per second between two samples of one node (a speed trade's evidence)."""

    seconds: float
    per_allocator: dict[str, float]  # mseg_alloc + sys_alloc calls/s of its instances
    mseg_misses: float  # mseg_alloc calls that missed the segment cache, per second

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "mseg_misses": round(self.mseg_misses, 2),
                "carrier_calls_per_second": {k: round(v, 2) for k, v in
                                             sorted(self.per_allocator.items())}}  # fmt: skip


def _carrier_calls(snap: Snapshot) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in snap.allocators:
        out[i.allocator] = (out.get(i.allocator, 0) + i.calls.get("mseg_alloc", 0)
                            + i.calls.get("sys_alloc", 0))  # fmt: skip
    return out


def carrier_rate(earlier: Snapshot, later: Snapshot) -> tuple[Rate | None, str | None]:
    """The rate of carrier calls between two snapshots of one node, or why there is none."""
    if earlier.node != later.node:
        return None, f"the samples are of two nodes ({earlier.node}, {later.node})"
    if earlier.taken_at is None or later.taken_at is None or later.taken_at <= earlier.taken_at:
        return None, "the samples do not say when they were taken, or are out of order"
    dt = later.taken_at - earlier.taken_at
    a, b = _carrier_calls(earlier), _carrier_calls(later)
    if any(b.get(k, 0) < v for k, v in a.items()):
        return None, "the counters went down between the samples (a restart)"
    misses = [sum(x.calls.get("mseg_alloc", 0) - x.cache_hits for x in s.mseg)
              for s in (earlier, later)]  # fmt: skip
    return Rate(dt, {k: (v - a.get(k, 0)) / dt for k, v in b.items()},
                max(misses[1] - misses[0], 0) / dt), None  # fmt: skip


def _gain_reason(p: Prediction) -> Reason | None:
    """None if a memory flag's prediction shows its gain (or a trade's shows no growth)."""
    if p.unused_saving < 0:  # a speed trade too: never more waste
        return Reason("grows_unused", {"allocator": p.allocator, "growth": -p.unused_saving,
                                       "judged": wording.judged(p),
                                       "calibration": wording.calibration(p)})  # fmt: skip
    return None


def judge(fnd: Finding, p: Prediction | None, err: str | None, rate: Rate | None,
          runaway: Finding | None) -> Reason | None:  # fmt: skip
    """None if the finding's flags show the gain they are there for; else why not."""
    if runaway is not None:
        return Reason("runaway")
    if fnd.rule in HEADROOM_RULES:
        return None
    if p is not None and (grows := _gain_reason(p)) is not None:
        return grows
    if fnd.rule in SPEED_RULES:
        if rate is None:
            return Reason("no_rate")
        r = rate.mseg_misses if fnd.rule == "R6" else rate.per_allocator.get(fnd.allocator or "",
                                                                             0.0)  # fmt: skip
        if r < MIN_RATE:
            return Reason("rate_low", {"rate": r, "seconds": rate.seconds, "min_rate": MIN_RATE})
        if p is None:
            return Reason("no_cost_prediction", {"error": err})
        return None
    if p is None:
        return Reason("no_prediction", {"error": err})
    return _memory_reason(p)


def _memory_reason(p: Prediction) -> Reason | None:
    """None if a memory flag's prediction shows its gain: modelled, calibrated (the model under
    the node's flags reproduces it), one future known or both past the floor, MIN_GAIN."""
    if (grows := _gain_reason(p)) is not None:
        return grows
    if p.not_modelled:
        return Reason("not_modelled", {"what": p.not_modelled})
    if not p.reproduces:
        return Reason("not_reproduced", {"allocator": p.allocator, "generator": p.generator,
                                         "fidelity": p.fidelity,
                                         "calibration": wording.calibration(p)})  # fmt: skip
    if p.futures_differ():
        return Reason("futures_differ", _futures_numbers(p))
    if p.unused_saving < MIN_GAIN:
        return Reason("below_gain", {
            "allocator": p.allocator, "saving": p.unused_saving, "min_gain": MIN_GAIN,
            "judged": wording.judged(p), "calibration": wording.calibration(p),
            "best": p.best_case_saving if (p.best_case_saving or 0) >= MIN_GAIN else None})
    return None


#: What tells the futures apart, where the predictor does not say (docs/recommend.md).
TELL_APART = ("`recommend NODE` under load (it samples twice: the turnover rate decides), "
              "`recommend NODE --trace-for 30`, or `beamalloc watch NODE`")


def _futures_numbers(p: Prediction) -> dict[str, Any]:
    turn, kept = p.future("turnover"), p.future("kept")
    return {"allocator": p.allocator, "futures": wording.futures(p),
            "turnover": turn.unused_saving if turn else None,
            "kept": kept.unused_saving if kept else None,
            "known_by": p.known_by or "whether the survivors turn over or stay",
            "command": TELL_APART}


# --- what does help when no flag does (issue 17, item 6) -----------------------------------------


def classification(cmap: AllocatorCarrierMap | None) -> dict[str, Any] | None:
    """An allocator's carrier map's class (analyzer/carriers.py): `kind` ("stragglers",
    "scattered", "free inside carriers", "compact"), `reason`, `sparse_size` (carrier bytes of
    the sparse carriers) and `pinning_bytes` (the data that pins them); None without carrier
    data."""
    if cmap is None or cmap.classification is None:
        return None
    c = cmap.classification
    return {"kind": c.kind, "reason": c.reason, "sparse_size": cmap.sparse_size,
            "pinning_bytes": cmap.pinning_bytes}  # fmt: skip


SRC_EIA_72 = "Erlang in Anger §7.2"
SRC_REMEDIES = "docs/erts/tuning.md §0.4"


def remedies(a: AllocFacts, cls: dict[str, Any] | None) -> list[Remedy]:
    """What releases an allocator's unused bytes when no flag does, with the bytes each would:
    from the carrier map (the sparse carriers, less the data that must move) where there is
    one, else an upper bound (its unused bytes). binary:copy/1 only where the copies land
    elsewhere: under a strategy without carrier migration (bf, aobf, gf with acul 0) they land
    in the holes of the same carriers, so it goes with reverting that strategy."""
    bound = False
    if cls is not None and cls["kind"] == "stragglers":
        releases, how = max(cls["sparse_size"] - cls["pinning_bytes"], 0), "the sparse carriers"
    elif cls is not None:
        releases, how = a.unused, "its unused bytes: the carriers the survivors are spread over"
        bound = True
    else:
        releases, how, bound = a.unused, "at most its unused bytes (the carrier map would tell)", \
            True
    acts: list[tuple[str, tuple[str, ...]]] = []
    if a.name == "binary_alloc":
        stuck = a.options.get("as") in NON_MIGRATING and a.options.get("acul") == 0
        acts = [("binary_copy_reverted" if stuck else "binary_copy",
                 ("binary:copy/1 doc", SRC_EIA_72)),
                ("restart_holders", (SRC_EIA_72, "recon:bin_leak/1 doc"))]
    elif a.name == "eheap_alloc":
        acts = [("gc_heaps", ("erlang:garbage_collect/1 doc", SRC_EIA_72))]
    elif a.name == "ets_alloc":
        acts = [("rebuild_table", ("ets doc",))]
    # Each remedy cites its home in the shipped docs first (beamalloc/citations.py links it).
    return [Remedy(code, releases, how, (SRC_REMEDIES, *src), bound) for code, src in acts]


def flags_in_force(snap: Snapshot, base: FlagSet | None = None) -> FlagsInForce:
    """The flags the node runs with, from the options its snapshot carries (every source does):
    rendered as `+M` flags against the defaults of a modelled release, else listed as reported."""
    opts = in_force(snap)
    shown = {n: {k: o[k] for k in ("as", "sbct", "lmbcs", "acul", "acful") if k in o}
             for n, o in sorted(opts.items()) if ALLOCATOR_LETTERS.get(n)}  # fmt: skip
    release = str(snap.otp_release) if snap.otp_release else None
    if otp_major(snap.otp_release) not in SUPPORTED_OTP:
        return FlagsInForce(None, shown, release, False)
    return FlagsInForce((base or node_flags(snap)).render(), shown, release, True)


def _wasteful(a: AllocFacts) -> bool:
    return a.unused >= MIN_UNUSED and a.usage < MOSTLY_EMPTY


def _waste(f: Facts, advised: set[str]) -> list[AllocFacts]:
    """The mostly-empty allocators no advised flag is for, most unused first; on a node mostly
    empty but spread out, those holding a tenth of its unused bytes."""
    by_unused = sorted(f.allocators.values(), key=lambda a: -a.unused)
    waste = [a for a in by_unused if _wasteful(a) and a.name not in advised]
    if f.usage < MOSTLY_EMPTY and f.unused >= MIN_UNUSED and not waste and not advised:
        waste = [a for a in by_unused[:3] if a.unused >= f.unused / 10]
    return waste


def _entries(snap: Snapshot, running: _Running, waste: list[AllocFacts], held: list[HeldBack],
             in_force_flags: dict[str, list[Flag]]) -> list[NoFlagEntry]:  # fmt: skip
    entries = []
    maps = carrier_map(snap) if waste else {}  # every allocator's map, built once
    for a in waste:
        # Two rules held back for one reason (--no-predict, no release) say it once.
        why: tuple[Reason, ...] = ()
        for h in held:
            if h.allocator == a.name and h.reason not in why:
                why += (h.reason,)
        if a.name not in in_force_flags and not why:  # the right flags may be set already
            own = placement_flags(a)
            if own and all(running.runs(x) for x in own):
                in_force_flags[a.name] = [x.flag for x in own]
        cls = classification(maps.get(a.name))
        cause = (Reason("carrier_map", {"kind": cls["kind"], "detail": cls["reason"]})
                 if cls is not None else Reason("no_carrier_data"))
        pool = ({"carriers": a.pool_carriers, "allocated": a.pool_allocated, "used": a.pool_used}
                if a.pool_carriers else None)  # fmt: skip
        entries.append(NoFlagEntry(
            a.name, a.unused, a.allocated, round(a.usage, 4),
            tuple(running.base.for_allocator(a.letter or ""))
            if a.name in in_force_flags else (),
            why, cls and cls["kind"], cause, pool, tuple(remedies(a, cls))))  # fmt: skip
    return entries


def _reasons(state: str, f: Facts, entries: list[NoFlagEntry], recs: list[Recommendation],
             held: list[HeldBack], reverts: list[Revert], runaway: Finding | None,
             snap: Snapshot, rate: Rate | None) -> list[Reason]:  # fmt: skip
    """The reason the headline states first, with its numbers."""
    if state == NO_FLAG and runaway is not None:
        return [Reason("runaway", {"allocator": runaway.allocator, "message": runaway.message,
                                   "wordsize": snap.wordsize,  # and the finding's numbers
                                   **{k: v for k, v in runaway.evidence.items()
                                      if k in ("size", "sbcs_blocks", "sbcs_allocated",
                                               "allocated")}})]
    if state == CHANGE:
        memory = [r for r in recs if r.prediction is not None and not r.trade_off]
        if memory:
            top = max(memory, key=lambda r: f.allocators[r.allocator].unused
                      if r.allocator in f.allocators else 0)  # fmt: skip
            p = top.prediction
            assert p is not None
            unused = f.allocators[top.allocator].unused if top.allocator in f.allocators else \
                f.unused
            rv = next((x for x in reverts if x.allocator == top.allocator and x.advised), None)
            return [Reason("reverts" if rv is not None and top.rule == "lint" else "frees",
                           {"allocator": top.allocator, "unused": unused,
                            "flags_in_force": wording.flags_text(rv.flags_in_force) if rv else None,
                            "saving": p.unused_saving,
                            "calibration_error": p.calibration_error})]
        return [Reason("speed_trade", {"trades": _trades(snap, recs, rate)})]
    if state == UNDECIDED:
        e = entries[0]
        h = next(h for h in held if h.allocator == e.allocator and unknown(h.reason))
        return [Reason(h.reason.code, {"unused": e.unused, **h.reason.numbers})]
    if state == NO_FLAG:
        e = entries[0]
        return [Reason("no_flag", {"allocator": e.allocator, "unused": e.unused,
                                   "remedies": len(e.remedies)})]  # fmt: skip
    if state == IN_FORCE:
        e = entries[0]
        return [Reason("in_force", {"allocator": e.allocator, "unused": e.unused})]
    return [Reason("healthy", {"usage": f.usage, "allocated": f.allocated})]


def _state(recs: list[Recommendation], entries: list[NoFlagEntry], held: list[HeldBack],
           runaway: Finding | None) -> str:  # fmt: skip
    if runaway is not None:
        return NO_FLAG
    if recs:
        return CHANGE
    if entries and entries[0].flags_in_force and not held:
        return IN_FORCE
    if entries and any(h.allocator == entries[0].allocator and unknown(h.reason) for h in held):
        return UNDECIDED
    return NO_FLAG if entries else HEALTHY


def nothing_at_stake(f: Facts, entries: list[NoFlagEntry]) -> Reason | None:
    """A node mostly empty as a whole whose every allocator holds less than rules.MIN_UNUSED
    unused, with no flag held back for any of them: nothing at stake, or None. `+M` flags act
    per allocator, so the most one could release is that allocator's few MiB, below the floor
    every rule weighs flags from; saying "no +M flag releases it" would claim what no
    prediction measured (OTP 27 churn under the defaults: 8.7 MiB of binary_alloc unused, R3's
    flags measured -87 % of it, tests/e2e/matrix.py)."""
    if not entries or any(e.held_back or e.unused >= MIN_UNUSED for e in entries):
        return None
    if any(a.unused >= MIN_UNUSED for a in f.allocators.values()):
        return None
    top = max(f.allocators.values(), key=lambda a: a.unused)
    return Reason("nothing_at_stake", {
        "unused": f.unused, "allocated": f.allocated, "usage": f.usage,
        "allocator": top.name, "allocator_unused": top.unused,
        "allocator_allocated": top.allocated, "floor": MIN_UNUSED})  # fmt: skip


def _trades(snap: Snapshot, recs: list[Recommendation], rate: Rate | None
            ) -> list[dict[str, Any]]:  # fmt: skip
    """What each advised speed trade buys and costs, as numbers: R6 the resident bytes of the
    extra cached segments beside the mseg misses/s measured; R7 the replay's change of carrier
    bytes beside that of carrier calls (and the calls/s measured)."""
    out: list[dict[str, Any]] = []
    for r in recs:
        p, param = r.prediction, r.setting.param if r.setting is not None else None
        if r.rule == "R6" and rate is not None:
            mcs = int(r.setting.value) if r.setting is not None and param == "mcs" else R6_MCS
            out.append({"rule": "R6", "resident": _mseg_cost(snap, mcs),
                        "misses_per_second": rate.mseg_misses})
        elif p is not None and r.rule in SPEED_RULES and param == "sbct":
            b, a, ch = p.raw["before"], p.raw["after"], p.raw["change_pct"]
            out.append({"rule": r.rule, "allocator": p.allocator,
                        "carriers_change": (ch["carriers_size"] or 0) / 100,
                        "carriers_delta": a["carriers_size"] - b["carriers_size"],
                        "calls_change": (ch["carrier_calls"] or 0) / 100,
                        "calls_per_second": rate.per_allocator.get(p.allocator, 0.0) if rate
                        else None})  # fmt: skip
    return out


def _mseg_cost(snap: Snapshot, mcs: int) -> int:
    """Resident bytes `+MMmcs mcs` may add: the extra cache slots of each mseg instance, each
    holding a segment of the node's average size (cached segments are not in carrier bytes)."""
    out = 0
    for x in snap.mseg:
        cur = x.options.get("mcs")
        avg = x.segments_size.max // x.segments.max if x.segments.max else 0
        out += max(mcs - (cur if isinstance(cur, int) else 10), 0) * avg
    return out


def recommend(
    snap: Snapshot, given_flags: str | None = None, *, predict: bool = True,
    rate: Rate | None = None, rate_unavailable: str | None = None, trace: Path | None = None,
    processes: dict[str, Any] | None = None, turnover: Turnover | None = None,
    predictor: Predictor | None = None,
) -> Document:
    """The recommendation (docs/recommend.md) as `recommend --json` prints it: the records of
    :func:`verdict` serialised (and kept beside, `Document.records`). Arguments as
    :func:`verdict`."""
    rec = verdict(snap, given_flags, predict=predict, rate=rate,
                  rate_unavailable=rate_unavailable, trace=trace,
                  processes=processes, turnover=turnover,
                  predictor=predictor)  # fmt: skip
    return Document(rec.to_json(), rec)


class Document(dict[str, Any]):
    """`recommend()`'s result: the document `recommend --json` prints, and beside it (`records`)
    the typed records it serialises, for the readers that word them (reporters/recommend.py):
    none of them reads the document's words back."""

    def __init__(self, doc: dict[str, Any], records: Recommended) -> None:
        super().__init__(doc)
        self.records = records


@dataclass(frozen=True)
class Recommended:
    """Everything `recommend` decided, typed: the verdict and what it was decided from."""

    snap_info: dict[str, Any]
    verdict: Verdict
    findings: tuple[Found, ...]
    lint: tuple[LintIssue, ...]
    withheld: tuple[LintIssue, ...]
    notes: tuple[str, ...]
    emulator_flags: str
    prediction: dict[str, Any] | None
    not_predicted: str | None
    processes: dict[str, Any] | None
    totals: dict[str, Any]
    #: the analysis' parts the answer says first (reporters/analyze.py answer), typed
    death: Death | None = None
    coverage: Coverage | None = None
    categories: MemoryPicture | None = None
    #: `prediction` (every advised flag together), typed
    proposal: Proposal | None = None

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "schema": SCHEMA, **self.snap_info,
            "verdict": verdict_json(v),
            "healthy": v.state == HEALTHY,
            "emulator_flags": self.emulator_flags,
            "recommendations": [r.to_json() for r in v.advised],
            "findings": [{**x.finding.to_json(),
                          "predicted": x.prediction.to_json() if x.prediction else None,
                          "candidate_flags": x.candidate_flags()} for x in self.findings],
            "held_back": [{"rule": h.rule, "allocator": h.allocator,
                           "flags": " ".join(f.render() for f in h.flags),
                           "why": wording.held_back(h), "reason": h.reason.to_json(),
                           "trade_off": h.trade_off,
                           "predicted": h.prediction.to_json() if h.prediction else None}
                          for h in v.held_back],
            "lint": [_lint_json(i, v) for i in self.lint],
            "withheld": [i.to_json() for i in self.withheld],
            "notes": list(self.notes),
            **self.totals,
            "prediction": self.prediction,
            "not_predicted": self.not_predicted,
            "processes": self.processes,
            "death": None if self.death is None else self.death.to_json(),
            "coverage": None if self.coverage is None else self.coverage.to_json(),
            "categories": None if self.categories is None else self.categories.to_json(),
        }


def _lint_json(i: LintIssue, v: Verdict) -> dict[str, Any]:
    """A lint issue, with what the verdict made of it (a revert weighed), so the two agree."""
    out = i.to_json()
    rv = v.revert_of(i.allocator, i.check) if i.where == "in force" else None
    out["verdict"] = None if rv is None else wording.revert(rv)
    return out


def verdict_json(v: Verdict) -> dict[str, Any]:
    """The verdict's serialisation: its codes and numbers, and the wording's lines."""
    return {
        "state": v.state, "headline": wording.headline(v), "why": wording.why(v),
        # the headline's parts, for a narrower line (wording.fit: a terminal at 80 columns)
        "headline_parts": wording.headline_parts(v),
        "reasons": [r.to_json() for r in v.reasons], "counts": v.counts,
        "total": {"unused": v.total.unused, "allocated": v.total.allocated,
                  "usage": round(v.total.usage, 4)},
        "flags_in_force": v.flags_in_force.to_json(wording.in_force_note(v.flags_in_force),
                                                   wording.flags_in_force(v.flags_in_force)),
        "no_flag_helps": [{
            "allocator": e.allocator, "unused": e.unused, "allocated": e.allocated,
            "usage": e.usage, "flags_in_force": [x.render() for x in e.flags_in_force],
            "flags_held_back": [wording.reason(r) for r in e.held_back],
            "held_back_reasons": [r.to_json() for r in e.held_back],
            "classification": e.classification, "why": wording.entry_why(e),
            "cause": e.cause.to_json(), "pool": e.pool,
            "remedies": [r.to_json(wording.remedy(r)) for r in e.remedies],
            **({"held_by": list(e.held_by)} if e.held_by is not None else {}),
        } for e in v.no_flag_helps],
        "reverts": [{"allocator": r.allocator, "check": r.check,
                     "flags_in_force": wording.flags_text(r.flags_in_force),
                     "flags": wording.flags_text(r.flags),
                     "advised": r.advised, "text": wording.revert(r),
                     "predicted": r.prediction.to_json() if r.prediction else None,
                     "not_predicted": r.not_predicted} for r in v.reverts],
        "holders": list(v.holders),
        "rate": v.rate, "rate_unavailable": v.rate_unavailable,
        "min_gain": MIN_GAIN, "min_rate": MIN_RATE,
    }  # fmt: skip


def verdict(
    snap: Snapshot, given_flags: str | None = None, *, predict: bool = True,
    rate: Rate | None = None, rate_unavailable: str | None = None, trace: Path | None = None,
    processes: dict[str, Any] | None = None, turnover: Turnover | None = None,
    predictor: Predictor | None = None,
) -> Recommended:
    """The recommendation's records. With `predict`, each finding's flags are replayed through
    refalloc on a trace synthesized from `snap` (advice/predict.py) and advised only when the
    replay shows their gain (:func:`judge`); without, no flag is advised. `rate` is the
    carrier-call rate measured between two samples of the node, which speed trades need.
    `trace` (a block trace of the same node, `beamalloc trace -o`) is replayed from the node's
    carriers instead of a fitted workload (`workload: "traced"`). `processes` (the holders'
    section, advice/holders.py) becomes the result's `processes` key and its holders join the
    verdict (docs/processes.md). `turnover` (advice/predict.turnover: two reads of the node)
    decides between the futures a prediction cannot tell apart from one snapshot. `predictor`:
    a Predictor of `snap` the caller holds open (its replays cached, its turnover set), used
    instead of a new one (cli/commands/recommend.py warms it while it reads the node again)."""
    f = facts(snap)
    found = evaluate(f)
    runaway = next((x for x in found if x.rule == "OOM" and x.evidence.get("runaway")), None)
    running = _Running(snap)
    in_force_flags: dict[str, list[Flag]] = {}
    staged: list[Finding] = []
    for fnd in found:  # a flag the node already runs with is no advice
        runs = [a for a in fnd.advice if running.runs(a)]
        for a in runs:
            in_force_flags.setdefault(a.allocator, []).append(a.flag)
        rest = [a for a in fnd.advice if a not in runs]
        if fnd.level == "action" and not rest:
            staged.append(replace(
                fnd, level="info", advice=[], title=fnd.title + " (its flags are in force)",
                topic=None if fnd.topic is None else fnd.topic + " (its flags are in force)"))
        else:
            staged.append(replace(fnd, advice=rest))
    # each finding's flags as the rule gave them, typed (the what-if replays on their trace)
    candidates = [FlagSet(tuple(a.flag for a in x.advice), otp=running.base.otp) for x in staged]
    advice, notes = _merge(staged)
    advice, withheld = _lint_proposal(advice, snap, f)
    # a finding whose flags were all withheld is information only
    staged = [replace(x, advice=[a for a in x.advice if a in advice],
                      level="info" if x.level == "action" and not any(a in advice
                                                                       for a in x.advice)
                      else x.level) for x in staged]  # fmt: skip
    lint_force = lint_in_force(snap)
    preds: list[Pred] = [(None, None)] * len(staged)
    held: list[HeldBack] = []
    reverts: list[tuple[Revert, tuple[Flag, ...]]] = []
    whole: tuple[dict[str, Any] | None, str | None] = (None, "no flags to predict")
    old = unmodelled_reason(snap)  # issue 16: OTP 25's replay says nothing of R16B's flags
    if predict and old is None:
        with (nullcontext(predictor) if predictor is not None
              else Predictor(snap, f, trace=trace, turnover=turnover)) as pr:  # fmt: skip
            for i, fnd in enumerate(staged):
                if fnd.level != "action" or not fnd.advice:
                    continue
                preds[i] = _predict(pr, fnd.allocator, fnd.rule,
                                    FlagSet(tuple(a.flag for a in fnd.advice), otp=pr.base.otp))
                why = judge(fnd, *preds[i], rate, runaway)
                if why is not None:
                    advice = [a for a in advice if a not in fnd.advice]
                    staged[i], h = _hold_back(fnd, why, preds[i][0])
                    held.append(h)
            if runaway is None:
                waste = [a.name for a in _waste(f, {a.allocator for a in advice})]
                reverts = _reverts(pr, f, running, lint_force, waste)
            targets = list(dict.fromkeys((x.allocator, x.rule) for x in staged
                                         if x.level == "action" and x.advice))  # fmt: skip
            for rv, flags in reverts:
                if rv.advised:
                    advice += _revert_advice(rv, flags, next(
                        i.rule for i in lint_force if i.allocator == rv.allocator))
                    targets.append((rv.allocator, _PLACEMENT_RULE.get(rv.allocator, "R9")))
            if advice:
                whole = _predict_whole(pr, targets, advice)
    else:
        whole = (None, wording.reason(old) if old else NO_PREDICT)
        for i, fnd in enumerate(staged):
            if fnd.level == "action" and fnd.advice:
                advice = [a for a in advice if a not in fnd.advice]
                staged[i], h = _hold_back(fnd, old or Reason("no_predict"), None)
                held.append(h)
    flags = FlagSet(tuple(a.flag for a in advice))
    # the order they are pasted in: canonical has one flag per (target, param), the last value
    order = {(x.target, x.param): i for i, x in enumerate(flags.canonical())}
    advice.sort(key=lambda a: order[a.flag.target, a.flag.param])
    revert_pred = {rv.allocator: rv.prediction for rv, _ in reverts}

    def rec_pred(a: Advice) -> Pred:
        if not predict:
            return None, NO_PREDICT
        if a.rule == "lint":
            return revert_pred.get(a.allocator), None
        i = next(i for i, x in enumerate(staged) if a in x.advice)
        return preds[i]

    recs = [_recommendation(a, rec_pred(a)) for a in advice]
    erts = erts_of(f.erts_version, f.otp_release)
    lint = list(lint_force)
    if given_flags is not None:
        lint += lint_flags(given_flags, base=in_force(snap), schedulers=f.schedulers, erts=erts)
    if rate is None and rate_unavailable is None:
        rate_unavailable = NO_RATE
    entries = _entries(snap, running, _waste(f, {a.allocator for a in advice}), held,
                       in_force_flags)  # fmt: skip
    said: list[str] = []
    if processes is not None:  # who holds the memory: the holders join the verdict
        said, entries = verdict_holders(processes, entries)
    state = _state(recs, entries, held, runaway)
    calm = nothing_at_stake(f, entries) if state == NO_FLAG and runaway is None else None
    if calm is not None:  # a few MiB: said as what it is, no NO FLAG HELPS entry claimed
        state, entries = HEALTHY, []
    # dead data in idle heaps that is most of the node is no HEALTHY node (issue 24 item 7)
    idle = idle_verdict(processes, snap.memory.get("total") or f.allocated) \
        if state == HEALTHY else None  # fmt: skip
    state = NO_FLAG if idle is not None else state
    v = Verdict(
        state=state, total=Total(f.unused, f.allocated, f.usage),
        reasons=(idle,) if idle is not None else (calm,) if calm is not None else tuple(
            _reasons(state, f, entries, recs, held, [rv for rv, _ in reverts], runaway, snap,
                     rate)),
        advised=tuple(recs), held_back=tuple(held),
        in_force={k: tuple(x) for k, x in in_force_flags.items()},
        flags_in_force=flags_in_force(snap, running.base), no_flag_helps=tuple(entries),
        reverts=tuple(rv for rv, _ in reverts), holders=tuple(said),
        rate=rate.to_json() if rate else None, rate_unavailable=rate_unavailable,
        rss=snap.rss, rss_lazyfree=snap.rss_lazyfree,
        truncated_instances=len(snap.allocators) if snap.truncated else None)  # fmt: skip
    cut = None
    if snap.truncated:  # a cut dump (collector/crashdump.py); else its reader is not loaded
        from beamalloc.collector.crashdump import truncation_note

        # issue 16: judged from what was read; the rest may hold anything
        cut = truncation_note(snap)
    if cut is not None:
        notes = [cut, *notes]
    return Recommended(
        snap_info={"node": snap.node, "source": snap.source, "otp_release": snap.otp_release,
                   "erts_version": snap.erts_version, "schedulers": snap.schedulers},
        verdict=v,
        findings=tuple(Found(x, candidates[i], preds[i][0]) for i, x in enumerate(staged)),
        lint=tuple(lint), withheld=tuple(withheld), notes=tuple(notes),
        emulator_flags=flags.render(), prediction=whole[0], not_predicted=whole[1],
        proposal=None if whole[0] is None else Proposal.from_dict(whole[0]),
        processes=processes,
        # the cause of death and what was read come first (analyzer/death.py, analysis.py)
        death=death_of(snap),
        coverage=coverage(snap),
        # every byte by category, and the largest holder of any kind (ETS tables too)
        categories=picture(snap, carrier_bytes(type_rows(snap)), processes),
        totals={"usage": round(f.usage, 4), "allocated": f.allocated, "used": f.used,
                "rss": f.rss, "rss_lazyfree": snap.rss_lazyfree,
                "mem_available": snap.mem_available})  # fmt: skip
