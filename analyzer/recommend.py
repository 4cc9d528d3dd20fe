"""Compose the rule base's advice into one flag set, lint it, and document every flag.

`recommend(snap)` returns the dict that `beamalloc recommend --json` prints (schema
`beamalloc.recommend/1`, docs/recommend.md). The flags are rendered by flags.FlagSet in its fixed
order (`as` before `acul`, docs/erts/tuning.md §0.2 item 2). Any proposed flag that would trip our
own
lint is withheld, so our recommendations never do (issue 3, must-hold 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beamalloc.analyzer.analysis import coverage, type_rows
from beamalloc.analyzer.carriers import carrier_map
from beamalloc.analyzer.categories import picture
from beamalloc.analyzer.death import death_of
from beamalloc.analyzer.findings import Advice, AllocFacts, Facts, Finding, facts
from beamalloc.analyzer.holders import apply_to_verdict
from beamalloc.analyzer.lint import LintIssue, lint_flags, lint_in_force
from beamalloc.analyzer.options import first_scheduler_options
from beamalloc.analyzer.predict import PredictionError, Predictor, node_flags
from beamalloc.analyzer.rules import MIN_UNUSED, R6_MCS, evaluate, placement_flags
from beamalloc.flags import (
    ALLOCATOR_LETTERS,
    SUPPORTED_OTP,
    FlagSet,
    effective_config,
    effective_globals,
)
from beamalloc.snapshot import Snapshot
from beamalloc.units import human, pct
from beamalloc.versions import erts_of, otp_major

SCHEMA = "beamalloc.recommend/1"
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
            if a.flag.target == "M":
                return effective_globals(fs, self.schedulers, otp=otp) == self.globals
            return effective_config(fs, self.schedulers, otp=otp)[a.allocator] == self.config[
                a.allocator]  # fmt: skip
        except (ValueError, KeyError):
            return False


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
    snap: Snapshot, f: Facts, findings: list[Finding], advice: list[Advice], rate: Rate | None,
    runaway: Finding | None, trace: Path | None = None,
) -> tuple[dict[int, Pred], list[dict[str, Any]], Pred]:
    """Replay each action finding's flags and hold back those that do not show their gain
    (:func:`judge`); replay the flags that remain together. Returns per-finding predictions (by
    id), the held-back findings and the whole set's prediction; `advice` loses the held-back
    findings' flags in place."""
    preds: dict[int, Pred] = {}
    held: list[dict[str, Any]] = []
    with Predictor(snap, f, trace=trace) as pr:
        for fnd in findings:
            if fnd.level != "action" or not fnd.advice:
                continue
            fs = FlagSet(tuple(a.flag for a in fnd.advice), otp=pr.base.otp)
            try:
                preds[id(fnd)] = (pr.predict(fnd.allocator, fnd.rule, fs), None)
            except PredictionError as e:
                preds[id(fnd)] = (None, str(e))
            why = judge(fnd, *preds[id(fnd)], rate, runaway)
            if why is not None:
                held.append(_hold_back(fnd, why, preds[id(fnd)][0], advice))
        whole: Pred = (None, "no flags to predict")
        if advice:
            whole = _predict_whole(pr, findings, advice)
    return preds, held, whole


def unmodelled_release(snap: Snapshot) -> str | None:
    """Why no flag can be shown to help a node older than OTP 20, or None. The prediction
    replays OTP 25's allocators; before OTP 20 the strategies and defaults were others (carrier
    migration from OTP 17, the age-ordered strategies, acnl and acfml from 20.2.1:
    docs/erts/alloc_util.md §2.5), so it cannot show what a flag does there."""
    rel = str(snap.otp_release or "")
    erts = erts_of(snap.erts_version, snap.otp_release)
    if not ((erts is not None and erts < (9, 0)) or (rel[:1] == "R" and rel[1:3].isdigit())):
        return None
    return (f"OTP {rel or '?'} (erts {snap.erts_version or '?'}) is older than OTP 20, whose "
            "strategies and defaults the prediction replays (carrier migration came in OTP 17, "
            "the age-ordered strategies in 20.2.1): it cannot show what a flag does there")


