"""The one home of the words: advice/records.py's records, advice/diff_records.py's (the diff's
headline, lines and notes) and the analysis of a snapshot (analyzer/analysis.py) into sentences,
for the terminal (reporters/recommend.py, reporters/analyze.py, reporters/diff.py), the web pages
(webui/pagedata.py, webui/compare.py) and the HTML report alike.

The verdict reads as a first line that stands alone (at most HEADLINE_MAX characters: the state,
the bytes at stake, the one thing to do) and at most WHY_MAX short lines of why (issue 26 item 1).
Every predicted figure carries its calibration error beside it. One formatter per kind of
number: `units.human` for bytes, `units.pct` for a share, `change` for a signed change,
`units.count` for a count of things; flags are rendered here too (`flags_text`), kept typed in the
records (beamalloc/flags.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from beamalloc.advice.diff_records import Numbers, Side, TypeDiff
from beamalloc.advice.records import (
    CHANGE,
    HEALTHY,
    IN_FORCE,
    MIN_GAIN,
    NO_FLAG,
    UNDECIDED,
    FlagsInForce,
    HeldBack,
    NoFlagEntry,
    Prediction,
    Reason,
    Remedy,
    Revert,
    Total,
    Verdict,
)
from beamalloc.analyzer.analysis import Analysis, Coverage
from beamalloc.analyzer.carriers import COMPACT
from beamalloc.analyzer.categories import CategoryHolder, MemoryPicture, group_facts
from beamalloc.analyzer.death import Death
from beamalloc.analyzer.options import format_option
from beamalloc.units import around, count, human, pct

if TYPE_CHECKING:
    from beamalloc.advice.findings import Finding
    from beamalloc.flags import Flag

HEADLINE_MAX = 100
WHY_MAX = 3


def change(x: float | None, digits: int = 0) -> str:
    """A signed change given as a fraction: -0.9 -> "-90 %" (`digits` after the point)."""
    if x is None:
        return "n/a"
    return f"{0:.{digits}f} %" if round(100 * x, digits) == 0 else f"{100 * x:+.{digits}f} %"


def share(x: float) -> str:
    """A share of bytes a flag frees or adds, unsigned: 0.85 -> "85 %" (units.pct, whole)."""
    return pct(x, 0)


def flag_count(n: int) -> str:
    return f"{n} flag{'s' if n != 1 else ''}"


# --- predictions -----------------------------------------------------------------------------


def calibration(p: Prediction) -> str:
    err = p.calibration_error
    return "calibration not measured" if err is None else f"calibration error {pct(err)}"


def figure(p: Prediction, saving: float | None = None) -> str:
    """A predicted change of unused bytes with its band and calibration error beside it."""
    s = p.unused_saving if saving is None else saving
    inside = [f"band {change(-p.band[1])} to {change(-p.band[0])}"] if p.band and saving is None \
        else []
    inside.append(calibration(p))
    return f"{change(-s)} ({'; '.join(inside)})"


def judged(p: Prediction) -> str:
    """Which figure of a prediction the verdict presents and judges by."""
    if p.seeded_from in ("carriers", "history"):
        what = "its own traced events" if p.workload == "traced" else "the fitted workload"
        where = "the node's own carriers" if p.seeded_from == "carriers" else "an empty VM"
        return f"{what} replayed from {where}"
    if p.raw.get("best_case") is not None:
        return "the worst case, survivors at random: a snapshot without carrier data cannot tell"
    return f"the {p.generator} replay"


def judged_short(p: Prediction) -> str:
    """:func:`judged` in a why line."""
    if p.seeded_from in ("carriers", "history"):
        return ("its own traced events" if p.workload == "traced" else "fitted") + \
            (" from the node's carriers" if p.seeded_from == "carriers" else " from an empty VM")
    if p.raw.get("best_case") is not None:
        return "worst case: survivors at random (no carrier data)"
    return f"the {p.generator} replay"


def futures(p: Prediction) -> str:
    """Both futures of a prediction where one snapshot cannot tell them apart."""
    out = []
    for name, what in (("turnover", "if these blocks turn over"), ("kept", "if they stay")):
        fut = p.future(name)
        if fut is not None and fut.unused_saving is not None:
            out.append(f"{what}: {change(-fut.unused_saving)}")
    return "; ".join(out)


# --- reasons ---------------------------------------------------------------------------------


def reason(r: Reason) -> str:
    """One reason code with its numbers, as a clause (no final full stop)."""
    n = r.numbers
    c = r.code
    if c == "runaway":
        return "the node died of one runaway allocation: no flag until its holder is bounded"
    if c == "grows_unused":
        return (f"its own prediction grows {n['allocator']}'s unused bytes by "
                f"{share(n['growth'])} ({n['judged']}; {n['calibration']})")
    if c == "no_rate":
        return ("a speed trade needs a carrier-call rate measured over time (`recommend NODE "
                "--rate-seconds N`); lifetime counters do not say what it saves now")
    if c == "rate_low":
        return (f"a speed trade: {n['rate']:.1f} carrier calls/s measured over "
                f"{n['seconds']:.0f} s, below the {n['min_rate']:.0f}/s worth trading memory for")
    if c == "no_cost_prediction":
        return f"no prediction of its memory cost ({n['error']})"
    if c == "no_prediction":
        return f"no prediction ({n['error']})"
    if c == "not_modelled":
        return (f"no prediction of its gain: {n['what']}; measure it on a node that runs it "
                "(LazyFree and MemAvailable beside VmRSS)")
    if c == "not_reproduced":
        return (f"the model does not reproduce {n['allocator']} as the node shows it (the "
                f"{n['generator']} replay, {n['calibration']}), so no decision is taken from it")
    if c == "below_gain":
        also = (f"; {share(n['best'])} if the survivors are a few stragglers, which only the "
                "carrier map can show" if n.get("best") is not None else "")
        return (f"predicted to free {share(n['saving'])} of {n['allocator']}'s unused bytes "
                f"({n['judged']}; {n['calibration']}), below the {share(n['min_gain'])} a "
                f"restart is for{also}")
    if c == "futures_differ":
        return (f"one snapshot cannot tell what {n['allocator']}'s survivors do: "
                f"{n['futures']}; {n['known_by']}")
    if c == "no_predict":
        return "not predicted: --no-predict"
    if c == "release_unmodelled":
        return (f"OTP {n['otp'] or '?'} (erts {n['erts'] or '?'}) is older than OTP 20, whose "
                "strategies and defaults the prediction replays (carrier migration came in OTP "
                "17, the age-ordered strategies in 20.2.1): it cannot show what a flag does there")
    if c == "nothing_at_stake":
        return (f"nothing at stake: the node uses {pct(n['usage'])} of {human(n['allocated'])} "
                f"of carriers, but no allocator holds {human(n['floor'])} unused "
                f"({n['allocator']} the most, {human(n['allocator_unused'])} of "
                f"{human(n['allocator_allocated'])}); +M flags act per allocator, so no "
                "restart for flags is worth it")
    if c == "carrier_map":
        return f"the carrier map: {n['kind']}: {n['detail']}"
    if c == "no_carrier_data":
        return ("no carrier data: a snapshot from counters cannot tell a few sparse carriers "
                "pinned by stragglers from survivors scattered over every carrier")
    return c.replace("_", " ")


def reason_short(r: Reason) -> str:
    """A reason in a why line under the headline: the figure and the floor, no more."""
    n = r.numbers
    if r.code == "below_gain":
        also = f"; {share(n['best'])} if stragglers (the carrier map would tell)" \
            if n.get("best") is not None else ""
        return (f"the flags are predicted to free {share(n['saving'])} of it ({n['calibration']})"
                f", below the {share(n['min_gain'])} floor{also}")
    if r.code == "not_reproduced":
        return f"the model does not reproduce it ({n['calibration']}): no decision from it"
    if r.code in ("no_carrier_data", "carrier_map"):
        return f"the carrier map: {n['kind']}" if r.code == "carrier_map" else "no carrier data"
    return reason(r)


def held_back(h: HeldBack) -> str:
    return reason(h.reason)


#: Said after the title (and the topic) of a finding whose flags are held back.
NOT_ADVISED = " (not advised)"


def not_advised(f: Finding, why: Reason) -> dict[str, str | None]:
    """The title, topic and message of `f` once its flags are held back for `why`
    (advice/recommend.py makes it information with these words): each says so."""
    return {"title": f.title + NOT_ADVISED,
            "topic": None if f.topic is None else f.topic + NOT_ADVISED,
            "message": f.message + f" Not advised: {reason(why)}."}


# --- remedies --------------------------------------------------------------------------------

_REMEDY = {
    "binary_copy": "copy the long-kept binaries with binary:copy/1 (slices of larger ones kept "
                   "in state or ETS), so the sparse carriers empty",
    "binary_copy_reverted": "once the strategy is reverted, copy the long-kept binaries with "
                            "binary:copy/1 (under a strategy without migration the copies land "
                            "in the holes of the same carriers)",
    "restart_holders": "restart or hibernate the processes that hold them (recon:bin_leak/1 "
                       "finds them; erlang:hibernate/3)",
    "gc_heaps": "garbage-collect (erlang:garbage_collect/1) or hibernate the processes whose "
                "heaps grew in the peak",
    "rebuild_table": "rebuild the table: copy its rows into a new one and delete the old "
                     "(ets:delete/1), so its rows pack into fresh carriers",
    "bound_queue": "bound the queue that {who} keeps: its own limits (length, size, expiry), "
                   "or handle it faster",
}


_REMEDY_SHORT = {
    "binary_copy": "binary:copy/1 the long-kept binaries",
    "binary_copy_reverted": "binary:copy/1 the long-kept binaries once the strategy is reverted",
    "restart_holders": "restart or hibernate their holders",
    "gc_heaps": "garbage-collect or hibernate the grown heaps",
    "rebuild_table": "rebuild the table",
    "bound_queue": "bound the queue of {who}",
    "gc_holder": "garbage-collect or hibernate {who}",
    "bound_live_holder": "bound {who} (its binaries are live)",
    "hibernate_idle": "hibernate the {who} idle processes",
}


def remedy_short(r: Remedy) -> str:
    return remedy_code_short(r.code, r.who)


#: A holder's remedy where no name of the holder is at hand: the thing named, never "it".
_REMEDY_SHORT_UNNAMED = {
    "bound_queue": "bound the queue its holder keeps",
    "gc_holder": "garbage-collect or hibernate the process holding the binaries",
    "bound_live_holder": "bound the process holding the binaries (they are live)",
    "hibernate_idle": "hibernate the idle processes",
}


def remedy_code_short(code: str, who: str | None = None) -> str:
    """A remedy in a few words, from its code (a recommendation's JSON keeps the code) and the
    process it is about (`who`, a holder's own remedy)."""
    text = _REMEDY_SHORT.get(code, code.replace("_", " "))
    if "{who}" not in text:
        return text
    return text.format(who=who) if who else _REMEDY_SHORT_UNNAMED.get(code, text.format(
        who="the process"))


def remedy(r: Remedy) -> str:
    if r.code == "gc_holder":
        return f"garbage-collect or hibernate {r.who} (idle, it pins dead references)"
    if r.code == "bound_live_holder":
        return (f"bound {r.who}: it keeps its binaries live (a cache or a queue); a collection "
                "releases nothing")
    if r.code == "hibernate_idle":
        return (f"garbage-collect or hibernate the {r.who} idle processes (erlang:hibernate/3; "
                "gen_server: {hibernate_after, Ms})")
    return _REMEDY.get(r.code, r.code).format(who=r.who)


def releases(r: Remedy) -> str:
    return around("up to " if r.bound else "", human(r.releases))


def entry_why(e: NoFlagEntry) -> str:
    out = reason(e.cause) + "."
    if e.pool:
        out += (f" {e.pool['carriers']} pooled carriers ({human(e.pool['allocated'])}) hold "
                f"{human(e.pool['used'])} of data.")
    return out


#: What a revert to OTP's default costs (a recommendation's `cost`).
REVERT_COST = "none beyond a restart: OTP's own default"


def flags_text(flags: Iterable[Flag]) -> str:
    """Flags as pasted, one after the other ("+MBas aobf +MBacul 0")."""
    return " ".join(x.render() for x in flags)


def revert_reason(r: Revert) -> str:
    """Why a revert is advised (a recommendation's `reason`)."""
    return f"reverts {flags_text(r.flags_in_force)} ({r.check}) to OTP's default"


def trades(n: dict[str, Any]) -> str:
    """What the advised speed trades buy and cost (reason `speed_trade`)."""
    parts = []
    for t in n.get("trades") or []:
        if t["rule"] == "R6":
            parts.append(f"up to {human(t['resident'])} more cached segments resident (not in "
                         f"carrier bytes) for {t['misses_per_second']:.0f} mseg cache misses/s "
                         "measured")
        else:
            rate = (f" of {t['calls_per_second']:.0f}/s measured"
                    if t["calls_per_second"] is not None else "")
            parts.append(f"{t['allocator']} carrier bytes {change(t['carriers_change'])} "
                         f"({human(t['carriers_delta'])} in the replay) for carrier calls "
                         f"{change(t['calls_change'])}{rate}")
    return "; ".join(parts)


def revert_short(r: Revert) -> str:
    """A revert in a why line: the setting, its default, the figure and the floor."""
    was, to = flags_text(r.flags_in_force), flags_text(r.flags)
    if r.prediction is None or not r.prediction.reproduces:
        return f"reverting `{was}` to `{to}` is not predicted ({r.not_predicted or 'no model'})"
    verdict = "advised" if r.advised else f"below the {share(MIN_GAIN)} floor"
    return f"reverting `{was}` to `{to}` predicts {figure(r.prediction)}: {verdict}"


def revert(r: Revert) -> str:
    """A setting the lint calls wrong, and what reverting it is predicted to do."""
    was, to = flags_text(r.flags_in_force), flags_text(r.flags)
    head = f"`{was}` ({r.check}) reverted to OTP's default `{to}`"
    if r.prediction is None:
        return f"{head}: not predicted ({r.not_predicted})"
    p = r.prediction
    if not p.reproduces:
        return f"{head}: the model does not reproduce {r.allocator} ({calibration(p)})"
    if p.futures_differ():
        return f"{head}: {futures(p)} ({calibration(p)})"
    verb = "advised" if r.advised else f"below the {share(MIN_GAIN)} a restart is for"
    return f"{head}: predicted {figure(p)}, {verb}"


def flags_in_force(fin: FlagsInForce) -> str:
    """The flags in force, as the snapshot shows them."""
    if fin.flags is not None:
        return f"`{fin.flags}`" if fin.flags else "OTP defaults (no +M flag changes them)"
    opts = "; ".join(f"{n} " + " ".join(f"{k} {format_option(k, x)}" for k, x in o.items())
                     for n, o in fin.options.items() if o)  # fmt: skip
    return f"{in_force_note(fin)}: {opts}"


def in_force_note(fin: FlagsInForce) -> str | None:
    if fin.modelled:
        return None
    if fin.release is None:
        return "the source does not record the OTP release, so its defaults are not known"
    return f"OTP {fin.release} is not modelled (OTP 25/26/27 are): its options as reported"


# --- the verdict -----------------------------------------------------------------------------


#: A part of a first line: its words, or alternatives from the fullest to the shortest.
Part = str | list[str]


def _parts(state: str, parts: list[Part]) -> list[Part]:
    return [f"{state}: {parts[0]}", *parts[1:]]


def fit(parts: list[Part], width: int = HEADLINE_MAX) -> str:
    """A first line of `width` characters at most: the first part (the state and the bytes at
    stake, built short), then each other part, in order, in the fullest of its alternatives
    that fits whole, until one does not. Nothing is cut: a first part wider than `width` is
    returned whole, for the caller to wrap at its words."""
    first = parts[0]
    line = first if isinstance(first, str) else first[-1]
    for p in parts[1:]:
        alts = [p] if isinstance(p, str) else p
        pick = next((a for a in alts if len(line) + 2 + len(a) <= width), None)
        if pick is None:
            break
        line += f"; {pick}"
    return line


def headline_parts(v: Verdict) -> list[Part]:
    """The first line's parts, most needed first: `fit` keeps as many as a width holds (the
    terminal's at 80 columns, HEADLINE_MAX in the JSON and on the pages)."""
    r = v.reasons[0] if v.reasons else Reason("none")
    n = r.numbers
    if v.state == CHANGE:
        if r.code == "frees":
            return _parts(CHANGE, [f"{human(n['unused'])} of {n['allocator']} unused",
                                   f"paste {flag_count(len(v.advised))} below",
                                   f"predicted {change(-n['saving'])}"])
        if r.code == "reverts":
            return _parts(CHANGE, [f"`{n['flags_in_force']}` leaves {human(n['unused'])} of "
                                   f"{n['allocator']} unused", "revert it",
                                   f"predicted {change(-n['saving'])}"])
        return _parts(CHANGE, [f"paste {flag_count(len(v.advised))} below: a speed trade",
                               trades(n)])
    if v.state == IN_FORCE:
        return _parts(IN_FORCE, [f"{human(n['unused'])} of {n['allocator']} still unused under "
                                 "the rules' own flags", "nothing to paste"])
    if v.state == NO_FLAG:
        if r.code == "idle_heaps":
            return idle_headline(n)
        if r.code == "runaway":
            return _parts(NO_FLAG, [f"the node died of one runaway allocation in "
                                    f"{n['allocator']}", "bound its holder (below)"])
        rem = n.get("remedies", 0)
        return _parts(NO_FLAG, [f"{human(n['unused'])} of {n['allocator']} unused, no +M flag "
                                "releases it", f"{rem} remed{'ies' if rem != 1 else 'y'} below"])
    if v.state == UNDECIDED:
        if r.code == "futures_differ":
            return _parts(UNDECIDED, [f"{human(n['unused'])} of {n['allocator']} unused",
                                      [f"flags give {change(-n['turnover'])} if it turns over, "
                                       f"{change(-n['kept'])} if kept",
                                       f"flags give {change(-n['turnover'])} to "
                                       f"{change(-n['kept'])}"]])
        if r.code == "below_gain":
            return _parts(UNDECIDED, [f"{human(n['unused'])} of {n['allocator']} unused",
                                      [f"flags give {change(-n['best'])} if stragglers, "
                                       f"{change(-n['saving'])} if scattered",
                                       f"flags give {change(-n['best'])} to "
                                       f"{change(-n['saving'])}"]])
        return _parts(UNDECIDED, [f"{human(n['unused'])} of {n['allocator']} unused",
                                  "the model does not reproduce it", "no flag judged"])
    if r.code == "nothing_at_stake":
        return _parts(HEALTHY, [f"nothing at stake: at most {human(n['allocator_unused'])} "
                                f"unused in {n['allocator']}",
                                "nothing to do",
                                f"no allocator reaches the {human(n['floor'])} flags are "
                                "weighed from"])
    return _parts(HEALTHY, [f"the allocators use {pct(v.total.usage)} of "
                            f"{human(v.total.allocated)} of carriers", "nothing to do",
                            "no rule's threshold is crossed"])


def headline(v: Verdict) -> str:
    """The first line: state, bytes at stake, the one thing to do (HEADLINE_MAX at most)."""
    return fit(headline_parts(v))


def _idle_release(n: dict[str, Any], key: str) -> str:
    return around("up to " if n["bound"] else "~", human(n[key]))


def idle_headline(n: dict[str, Any]) -> list[Part]:
    """NO FLAG HELPS for dead data in idle heaps (reason `idle_heaps`, advice/holders.py
    idle_verdict): the bytes a collection releases, of the node, and the group to act on."""
    first = f"{_idle_release(n, 'releases')} of {human(n['node_bytes'])} is dead in idle heaps"
    g, w = n["group"], n.get("waiting_in")
    # where they wait tells more than a group spawned from a fun (erlang:apply/2); fullest first
    acts = ([f"hibernate {g} in {w}", f"hibernate those in {w}"] if w else []) + [
        f"hibernate {g}", "hibernate them (below)"]
    return _parts(NO_FLAG, [first, acts])


def idle_why(n: dict[str, Any], total: Total) -> list[str]:
    """The why lines of idle_headline: the allocators' view, and how the figure is known."""
    how = (f"the GC probe collected {n['probed']} of them (it changed those)" if n["probed"]
           else "a bound: their heaps beyond the minimum; --gc-probe N measures it")
    idle = ("did nothing between two reads" if n["idle_by"] == "two reads"
            else "were idle when read")
    return [f"Why: the allocators use {pct(total.usage)} of {human(total.allocated)}, but "
            f"{count(n['count'])} processes {idle} and keep heaps that grew once: words in use "
            "since a collection are not live data.",
            f"What does: collect or hibernate {n['group']} ({count(n['group_count'])} idle"
            + (f", waiting in {n['waiting_in']}" if n.get("waiting_in") else "") + "): "
            f"{_idle_release(n, 'group_releases')}, {how}."]


def why(v: Verdict) -> list[str]:
    """At most WHY_MAX short lines under the headline, most telling first."""
    out: list[str] = []
    if v.truncated_instances is not None:
        out.append(f"The input is truncated: judged from the {v.truncated_instances} allocator "
                   "instances read before the cut.")
    r = v.reasons[0] if v.reasons else Reason("none")
    if v.state == CHANGE:
        for rec in _by_finding(v):
            p = rec.prediction
            flags = f"{rec.flag} {rec.value}" if len(_same(v, rec)) == 1 else \
                " ".join(f"{x.flag} {x.value}" for x in _same(v, rec))
            if p is None:
                out.append(f"{flags}: {rec.rule}, no prediction.")
            elif rec.trade_off:
                out.append(f"{flags} ({rec.rule}) trades memory for speed: "
                           f"{trades(v.reasons[0].numbers)}.")
            else:
                out.append(f"{flags}: {p.allocator} unused {figure(p)}; {judged_short(p)}.")
        if v.no_flag_helps:
            out.append(f"No flag releases {human(sum(e.unused for e in v.no_flag_helps))} in "
                       + ", ".join(e.allocator for e in v.no_flag_helps) + " (below).")
    elif v.state == IN_FORCE:
        e = v.no_flag_helps[0]
        out.append(f"{e.allocator} already runs {flags_text(e.flags_in_force)}: {entry_why(e)}")
        if v.rss_lazyfree:
            out.append(f"Of {human(v.rss)} resident, {human(v.rss_lazyfree)} is lazily freed "
                       "(MADV_FREE): the OS takes it back when it needs memory.")
    elif v.state == UNDECIDED:
        if r.code == "futures_differ":
            out.append(f"Unknown: {r.numbers['known_by']}.")
            if r.numbers.get("command") and "recommend NODE" not in r.numbers["known_by"]:
                out.append(f"Tell them apart: {r.numbers['command']}.")
        elif r.code == "below_gain":
            out.append("Unknown: whether the survivors are a few stragglers per carrier or "
                       "scattered over every one; counters alone cannot tell.")
        else:
            out.append(f"Why: {reason_short(r)}.")
        for rv in v.reverts:  # a setting the lint calls wrong is never left unsaid
            out.append(f"Lint: {revert_short(rv)}.")
        if r.code == "below_gain":
            out.append("What tells: the carrier map (`recommend NODE` reads it live).")
        elif r.code == "not_reproduced":
            out.append("What tells: the node's carriers (`recommend NODE` reads them live) or its "
                       "own allocations (`recommend NODE --trace-for 30`, as root).")
    elif v.state == NO_FLAG:
        if r.code == "idle_heaps":
            out += idle_why(r.numbers, v.total)
        elif r.code == "runaway":
            out.append(runaway_why(r.numbers))
        elif v.no_flag_helps:
            e = v.no_flag_helps[0]
            cause = reason_short(e.held_back[0]) if e.held_back else reason_short(e.cause)
            out.append(f"Why: {cause}.")
            for rv in v.reverts:
                out.append(f"Lint: {revert_short(rv)}.")
            if e.remedies:
                out.append(f"What does: {remedy_short(e.remedies[0])} "
                           f"({releases(e.remedies[0])}).")
    elif v.state == HEALTHY and r.code == "nothing_at_stake":
        n = r.numbers
        out.append(f"Why: {human(n['unused'])} of {human(n['allocated'])} unused, spread out: "
                   f"no allocator holds the {human(n['floor'])} a +M flag is weighed from, "
                   "and flags act per allocator.")
        for rv in v.reverts:  # the lint's setting, with its revert weighed
            out.append(f"Lint: {revert_short(rv)}.")
    if v.holders:  # always said: room is made for it
        lead = ("Processes, not allocator placement, hold the memory: " if v.state == HEALTHY
                else "Who holds the memory: ")
        out = [*out[:WHY_MAX - 1], lead + "; ".join(v.holders) + "."]
    return out[:WHY_MAX]


def runaway_why(n: dict[str, Any]) -> str:
    """Why one runaway allocation killed the node, short (rules.py's OOM finding says it in
    full): a size computed negative, one beyond the address space, or one holder that held
    most of the carriers; and its bound, not a flag."""
    fix = ("bound it (a heap: max_heap_size, erlang:process_flag/2; a queue or cache: its own "
           "limit). No +M flag helps.")
    size, bits = n.get("size"), 8 * (n.get("wordsize") or 8)
    if isinstance(size, int) and size >= 1 << (bits - 1):
        return (f"The size asked, read as signed, is {size - (1 << bits)}: computed negative, "
                f"one runaway allocation (a bug or an unbounded term); {fix}")
    if n.get("sbcs_blocks"):
        k = n["sbcs_blocks"]
        return (f"{k} block{'s' if k != 1 else ''} of its single-block carriers held "
                f"{human(n['sbcs_allocated'])} of the node's {human(n['allocated'])}: one "
                f"runaway holder; {fix}")
    if isinstance(size, int):
        return f"{human(size)} is more than the machine can map: one runaway allocation; {fix}"
    return f"One runaway allocation; {fix}"


def _same(v: Verdict, rec: Any) -> list[Any]:
    """The advised flags predicted together with `rec` (one finding's flags)."""
    return [x for x in v.advised if x.rule == rec.rule and x.allocator == rec.allocator]


def _by_finding(v: Verdict) -> list[Any]:
    seen, out = set(), []
    for rec in v.advised:
        if (rec.rule, rec.allocator) not in seen:
            seen.add((rec.rule, rec.allocator))
            out.append(rec)
    return out


def lines(v: Verdict) -> list[str]:
    """The headline and its why lines."""
    return [headline(v), *why(v)]


# --- a crash dump's cause of death: its first line (issue 24; issue 26 item 1) ---------------

_DEATH_LABEL = {"out_of_memory": "OUT OF MEMORY", "boot_failure": "DIED AT BOOT",
                "crash": "CRASHED", "requested": "DUMP ON REQUEST",
                "unknown": "CAUSE UNKNOWN"}  # fmt: skip
#: The most of a slogan a why line repeats (the dying program's text: --json has it whole).
SLOGAN_MAX = 160


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def clip(text: str, room: int) -> str:
    """`text` in `room` characters: whole, or cut where a word or a term ends (never inside a
    number) with "..." after it."""
    if len(text) <= room:
        return text
    stop = max(room - 3, 1)
    for ends in (lambda i: text[i - 1] in ",;)]}" or text[i] == " ",  # after a term or a word
                 lambda i: not text[i - 1].isalnum() and not text[i].isdigit()):
        i = next((i for i in range(stop, 0, -1) if ends(i)), None)
        if i is not None:
            return text[:i].rstrip(" ,;") + "..."
    return text[:stop] + "..."


def _slogan_room(head: str, width: int) -> int:
    """The characters a slogan has after `head` in a line of `width` (death_line clips it)."""
    return max(width - len(head), 12)


def death_line(d: Death, width: int = HEADLINE_MAX) -> str:
    """The cause of death in one line of at most `width` characters (HEADLINE_MAX), before the
    verdict's: what killed the node and, out of memory, the bytes it asked for."""
    label = _DEATH_LABEL[d.kind]
    if d.kind == "out_of_memory":
        parts = [f"{label}: {d.allocator} could not get {human(d.size or 0)}"]
        if d.memory_total:
            parts.append(f"the node held {human(d.memory_total)}")
        if d.block_type:
            parts.append(f"a {d.block_type} block")
        return fit(parts, width)
    if d.kind in ("boot_failure", "crash"):
        head = f"{label}, not of memory: "
        return head + clip(_printable(d.slogan), _slogan_room(head, width))
    if d.kind == "requested":
        return fit([f"{label}: the node did not crash", "its state is a sample like any other"],
                   width)
    return f"{label}: " + ("the dump names no cause of death" if not d.slogan
                           else "the dump's slogan is empty")


def death_why(d: Death, width: int = HEADLINE_MAX) -> list[str]:
    """The line under the cause of death: who asked for the memory, or what the allocator
    state below is worth, and the slogan where the first line had to cut it."""
    out: list[str] = []
    slogan = _printable(d.slogan)
    cut = d.kind in ("boot_failure", "crash") and len(slogan) > _slogan_room(
        f"{_DEATH_LABEL[d.kind]}, not of memory: ", width)  # death_line clipped it
    if cut:
        out.append(f"Slogan: {clip(slogan, SLOGAN_MAX)}.")
    if d.kind == "out_of_memory" and d.holder is not None:
        h = d.holder
        verb = (("was collecting its garbage" if h.state == "garbing" else "was running")
                if h.role == "allocating" else "was the largest")
        parts = [f"heap {human(h.total_heap)}" if h.total_heap is not None else "",
                 f"binaries {human(h.binary)}" if h.binary else "",
                 f"{h.message_queue_len} messages queued" if h.message_queue_len else ""]
        held = ", ".join(p for p in parts if p)
        out.append(f"Process {h.label()} {verb}, holding {human(h.memory)}"
                   + (f" ({held})" if held else "")
                   + (f" in {h.current_function}" if h.current_function else "") + ".")
    elif d.kind == "boot_failure":
        out.append("The allocator state is that of a node that never ran its load.")
    elif d.kind == "crash":
        out.append("The allocator state is what the node held when it stopped.")
    elif d.kind == "requested":
        out.append("Requested by hand (SIGUSR1, or erlang:halt/1 with a slogan).")
    return out


# --- the analysis of one snapshot (analyzer/analysis.py): the terminal, the pages, the report --


class Answered(Protocol):
    """What the answer says before the verdict: an `Analysis`, or the recommendation's records
    (advice/recommend.py `Recommended`)."""

    @property
    def death(self) -> Death | None: ...
    @property
    def coverage(self) -> Coverage | None: ...
    @property
    def categories(self) -> MemoryPicture | None: ...


def cause_of_death(a: Answered, width: int = HEADLINE_MAX) -> list[str]:
    """A dump's cause of death in a line of `width` characters at most, and its why."""
    if a.death is None:
        return []
    return [death_line(a.death, width), *death_why(a.death, width)]


def read_lines(a: Answered, holder: bool = True) -> list[str]:
    """What a cut input did not let us read, and the largest holder where it is notable (and
    `holder`: not where the verdict's why names the holders already)."""
    lines = []
    cov = a.coverage
    if cov is not None and cov.partial:
        lines.append("PARTIAL: the input is cut short. Read: " + "; ".join(cov.read)
                     + ". Not read: " + ("; ".join(cov.not_read) or "the rest") + "."
                     + (" Flags in force are unknown for " + ", ".join(cov.flags_unknown)
                        + "." if cov.flags_unknown else ""))
    c = a.categories
    said = a.death.holder.pid if a.death and a.death.holder else None  # named above
    if holder and c is not None and c.largest_notable and c.largest is not None and not (
            said and c.largest.pid == said):
        lines.append(holder_sentence(c.largest, c.largest_share))
    return lines


def picture_lines(a: Analysis) -> list[str]:
    """The container, the tables taken by limits and known VM defects: one line each."""
    lines = []
    if a.container is not None:
        lines.append(a.container.message)
        lines += [f"note: {n}" for n in a.container.notes]
    lines += [x.message for x in a.limits]
    lines += [x.message for x in a.defects]
    return lines


def holder_sentence(h: CategoryHolder, share: float | None = None) -> str:
    """The largest holder in words: 'ETS table mnesia_transient_decision holds 156.2 MiB, 32.0%
    of erlang:memory(total), the largest single holder (3 tables of that name hold ...).', or
    '10,000 processes spawned as erlang:apply/2, most waiting in feeley:link_of/3 hold
    330.2 MiB, ...' for a process group."""
    if h.kind == "process_group":
        s = f"{holder_label(h)} hold {human(h.bytes)}"
        if share is not None:
            s += f", {pct(share)} of erlang:memory(total), the largest holder"
        rest = group_facts(h)  # its spawn call is said by the label
        return s + (f" ({', '.join(rest)})" if rest else "") + "."
    what = {"process": "Process", "ets_table": "ETS table", "atom": "The atom table",
            "code": "Loaded code", "binary": "Process", "origin": "NIF or driver",
            "port": "Port"}[h.kind]
    # instrument's histograms give a lower bound (analyzer/categories.py _origin_holders)
    least = "at least " if h.kind in ("origin", "port") else ""
    s = (f"{what} holds {human(h.bytes)}" if h.kind in ("atom", "code")
         else f"{what} {h.name} holds {least}{human(h.bytes)}")
    if share is not None:
        s += f", {pct(share)} of erlang:memory(total), the largest single holder"
    if h.siblings > 1:
        s += (f" ({h.siblings} tables of that name hold {human(h.siblings_bytes)} "
              "together)")
    return s + "."


def holder_label(h: CategoryHolder, short: bool = False) -> str:
    """A holder's name in words: a process group with its member count, named by its initial
    call or, for a spawn call that says nothing (analyzer/categories.py GENERIC_CALLS), by
    where its members wait; `short`, as a narrow table cell: 'feeley:link_of/3 ×10,000'."""
    if h.kind != "process_group":
        return str(h.name)
    if short:
        return f"{shorten(str(h.name), 16)} ×{count(h.members)}"
    if h.spawned_as is not None:  # named by where the members read wait, mostly
        return f"{count(h.members)} processes spawned as {h.spawned_as}, most waiting in {h.name}"
    return f"{count(h.members)} processes of {h.name}"


def analysis_lines(a: Analysis, short: bool = False) -> list[str]:
    """The totals in words, and with `short` only they and the OS's view (the short output's
    table names the allocator with the most unused bytes)."""
    t, os_ = a.totals, a.os
    lines = [
        f"The allocators hold {human(t.allocated)} of carriers and use "
        f"{human(t.used)} of them "
        f"(usage {pct(t.usage)}): {human(t.unused)} is reserved but holds no data."
    ]
    types = a.allocator_types
    if types and types[0].unused > 0 and not short:
        w = types[0]
        lines.append(
            f"Most of the unused space is in {w.allocator}: {human(w.unused)} unused of "
            f"{human(w.allocated)} (usage {pct(w.usage)})."
        )
    worst = next((m for m in a.carriers.allocators if m.classification.kind != COMPACT), None)
    if worst is not None and not short:
        cl = worst.classification
        lines.append(f"Inside {worst.allocator}'s carriers: {cl.kind}: {cl.reason}.")
    if os_.rss is not None:
        gap = os_.rss_minus_allocated
        lines.append(
            f"The OS sees {human(os_.rss)} resident; the allocators account for "
            f"{human(os_.allocated_all)} of it"
            + (
                f", so {human(gap)} is outside them (NIFs, drivers, the mseg cache, code)."
                if gap is not None and gap > 0
                else "."
            )
        )
        if os_.rss_lazyfree and not short:
            cg = a.container
            where = (f" ({human(cg.available)} in the node's cgroup, before its limit; "
                     f"{human(os_.mem_available)} on this host)"
                     if cg is not None and cg.available is not None and os_.mem_available else
                     f" ({human(os_.mem_available)} on this host)"
                     if os_.mem_available else "")
            lines.append(
                f"Of that resident memory, {human(os_.rss_lazyfree)} is lazily freed "
                "(MADV_FREE, e.g. by acful): the OS takes it back when it needs memory, so it "
                f"counts in MemAvailable{where} while VmRSS still shows it."
            )
    return lines


def byte_range(r: tuple[int, int | None]) -> str:
    """A byte range of a free-block histogram's bucket, "2.0 MiB-4.0 MiB", open above as
    "32.0 MiB or more" (the last bucket, analyzer/carriers.py `largest_free`)."""
    return f"{human(r[0])} or more" if r[1] is None else f"{human(r[0])}-{human(r[1])}"


def shorten(s: str, n: int) -> str:
    """`s` in `n` characters at most, an ellipsis for what is cut (a narrow table cell)."""
    return s if len(s) <= n else s[:n - 1] + "…"


# ---- the diff (advice/diff.py): before and after a change -----------------------------------


def diff_headline(outcome: str, a: Numbers, b: Numbers, load: float | None,
                  judged: float | None, per_used: tuple[float | None, float | None],
                  small: bool) -> str:
    """The diff's first line: the outcome with the unused bytes A → B, or per used byte where
    the load moved (`load`, said first); `judged`, the change the outcome weighs; `small`:
    what B holds unused is too little to matter."""
    du = b.unused - a.unused
    still = f"{human(b.unused)} still unused"
    if load is None:
        moved = (f"unused {human(a.unused)} → {human(b.unused)}"
                 + (f" ({change(du / a.unused, 1)})" if a.unused else ""))
        less = f"{human(-du)} less unused" + (f" ({change(judged, 1)})" if judged is not None
                                              else "")
    else:
        ra, rb = (f"{r:.2f}" if r is not None else "nothing used" for r in per_used)
        moved = (f"unused per used byte {ra} → {rb}"
                 + (f" ({change(judged, 1)})" if judged is not None else ""))
        less = moved
    if outcome == "unchanged":
        head = (f"no change: {human(b.unused)} unused before and after"
                + (" (too little to matter)" if small else ""))
    elif outcome == "worse":
        head = (f"worse: unused grew by {human(du)} ({moved})" if load is None and du > 0
                else f"worse: {moved}")
    elif outcome == "helped":
        head = f"helped: {moved}"
    elif outcome == "helped_partly":
        head = f"helped partly: {less}, but {still}"
    elif load is None:
        head = (f"barely helped: {still} (only {human(-du)} less"
                + (f", {change(judged, 1)})" if judged is not None else ")"))
    else:
        head = f"barely helped: {still} ({moved})"
    if load is not None:  # the load first: then what the flags did for the data held
        head = (f"the load moved (used {human(a.used)} → {human(b.used)}, {change(load, 1)}); "
                f"judged per used byte: {head}")
    return head


def diff_lines(a: Numbers, b: Numbers, load: float | None, top: TypeDiff | None,
               grew: list[TypeDiff], worst: TypeDiff | None, flags_changed: bool) -> list[str]:
    """The diff's lines under its headline: every allocator A → B, the raw unused bytes where
    the load moved, the type `top` with most of the change, the types that `grew` while the
    total did not, the `worst` left in B, and whether any flag changed."""
    lines = [f"carriers {human(a.carriers_size)} → {human(b.carriers_size)}, used "
             f"{human(a.used)} → {human(b.used)}, usage "
             f"{pct(a.usage)} → {pct(b.usage)} (all allocators)"]
    if load is not None:
        lines.append(f"raw unused {human(a.unused)} → {human(b.unused)}"
                     + (f" ({change((b.unused - a.unused) / a.unused, 1)})" if a.unused else "")
                     + ": not the flags' doing alone, the data held changed too")
    if top is not None and top.a is not None and top.b is not None:
        lines.append(f"most of the change is in {top.allocator}: unused "
                     f"{human(top.a.unused)} → {human(top.b.unused)}, usage "
                     f"{pct(top.a.usage)} → {pct(top.b.usage)}")
    for t in grew:
        if t.a is not None and t.b is not None:
            lines.append(f"but unused grew in {t.allocator}: {human(t.a.unused)} → "
                         f"{human(t.b.unused)}")
    if worst is not None and worst.b is not None:
        lines.append(f"the most unused in B: {worst.allocator}, {human(worst.b.unused)}"
                     f" of {human(worst.b.carriers_size)} (usage {pct(worst.b.usage)})")
    if not flags_changed:
        lines.append("no +M option differs between A and B: what changed is the workload or "
                     "the time, not the flags")
    return lines


def diff_notes(sa: Side, sb: Side) -> list[str]:
    """What makes A and B not a like-for-like pair, said before any number."""
    notes = []
    if sa.node != sb.node:
        notes.append(f"different nodes: A is {sa.node}, B is {sb.node}; the difference "
                     "mixes their workloads with any flag change")
    elif sa.os_pid and sb.os_pid and sa.os_pid != sb.os_pid:
        notes.append(f"{sa.node} restarted between A and B (OS pid {sa.os_pid} → "
                     f"{sb.os_pid}): B started afresh")
    va, vb = (sa.otp_release, sa.erts_version), (sb.otp_release, sb.erts_version)
    if va != vb and all(va) and all(vb):
        notes.append(f"different OTP versions: A runs OTP {va[0]} (erts {va[1]}), B OTP {vb[0]} "
                     f"(erts {vb[1]}); defaults and strategies may differ")
    elif va != vb:
        which = " and ".join(t for t, v in (("A", va), ("B", vb)) if not all(v))
        notes.append(f"the OTP version of {which} is unknown (a recon file does not say): "
                     "a change of OTP between them cannot be ruled out")
    return notes
