"""Where the flags go, and the human output of `beamalloc recommend`.

The paste formats (vm.args, ERL_FLAGS, RabbitMQ, ejabberd, mix, a bare line) and where each
goes have one home, beamalloc/pastes.py; `paste()` renders a recommendation through it.
The human output teaches like recon_alloc's docs: verdict, each flag with its evidence and
cost, the lint, then the ready-to-paste block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from beamalloc import pastes
from beamalloc.analyzer import wording
from beamalloc.analyzer.records import Prediction
from beamalloc.citations import link
from beamalloc.pastes import FORMATS as FORMATS  # the `--format` choices, for webui/
from beamalloc.reporters import holders
from beamalloc.reporters.analyze import death_lines
from beamalloc.reporters.table import prose
from beamalloc.units import human, pct


def paste_note(r: dict[str, Any]) -> str | None:
    """Why there is nothing to paste where the lint calls a setting in force wrong: the verdict
    weighed reverting it, and the paste says so rather than disagree with the lint."""
    held = [rv for rv in r["verdict"]["reverts"] if not rv["advised"]]
    return f"{held[0]['text']}; see the verdict" if held else None


def paste(r: dict[str, Any], fmt: str) -> str:
    """The paste block of a recommendation (analyzer/recommend.py's result) for `fmt`."""
    return paste_block([f"{x['flag']} {x['value']}" for x in r["recommendations"]], fmt,
                       paste_note(r))


def paste_block(parts: Sequence[str], fmt: str, note: str | None = None) -> str:
    """The text to paste for `fmt`, from the flags one by one (beamalloc/pastes.py)."""
    return pastes.render(parts, fmt, note)


def _num(k: str, v: Any) -> str:
    if isinstance(v, float) and ("usage" in k or "share" in k or "rate" in k or k == "imbalance"):
        return pct(v)
    sized = ("allocated", "used", "unused", "size", "sbct", "lmbcs", "block", "rss", "gap")
    counted = k.endswith(("blocks", "calls", "carriers"))
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if is_int and not counted and any(s in k for s in sized):
        return human(v)
    return str(v)


def evidence_line(ev: dict[str, Any]) -> str:
    return ", ".join(f"{k} {_num(k, v)}" for k, v in ev.items() if not isinstance(v, list))


def verdict(r: dict[str, Any]) -> str:
    """The verdict line: its state first (HEALTHY, CHANGE FLAGS, FLAGS IN FORCE, NO FLAG HELPS),
    the bytes at stake and the one thing to do (analyzer/wording.py)."""
    return str(r["verdict"]["headline"])


def verdict_lines(r: dict[str, Any]) -> list[str]:
    """The verdict line and its short lines of why, as the wording module gave them."""
    return [verdict(r), *r["verdict"]["why"]]


#: Terminal style of each state: green only where nothing is to be done.
STATE_STYLE = {"HEALTHY": "green", "CHANGE FLAGS": "yellow", "FLAGS IN FORCE": "cyan",
               "NO FLAG HELPS": "red", "UNDECIDED": "magenta"}  # fmt: skip


def in_force_line(v: dict[str, Any]) -> str:
    """The flags in force, as the snapshot shows them (analyzer/wording.py said it)."""
    return str(v["flags_in_force"]["text"])


def predicted_line(p: dict[str, Any]) -> str:
    """A prediction's figure with its band and calibration error, then the predictor's line."""
    rec = Prediction.from_dict(p)
    return f"{wording.figure(rec)} unused; {p['summary']}"


def render(r: dict[str, Any], console: Console, fmt: str = "vm.args") -> None:
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

    otp = f"OTP {r['otp_release']}" if r["otp_release"] else "OTP release not recorded"
    say(f"{r['node']}  {otp}  source {r['source']}", "bold")
    for line in death_lines(r):  # the cause of death and a partial read come first
        say(line, style="bold")
    v = r["verdict"]
    say(verdict(r), style=f"bold {STATE_STYLE[v['state']]}")
    for line in v["why"]:
        say(f"  {line}", style=STATE_STYLE[v["state"]])
    unknown = (r.get("coverage") or {}).get("flags_unknown")
    fin = in_force_line(v)
    if unknown:  # a cut input: what was not read runs flags nobody knows, not the defaults
        if v["flags_in_force"]["flags"] == "":
            fin = "no +M flag in the allocators read"
        fin += f"; unknown for {', '.join(unknown)} (not read)"
    say(f"Flags in force: {fin}", style="dim")
    for e in v["no_flag_helps"]:
        say(f"\nNo flag shown to help {e['allocator']} ({human(e['unused'])} unused of "
            f"{human(e['allocated'])}, usage {pct(e['usage'])}):", style="bold")
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