def _hold_back(fnd: Finding, why: str, p: dict[str, Any] | None,
               advice: list[Advice]) -> dict[str, Any]:  # fmt: skip
    """Make `fnd` information: its flags leave the proposal, and it says why."""
    flags = " ".join(a.flag.render() for a in fnd.advice)
    gone = {id(a) for a in fnd.advice}
    advice[:] = [a for a in advice if id(a) not in gone]
    fnd.level = "info"
    fnd.title += " (not advised)"
    fnd.message += f" Not advised: {why}."
    fnd.advice = []
    return {"rule": fnd.rule, "allocator": fnd.allocator, "flags": flags, "why": why,
            "trade_off": fnd.rule in SPEED_RULES, "predicted": p}  # fmt: skip


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


# --- the discipline (issue 17, item 4) -----------------------------------------------------------

#: A memory flag must be predicted to remove at least this share of its allocator's unused
#: bytes: less is not worth restarting a production node for [heur].
MIN_GAIN = 0.20
#: Carrier calls (mseg_alloc + sys_alloc, or mseg cache misses for R6) per second that a speed
#: trade must save: an mmap/munmap pair with its page faults costs some 10-50 µs, so below this
#: the CPU saved is well under 0.5 % of a core [heur].
MIN_RATE = 50.0
#: Rules whose flags buy speed with memory: they need a measured rate (never lifetime counters).
SPEED_RULES = ("R6", "R7")


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


def _judged(p: dict[str, Any]) -> str:
    """Which figure of a prediction the verdict presents and judges by."""
    if p.get("seeded_from") == "carriers":
        what = "its own traced events" if p.get("workload") == "traced" else "the fitted workload"
        return f"{what} replayed from the node's own carriers"
    if p.get("best_case") is not None:
        return "the worst case, survivors at random: a snapshot without carrier data cannot tell"
    return f"the {p['model']['generator']} replay"


def judge(fnd: Finding, p: dict[str, Any] | None, err: str | None, rate: Rate | None,
          runaway: Finding | None) -> str | None:  # fmt: skip
    """None if the finding's flags show the gain they are there for; else why not (one line)."""
    if runaway is not None:
        return "the node died of one runaway allocation: no flag until its holder is bounded"
    if p is not None and p["unused_saving"] < 0:  # a speed trade too: never more waste
        return (f"its own prediction grows {p['allocator']}'s unused bytes by "
                f"{-p['unused_saving']:.0%} ({_judged(p)})")
    if fnd.rule in SPEED_RULES:
        if rate is None:
            return ("a speed trade needs a carrier-call rate measured over time (`recommend "
                    "NODE --rate-seconds N`); lifetime counters do not say what it saves now")
        r = rate.mseg_misses if fnd.rule == "R6" else rate.per_allocator.get(fnd.allocator or "",
                                                                             0.0)  # fmt: skip
        if r < MIN_RATE:
            return (f"a speed trade: {r:.1f} carrier calls/s measured over {rate.seconds:.0f} s, "
                    f"below the {MIN_RATE:.0f}/s worth trading memory for")
        if p is None:
            return f"no prediction of its memory cost ({err})"
        return None
    if p is None:
        return f"no prediction ({err})"
    if p.get("not_modelled"):
        return (f"no prediction of its gain: {p['not_modelled']}; measure it on a node that runs "
                "it (LazyFree and MemAvailable beside VmRSS)")
    if not p["reproduces_symptom"]:
        return (f"no prediction to judge it by: the {p['model']['generator']} trace does not "
                f"reproduce {p['allocator']}'s unused bytes (fidelity {p['fidelity']})")
    saving = p["unused_saving"]
    if saving < MIN_GAIN:
        best = p.get("best_case") or {}
        also = (f"; {best['unused_saving']:.0%} if the survivors are a few stragglers, which "
                "only the carrier map can show" if best.get("reproduces_symptom")
                and best["unused_saving"] >= MIN_GAIN else "")
        return (f"predicted to free {saving:.0%} of {p['allocator']}'s unused bytes (judged on "
                f"{_judged(p)}), below the {MIN_GAIN:.0%} a restart is for{also}")
    return None


# --- what does help when no flag does (issue 17, item 6) -----------------------------------------


