"""Where the flags go, and the human output of `beamalloc recommend`.

The paste formats (vm.args, ERL_FLAGS, RabbitMQ, ejabberd, mix, a bare line) and where each
goes have one home, beamalloc/pastes.py; `paste()` renders a recommendation through it.
The human output teaches like recon_alloc's docs: verdict, each flag with its evidence and
cost, the lint, then the ready-to-paste block (`details`). By default it is short (issue 26 item
2): the answer, the one table the decision rests on, the top holders, the paste block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from beamalloc import pastes
from beamalloc.advice import wording
from beamalloc.advice.records import Prediction
from beamalloc.citations import link
from beamalloc.flags import UINT_MAX
from beamalloc.pastes import FORMATS as FORMATS  # the `--format` choices, for webui/
from beamalloc.reporters import holders
from beamalloc.reporters.analyze import (
    DETAILS_HINT,
    answer,
    top_holders,
)
from beamalloc.reporters.table import Col, print_table, prose
from beamalloc.units import human, pct

if TYPE_CHECKING:
    from beamalloc.advice.recommend import Document


def paste_note(r: dict[str, Any]) -> str | None:
    """Why there is nothing to paste where the lint calls a setting in force wrong: the verdict
    weighed reverting it, and the paste says so rather than disagree with the lint."""
    held = [rv for rv in r["verdict"]["reverts"] if not rv["advised"]]
    return f"{held[0]['text']}; see the verdict" if held else None


def paste(r: dict[str, Any], fmt: str) -> str:
    """The paste block of a recommendation (advice/recommend.py's result) for `fmt`."""
    return paste_block([f"{x['flag']} {x['value']}" for x in r["recommendations"]], fmt,
                       paste_note(r))


def paste_block(parts: Sequence[str], fmt: str, note: str | None = None) -> str:
    """The text to paste for `fmt`, from the flags one by one (beamalloc/pastes.py)."""
    return pastes.render(parts, fmt, note)


def _num(k: str, v: Any) -> str:
    if isinstance(v, bool) or v is None:  # never a Python repr (issue 26 item 2)
        return {True: "yes", False: "no", None: "-"}[v]
    if isinstance(v, float) and ("usage" in k or "share" in k or "rate" in k or k == "imbalance"):
        return pct(v)
    sized = ("allocated", "used", "unused", "size", "sbct", "lmbcs", "block", "rss", "gap")
    counted = k.endswith(("blocks", "calls", "carriers"))
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if is_int and not counted and any(s in k for s in sized):
        return "infinity" if v >= UINT_MAX else human(v)  # erts's ~0, one way everywhere
    return str(v)


def evidence_line(ev: dict[str, Any]) -> str:
    return ", ".join(f"{k} {_num(k, v)}" for k, v in ev.items() if not isinstance(v, list))


def verdict(r: dict[str, Any]) -> str:
    """The verdict line: its state first (HEALTHY, CHANGE FLAGS, FLAGS IN FORCE, NO FLAG HELPS),
    the bytes at stake and the one thing to do (advice/wording.py)."""
    return str(r["verdict"]["headline"])


def verdict_lines(r: dict[str, Any]) -> list[str]:
    """The verdict line and its short lines of why, as the wording module gave them."""
    return [verdict(r), *r["verdict"]["why"]]


def in_force_line(v: dict[str, Any]) -> str:
    """The flags in force, as the snapshot shows them (advice/wording.py said it)."""
    return str(v["flags_in_force"]["text"])


def flags_line(r: dict[str, Any], short: bool = False) -> str:
    """The flags in force; on a cut input, unknown for what was not read (never "the
    defaults"); `short`: the options of a release not modelled left to --details."""
    v = r["verdict"]
    unknown = (r.get("coverage") or {}).get("flags_unknown")
    fin = in_force_line(v)
    if short and v["flags_in_force"]["flags"] is None:
        fin = f"{v['flags_in_force']['note']} (--details lists them)"
    if unknown:  # a cut input: what was not read runs flags nobody knows, not the defaults
        if v["flags_in_force"]["flags"] == "":
            fin = "no +M flag in the allocators read"
        fin += f"; unknown for {', '.join(unknown)} (not read)"
    return fin


def predicted_line(p: dict[str, Any]) -> str:
    """A prediction's figure with its band and calibration error, then the predictor's line."""
    rec = Prediction.from_dict(p)
    return f"{wording.figure(rec)} unused; {p['summary']}"


def render(r: Document, console: Console, fmt: str = "vm.args",
           details: bool = False) -> None:
    """The answer first; then the short output, or with `details` everything there is."""
    def say(line: str, style: str | None = None) -> None:
        """A line of prose, wrapped at the console's width under its own indent."""
        if line.startswith("\n"):
            console.print()
            line = line[1:]
        lead = line[:len(line) - len(line.lstrip(" "))]
        prose(console, line.lstrip(" "), style or "", indent=lead, hang="  ")

    cited: dict[str, str] = {}  # citation -> the shipped doc's link, listed once at the end

    def cite(citation: str) -> str:
        if uri := link(citation):
            cited.setdefault(citation, uri)
        return citation

    v = r["verdict"]
    answer(r.records, v, console)  # the cause of death, a partial read, the verdict: first
    otp = f"OTP {r['otp_release']}" if r["otp_release"] else "OTP release not recorded"
    say(f"{r['node']}  {otp}  source {r['source']}", "dim")
    if not details:
        _short(r, console, fmt)
        return
    say(f"Flags in force: {flags_line(r)}", style="dim")
    for e in v["no_flag_helps"]:
        say(f"\nNo flag shown to help {e['allocator']} ({human(e['unused'])} unused of "
            f"{human(e['allocated'])}, usage {pct(e['usage'])}; in bytes {e['unused']:,} of "
            f"{e['allocated']:,}):", style="bold")
        for why in e["flags_held_back"]:
            say(f"  held back: {why}")
        if e["flags_in_force"]:
            say(f"  already in force: {' '.join(e['flags_in_force'])}")
        say(f"  why: {e['why']}")
        for rem in e["remedies"]:
            bound = "up to " if rem["bound"] else ""
            say(f"  what does: {rem['action']}: releases {bound}{human(rem['releases'])} "
                f"({'; '.join(map(cite, rem['sources']))})")
        if e.get("held_by"):
            say("  its binaries are referenced by: " + ", ".join(
                f"{h['name'] or h['pid']} ({human(h['binary_bytes'])})" for h in e["held_by"]))
    for rv in v["reverts"]:
        say(f"\nA setting the lint calls wrong: {rv['text']}.", style="bold")
    if v["rate"] is None and v["rate_unavailable"]:
        say(f"Speed trades: {v['rate_unavailable']}", style="dim")
    if r.get("processes"):
        console.print()
        holders.render(r["processes"], console)
    actions = [x for x in r["findings"] if x["level"] == "action"]
    infos = [x for x in r["findings"] if x["level"] == "info"]
    if actions:
        say("\nRecommendations (each flag, the rule that fired, its numbers, its cost):")
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for rec in r["recommendations"]:
        by_rule.setdefault(rec["rule"] + (rec["allocator"] or ""), []).append(rec)
    for fnd in actions:
        say(f"\n[{fnd['rule']}] {fnd['title']}", style="bold")
        say(f"  {fnd['message']}")
        say(f"  evidence: {evidence_line(fnd['evidence'])}", style="dim")
        recs = by_rule.get(fnd["rule"] + (fnd["allocator"] or ""), [])
        for rec in recs:
            say(f"  {rec['flag']} {rec['value']}", style="bold cyan")
            say(f"    why:  {rec['reason']}")
            say(f"    cost: {rec['cost']}")
        if recs:
            p = recs[0]["predicted"]
            what = "these flags together" if len(recs) > 1 else "this flag"
            text = predicted_line(p) if p else str(recs[0]["not_predicted"])
            say(f"  predicted ({what}): {text}", style="magenta")
        say(f"  sources: {'; '.join(map(cite, fnd['sources']))}", style="dim")
    if infos:
        say("\nInformation (below a threshold or no flag helps; nothing to set):")
        for fnd in infos:
            say(f"  [{fnd['rule']}] {fnd['title']}: {fnd['message']}")
            if fnd.get("predicted"):
                say(f"    predicted: {predicted_line(fnd['predicted'])}", style="dim")
    say("\nLint (flags in force" + (" and given" if any(
        i["where"] == "given" for i in r["lint"]) else "") + "):")  # fmt: skip
    if not r["lint"]:
        say("  nothing to report")
    for i in r["lint"]:
        say(f"  {i['level']} [{i['check']}] ({i['where']}) {i['message']}  "
                      f"({cite(i['rule'])})")  # fmt: skip
        if i.get("verdict"):
            say(f"    weighed: {i['verdict']}")
    for i in r["withheld"]:
        say(f"  withheld (our own proposal tripped the lint): {i['message']}")
    for note in r["notes"]:
        say(f"  note: {note}")
    if r["recommendations"]:
        whole = r.get("prediction")
        say(f"\nPredicted for all the flags together (node's flags in force: {in_force_line(v)}):")
        if whole:
            for run in whole["runs"]:
                say(f"  {predicted_line(run)}")
        else:
            say(f"  {r.get('not_predicted')}")
    if cited:
        # One link per document part, each alone on its line: a link cannot wrap at the width.
        say("\nDocs cited above, shipped with beamalloc:")
        for c, uri in cited.items():
            say(f"  {c}:")
            console.print(Text(f"    <{uri}>", style="dim"), soft_wrap=True)
    say(f"\nPaste ({fmt}):")
    # never wrapped: each line must reach the file or the shell whole, however long
    console.print(Text(paste(r, fmt)), soft_wrap=True)


def _short(r: Document, console: Console, fmt: str) -> None:
    """The short output under the answer: the flags in force in a line, the table the decision
    rests on, the top holders, the paste block."""
    v = r["verdict"]
    prose(console, f"Flags in force: {flags_line(r, short=True)}", "dim", indent="")
    console.print()
    if r["recommendations"]:
        # a row names its allocator: its finding's title without it, where it names it first
        titles = {(f.rule, f.allocator): f.topic if f.topic is not None and f.about is not None
                  and f.about == f.allocator else f.title for f, _, _ in r.records.findings}
        sets: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
        for x in r["recommendations"]:  # a finding's flags are predicted together
            sets.setdefault((x["rule"], x["allocator"]), []).append(x)
        rows = []
        for (rule, alloc), xs in sets.items():
            e = xs[0]["effect"] or {}
            title = titles.get((rule, alloc), "")
            rows.append(["\n".join(f"{x['flag']} {x['value']}" for x in xs),
                         f"{rule} {title}".strip(),
                         "not predicted" if not e else wording.change(-e["unused_saving"]),
                         "-" if e.get("calibration_error") is None
                         else pct(e["calibration_error"])])
        print_table(console, "The flags, their rule, and the predicted change of unused bytes", [
                        Col("flags", "left", key=True), Col("rule", "left", wrap=True),
                        Col("unused"), Col("calibration error")], rows)
    elif v["no_flag_helps"]:
        title = {"UNDECIDED": "Mostly empty: what the flags would do is not known (why above)",
                 "FLAGS IN FORCE": "Mostly empty under the rules' own flags"}.get(
                     v["state"], "Mostly empty, and no flag shown to help")
        print_table(console, title, [
            Col("allocator", "left", key=True), Col("unused"), Col("allocated"), Col("usage"),
            Col("what does", "left", wrap=True)], [[
                e["allocator"], human(e["unused"]), human(e["allocated"]), pct(e["usage"]),
                "; ".join(f"{wording.remedy_code_short(m['code'])} ("
                          f"{'up to ' if m['bound'] else ''}{human(m['releases'])})"
                          for m in e["remedies"][:1]) or "-"]
                for e in v["no_flag_helps"][:4]])
    top_holders(r.get("processes"), console)
    issues = [i for i in r["lint"] if i["level"] != "info"]
    if issues:
        prose(console, f"Lint: {', '.join(dict.fromkeys(i['check'] for i in issues))} "
              "(--details says what and why)", "yellow", indent="")
    console.print()
    console.print(Text(f"Paste ({fmt}):", style="bold"))
    # never wrapped: each line must reach the file or the shell whole, however long
    console.print(Text(paste(r, fmt)), soft_wrap=True)
    prose(console, f"{DETAILS_HINT}: each flag's rule, evidence and cost, the findings, the "
          "lint, the predictions and every holder; --json every number.", "dim", indent="")