def classification(snap: Snapshot, allocator: str) -> dict[str, Any] | None:
    """The carrier map's class of `allocator` (analyzer/carriers.py): `kind` ("stragglers",
    "scattered", "free inside carriers", "compact"), `reason`, `sparse_size` (carrier bytes of
    the sparse carriers) and `pinning_bytes` (the data that pins them); None without carrier
    data."""
    cmap = carrier_map(snap).get(allocator)
    if cmap is None or cmap.classification is None:
        return None
    c = cmap.classification
    return {"kind": c.kind, "reason": c.reason, "sparse_size": cmap.sparse_size,
            "pinning_bytes": cmap.pinning_bytes}  # fmt: skip


SRC_EIA_72 = "Erlang in Anger §7.2"
SRC_REMEDIES = "docs/erts/tuning.md §0.4"


def remedies(a: AllocFacts, cls: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What releases an allocator's unused bytes when no flag does, with the bytes each would:
    from the carrier map (the sparse carriers, less the data that must move) where there is
    one, else an upper bound (its unused bytes)."""
    if cls is not None and cls["kind"] == "stragglers":
        releases, how = max(cls["sparse_size"] - cls["pinning_bytes"], 0), "the sparse carriers"
    elif cls is not None:
        releases, how = a.unused, "its unused bytes: the carriers the survivors are spread over"
    else:
        releases, how = a.unused, "at most its unused bytes (the carrier map would tell)"
    name = a.name
    if name == "binary_alloc":
        acts = [("copy the long-kept binaries with binary:copy/1 (slices of larger ones kept in "
                 "state or ETS), so the sparse carriers empty", ("binary:copy/1 doc", SRC_EIA_72)),
                ("restart or hibernate the processes that hold them (recon:bin_leak/1 finds "
                 "them; erlang:hibernate/3)", (SRC_EIA_72, "recon:bin_leak/1 doc"))]
    elif name == "eheap_alloc":
        acts = [("garbage-collect (erlang:garbage_collect/1) or hibernate the processes whose "
                 "heaps grew in the peak", ("erlang:garbage_collect/1 doc", SRC_EIA_72))]
    elif name == "ets_alloc":
        acts = [("rebuild the table: copy its rows into a new one and delete the old "
                 "(ets:delete/1), so its rows pack into fresh carriers", ("ets doc",))]
    else:
        acts = []
    acts.append(("a queue or cache that really keeps its data: its own limits (length, size, "
                 "expiry)", ("Erlang in Anger §7",)))
    # Each remedy cites its home in the shipped docs first (beamalloc/citations.py links it).
    return [{"action": act, "releases": releases, "releases_how": how,
             "sources": [SRC_REMEDIES, *src]} for act, src in acts]  # fmt: skip


# --- the verdict (issue 17, item 5) -------------------------------------------------------------

HEALTHY, CHANGE, IN_FORCE, NO_FLAG = "HEALTHY", "CHANGE FLAGS", "FLAGS IN FORCE", "NO FLAG HELPS"


def flags_in_force(snap: Snapshot, base: FlagSet | None = None) -> dict[str, Any]:
    """The flags the node runs with, from the options its snapshot carries (every source does):
    rendered as `+M` flags against the defaults of a modelled release, else listed as reported."""
    opts = in_force(snap)
    shown = {n: {k: o[k] for k in ("as", "sbct", "lmbcs", "acul", "acful") if k in o}
             for n, o in sorted(opts.items()) if ALLOCATOR_LETTERS.get(n)}  # fmt: skip
    if otp_major(snap.otp_release) not in SUPPORTED_OTP:
        return {"flags": None, "options": shown,
                "note": f"OTP {snap.otp_release or '?'} is not modelled (OTP "
                        f"{'/'.join(map(str, SUPPORTED_OTP))} are): its options as reported"}
    return {"flags": (base or node_flags(snap)).render(), "options": shown, "note": None}


def _wasteful(a: AllocFacts) -> bool:
    return a.unused >= MIN_UNUSED and a.usage < MOSTLY_EMPTY


def _verdict(snap: Snapshot, f: Facts, running: _Running, findings: list[Finding],
             advice: list[Advice], held: list[dict[str, Any]],
             in_force_flags: dict[str, list[str]], preds: dict[int, Pred],
             runaway: Finding | None, rate: Rate | None,
             rate_why: str | None) -> dict[str, Any]:  # fmt: skip
    base = running.base
    fin = flags_in_force(snap, base)
    advised = {a.allocator for a in advice}
    waste = [a for a in sorted(f.allocators.values(), key=lambda a: -a.unused)
             if _wasteful(a) and a.name not in advised]  # fmt: skip
    mostly_empty = f.usage < MOSTLY_EMPTY and f.unused >= MIN_UNUSED
    if mostly_empty and not waste and not advised:  # spread out: those holding a tenth of it
        waste = [a for a in sorted(f.allocators.values(), key=lambda a: -a.unused)[:3]
                 if a.unused >= f.unused / 10]  # fmt: skip
    entries = []
    for a in waste:
        # Two rules held back for one reason (--no-predict, no release) say it once.
        why = list(dict.fromkeys(h["why"] for h in held if h["allocator"] == a.name))
        if a.name not in in_force_flags and not why:  # the right flags may be set already
            own = placement_flags(a)
            if own and all(running.runs(x) for x in own):
                in_force_flags[a.name] = [x.flag.render() for x in own]
        cls = classification(snap, a.name)
        pooled = (f" {a.pool_carriers} pooled carriers ({human(a.pool_allocated)}) hold "
                  f"{human(a.pool_used)} of data." if a.pool_carriers else "")  # fmt: skip
        if cls is not None:
            cause = f"the carrier map: {cls['kind']}: {cls['reason']}"
        else:
            cause = ("no carrier data: a snapshot from counters cannot tell a few sparse carriers "
                     "pinned by stragglers from survivors scattered over every carrier")
        entries.append({
            "allocator": a.name, "unused": a.unused, "allocated": a.allocated,
            "usage": round(a.usage, 4),  # the node's own flags for it, where the rules' are set
            "flags_in_force": [x.render() for x in base.for_allocator(a.letter or "")]
            if a.name in in_force_flags else [],
            "flags_held_back": why, "classification": cls and cls["kind"],
            "why": cause + "." + pooled, "remedies": remedies(a, cls),
        })  # fmt: skip
    n_adv, n_trade = len(advice), sum(1 for a in advice if a.trade_off)
    counts = {"advised": n_adv, "trade_off": n_trade,
              "held_back": sum(len(h["flags"].split()) // 2 for h in held),
              "in_force": sum(len(v) for v in in_force_flags.values())}  # fmt: skip
    total = f"{human(f.unused)} of {human(f.allocated)} of carriers unused, usage {pct(f.usage)}"
    if runaway is not None:
        state = NO_FLAG
        headline = f"{NO_FLAG}: {runaway.message}"
    elif advice:
        state = CHANGE
        headline = f"{CHANGE}: " + _change_line(snap, findings, advice, preds, rate)
        headline += f"; {total}."
        if entries:
            headline += (f" No flag releases {human(sum(e['unused'] for e in entries))} in "
                         + ", ".join(e["allocator"] for e in entries) + " (below).")
    elif entries and entries[0]["flags_in_force"] and not held:
        state = IN_FORCE
        e = entries[0]
        headline = (f"{IN_FORCE}: {e['allocator']} already runs the flags the rules give "
                    f"({' '.join(e['flags_in_force'])}); {human(e['unused'])} of "
                    f"{human(e['allocated'])} is still unused ({total}): {e['why']}")
        if snap.rss_lazyfree:  # where acful shows (never as "RSS falls")
            headline += (f" Of {human(snap.rss)} resident, {human(snap.rss_lazyfree)} is lazily "
                         "freed (MADV_FREE): the OS takes it back when it needs memory.")
    elif entries:
        state = NO_FLAG
        e = entries[0]
        r = e["remedies"][0]
        why = e["flags_held_back"][0] if e["flags_held_back"] else e["why"].split(".")[0]
        bound = "up to " if r["releases"] == e["unused"] else ""
        headline = (f"{NO_FLAG}: no +M flag is shown to release the {human(e['unused'])} unused "
                    f"in {e['allocator']} ({total}): {why}. What does: {r['action']} "
                    f"({bound}{human(r['releases'])}).")
    else:
        state = HEALTHY
        headline = (f"{HEALTHY}: the allocators use {pct(f.usage)} of {human(f.allocated)} of "
                    "carriers; nothing crosses a rule's threshold.")
    return {"state": state, "headline": headline, "counts": counts,
            "flags_in_force": fin, "no_flag_helps": entries,
            "rate": rate.to_json() if rate else None, "rate_unavailable": rate_why,
            "min_gain": MIN_GAIN, "min_rate": MIN_RATE}  # fmt: skip


def _mseg_cost(snap: Snapshot, mcs: int) -> int:
    """Resident bytes `+MMmcs mcs` may add: the extra cache slots of each mseg instance, each
    holding a segment of the node's average size (cached segments are not in carrier bytes)."""
    out = 0
    for x in snap.mseg:
        cur = x.options.get("mcs")
        avg = x.segments_size.max // x.segments.max if x.segments.max else 0
        out += max(mcs - (cur if isinstance(cur, int) else 10), 0) * avg
    return out


def _change_line(snap: Snapshot, findings: list[Finding], advice: list[Advice],
                 preds: dict[int, Pred], rate: Rate | None) -> str:  # fmt: skip
    """What the advised flags are for, each finding with its predicted figure (a speed trade:
    its memory cost beside the rate it saves)."""
    parts = []
    for fnd in findings:
        if fnd.level != "action" or not fnd.advice:
            continue
        p = preds.get(id(fnd), (None, None))[0]
        flags = " ".join(a.flag.render() for a in fnd.advice)
        if p is None:
            parts.append(f"{flags} ({fnd.rule}, no prediction)")
            continue
        b, a = p["before"], p["after"]
        if fnd.rule == "R6" and rate is not None:
            mcs = next((int(a.flag.value) for a in fnd.advice if a.flag.param == "mcs"),
                       R6_MCS)
            parts.append(f"{flags} trades memory for speed: up to "
                         f"{human(_mseg_cost(snap, mcs))} more cached segments resident (not in "
                         f"carrier bytes) for {rate.mseg_misses:.0f} mseg cache misses/s measured")
        elif fnd.rule in SPEED_RULES:
            parts.append(
                f"{flags} trades memory for speed: {p['allocator']} carrier bytes "
                f"{_signed_pct(p['change_pct']['carriers_size'])} "
                f"({human(a['carriers_size'] - b['carriers_size'])} in the replay) for carrier "
                f"calls {_signed_pct(p['change_pct']['carrier_calls'])}"
                + (f" of {rate.per_allocator.get(p['allocator'], 0):.0f}/s measured" if rate
                   else ""))
        else:
            parts.append(f"{flags} frees {p['unused_saving']:.0%} of {p['allocator']}'s unused "
                         f"bytes (judged on {_judged(p)})")
    n = len(advice)
    return f"{n} flag{'s' if n > 1 else ''}: " + "; ".join(parts)


def _signed_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.0f} %"


def recommend(
    snap: Snapshot, given_flags: str | None = None, *, predict: bool = True,
    rate: Rate | None = None, rate_unavailable: str | None = None, trace: Path | None = None,
    processes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The recommendation (docs/recommend.md). With `predict`, each finding's flags are replayed
    through refalloc on a trace synthesized from `snap` (analyzer/predict.py) and advised only
    when the replay shows their gain (:func:`judge`); without, no flag is advised. `rate` is the
    carrier-call rate measured between two samples of the node, which speed trades need.
    `trace` (a block trace of the same node, `beamalloc trace -o`) is replayed from the node's
    carriers instead of a fitted workload (`workload: "traced"`). `processes` (the holders'
    section, analyzer/holders.py) becomes the result's `processes` key and its holders join the
    verdict (docs/processes.md)."""
    f = facts(snap)
    findings = evaluate(f)
    runaway = next((x for x in findings if x.rule == "OOM" and x.evidence.get("runaway")), None)
    running = _Running(snap)
    in_force_flags: dict[str, list[str]] = {}
    for fnd in findings:  # a flag the node already runs with is no advice
        for a in [a for a in fnd.advice if running.runs(a)]:
            in_force_flags.setdefault(a.allocator, []).append(a.flag.render())
            fnd.advice.remove(a)
        if fnd.level == "action" and not fnd.advice:
            fnd.level, fnd.title = "info", fnd.title + " (its flags are in force)"
    candidates = {id(x): [a.flag.render() for a in x.advice] for x in findings}
    advice, notes = _merge(findings)
    advice, withheld = _lint_proposal(advice, snap, f)
    kept = {id(a) for a in advice}
    for finding in findings:  # a finding whose flags were all withheld is information only
        finding.advice = [a for a in finding.advice if id(a) in kept]
        if finding.level == "action" and not finding.advice:
            finding.level = "info"
    owner = {id(a): fnd for fnd in findings for a in fnd.advice}
    old = unmodelled_release(snap)  # issue 16: OTP 25's replay says nothing of R16B's flags
    if predict and old is None:
        preds, held, whole = _predict_findings(snap, f, findings, advice, rate, runaway, trace)
    else:
        preds, held, whole = {}, [], (None, old or NO_PREDICT)
        for fnd in findings:
            if fnd.level == "action" and fnd.advice:
                held.append(_hold_back(fnd, old or NO_PREDICT, None, advice))
    flags = FlagSet(tuple(a.flag for a in advice))
    rendered = flags.render().split()
    pairs = [" ".join(rendered[i : i + 2]) for i in range(0, len(rendered), 2)]
    advice.sort(key=lambda a: pairs.index(a.flag.render()))  # the order they are pasted in
    erts = erts_of(f.erts_version, f.otp_release)
    lint = [i.to_json() for i in lint_in_force(snap)]
    if given_flags is not None:
        lint += [
            i.to_json()
            for i in lint_flags(given_flags, base=in_force(snap), schedulers=f.schedulers,
                                erts=erts)
        ]

    def rec_pred(a: Advice) -> Pred:
        return preds.get(id(owner[id(a)]), (None, NO_PREDICT)) if predict else (None, NO_PREDICT)

    findings_json = []
    for x in findings:
        d = x.to_json()
        d["predicted"] = preds.get(id(x), (None, None))[0]
        d["candidate_flags"] = candidates.get(id(x), [])
        findings_json.append(d)
    if rate is None and rate_unavailable is None:
        rate_unavailable = NO_RATE
    verdict = _verdict(snap, f, running, findings, advice, held, in_force_flags, preds, runaway,
                       rate, rate_unavailable)  # fmt: skip
    if snap.truncated:  # issue 16: judged from what was read; the rest may hold anything
        verdict["headline"] += (f" The input is truncated: this is judged from the "
                                f"{len(snap.allocators)} allocator instances read before the cut.")
        notes = [n for n in snap.notes if "truncated" in n] + notes
    result = {
        "schema": SCHEMA,
        "node": snap.node,
        "source": snap.source,
        "otp_release": snap.otp_release,
        "erts_version": snap.erts_version,
        "schedulers": snap.schedulers,
        "verdict": verdict,
        "healthy": verdict["state"] == HEALTHY,
        "emulator_flags": flags.render(),
        "recommendations": [_advice_json(a, rec_pred(a)) for a in advice],
        "findings": findings_json,
        "held_back": held,
        "lint": lint,
        "withheld": [i.to_json() for i in withheld],
        "notes": notes,
        "usage": round(f.usage, 4),
        "allocated": f.allocated,
        "used": f.used,
        "rss": f.rss,
        "rss_lazyfree": snap.rss_lazyfree,
        "mem_available": snap.mem_available,
        "prediction": whole[0],
        "not_predicted": whole[1],
        "processes": None,
        # the cause of death and what was read come first (analyzer/death.py, analysis.py)
        "death": None if (d := death_of(snap)) is None else d.to_json(),
        "coverage": coverage(snap).to_json(),
        # every byte by category, and the largest holder of any kind (ETS tables too)
        "categories": picture(snap, type_rows(snap), processes).to_json(),
    }
    if processes is not None:  # who holds the memory: the holders' words join the verdict
        apply_to_verdict(result, processes)
    return result
