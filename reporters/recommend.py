"""Where the flags go, and the human output of `beamalloc recommend`.

The paste formats (vm.args, ERL_FLAGS, RabbitMQ, ejabberd, mix, a bare line) and where each
goes have one home, beamalloc/pastes.py; `paste()` renders a recommendation through it.
The human output teaches like recon_alloc's docs: verdict, each flag with its evidence and
cost, the lint, then the ready-to-paste block (`details`). By default it is short (issue 26 item
2): the answer, the one table the decision rests on, the top holders, the paste block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from beamalloc.advice import wording
from beamalloc.advice.findings import Bytes, Share
from beamalloc.advice.records import Prediction, Recommendation
from beamalloc.citations import link
from beamalloc.flags import UINT_MAX
from beamalloc.pastes import FORMATS as FORMATS  # the `--format` choices, for webui/
from beamalloc.reporters import holders
from beamalloc.reporters.analyze import (
    DETAILS_HINT,
    answer,
    top_holders,
)
from beamalloc.reporters.paste import paste as paste
from beamalloc.reporters.paste import paste_block as paste_block
from beamalloc.reporters.paste import paste_note as paste_note
from beamalloc.reporters.paste import paste_of as paste_of
from beamalloc.reporters.paste import said as said
from beamalloc.reporters.table import Col, print_table, prose
from beamalloc.units import exact, human, pct

if TYPE_CHECKING:
    from beamalloc.advice.recommend import Document, Recommended


def size(n: int) -> str:
    """A size in bytes: erts's ~0 is "infinity", one way everywhere."""
    return "infinity" if n >= UINT_MAX else human(n)


def _num(v: Any) -> str:
    """A number of the evidence by the kind it carries (advice/findings.py Bytes, Share; any
    other is a count or a plain figure, printed as it is): never by its key's words."""
    if isinstance(v, bool) or v is None:  # never a Python repr (issue 26 item 2)
        return {True: "yes", False: "no", None: "-"}[v]
    if isinstance(v, Share):
        return pct(v)
    if isinstance(v, Bytes):
        return size(v)
    return str(v)


def evidence_line(ev: dict[str, Any]) -> str:
    """A finding's evidence in one line, "key value, ..." (its lists left out)."""
    return ", ".join(f"{k} {_num(v)}" for k, v in ev.items() if not isinstance(v, list))


def verdict(rec: Recommended) -> str:
    """The verdict line: its state first (HEALTHY, CHANGE FLAGS, FLAGS IN FORCE, NO FLAG HELPS),
    the bytes at stake and the one thing to do (advice/wording.py)."""
    return said(wording.headline, rec.verdict)


def flags_line(rec: Recommended, short: bool = False) -> str:
    """The flags in force; on a cut input, unknown for what was not read (never "the
    defaults"); `short`: the options of a release not modelled left to --details."""
    fin = rec.verdict.flags_in_force
    unknown = rec.coverage.flags_unknown if rec.coverage is not None else None
    line = said(wording.flags_in_force, fin)
    if short and fin.flags is None:
        line = f"{said(wording.in_force_note, fin)} (--details lists them)"
    if unknown:  # a cut input: what was not read runs flags nobody knows, not the defaults
        if fin.flags == "":
            line = "no +M flag in the allocators read"
        line += f"; unknown for {', '.join(unknown)} (not read)"
    return line


def predicted_line(p: Prediction) -> str:
    """A prediction's figure with its band and calibration error, then the predictor's line."""
    return f"{said(wording.figure, p)} unused; {p.summary}"


def render(r: Document, console: Console, fmt: str = "vm.args",
           details: bool = False) -> None:
    """The answer first; then the short output, or with `details` everything there is."""
    def say(line: str, style: str | None = None, *, indent: int = 0,
            para: bool = False) -> None:
        """A line of prose, wrapped at the console's width under `indent` spaces (the caller
        says how deep it sits, never read back from the text); `para`: a paragraph's first
        line, an empty line before it."""
        if para:
            console.print()
        prose(console, line, style or "", indent=" " * indent, hang="  ")

    cited: dict[str, str] = {}  # citation -> the shipped doc's link, listed once at the end

    def cite(citation: str) -> str:
        if uri := link(citation):
            cited.setdefault(citation, uri)
        return citation

    rec = r.records
    v = rec.verdict
    info = rec.snap_info
    answer(rec, v, console)  # the cause of death, a partial read, the verdict: first
    otp = f"OTP {info['otp_release']}" if info["otp_release"] else "OTP release not recorded"
    say(f"{info['node']}  {otp}  source {info['source']}", "dim")
    if not details:
        _short(rec, console, fmt)
        return
    say(f"Flags in force: {flags_line(rec)}", style="dim")
    for e in v.no_flag_helps:
        say(f"No flag shown to help {e.allocator} ({human(e.unused)} unused of "
            f"{human(e.allocated)}, usage {pct(e.usage)}; in bytes {exact(e.unused)} of "
            f"{exact(e.allocated)}):", style="bold", para=True)
        for held in e.held_back:
            say(f"held back: {said(wording.reason, held)}", indent=2)
        if e.flags_in_force:
            say(f"already in force: {wording.flags_text(e.flags_in_force)}", indent=2)
        say(f"why: {said(wording.entry_why, e)}", indent=2)
        for rem in e.remedies:
            bound = "up to " if rem.bound else ""
            say(f"what does: {said(wording.remedy, rem)}: releases {bound}{human(rem.releases)} "
                f"({'; '.join(map(cite, rem.sources))})", indent=2)
        if e.held_by:
            say("its binaries are referenced by: " + ", ".join(
                f"{h['name'] or h['pid']} ({human(h['binary_bytes'])})" for h in e.held_by),
                indent=2)
    for rv in v.reverts:
        say(f"A setting the lint calls wrong: {said(wording.revert, rv)}.", style="bold",
            para=True)
    if v.rate is None and v.rate_unavailable:
        say(f"Speed trades: {v.rate_unavailable}", style="dim")
    if rec.processes:
        console.print()
        holders.render(rec.processes, console)
    actions = [(f, p) for f, _, p in rec.findings if f.level == "action"]
    infos = [(f, p) for f, _, p in rec.findings if f.level == "info"]
    if actions:
        say("Recommendations (each flag, the rule that fired, its numbers, its cost):", para=True)
    by_rule: dict[tuple[str, str | None], list[Recommendation]] = {}
    for x in v.advised:
        by_rule.setdefault((x.rule, x.allocator), []).append(x)
    for fnd, _ in actions:
        say(f"[{fnd.rule}] {fnd.title}", style="bold", para=True)
        say(fnd.message, indent=2)
        say(f"evidence: {evidence_line(fnd.evidence)}", style="dim", indent=2)
        recs = by_rule.get((fnd.rule, fnd.allocator), [])
        for x in recs:
            say(f"{x.flag} {x.value}", style="bold cyan", indent=2)
            say(f"why:  {x.reason}", indent=4)
            say(f"cost: {x.cost}", indent=4)
        if recs:
            pr = recs[0].prediction
            what = "these flags together" if len(recs) > 1 else "this flag"
            text = predicted_line(pr) if pr else str(recs[0].not_predicted)
            say(f"predicted ({what}): {text}", style="magenta", indent=2)
        say(f"sources: {'; '.join(map(cite, fnd.sources))}", style="dim", indent=2)
    if infos:
        say("Information (below a threshold or no flag helps; nothing to set):", para=True)
        for fnd, pr in infos:
            say(f"[{fnd.rule}] {fnd.title}: {fnd.message}", indent=2)
            if pr:
                say(f"predicted: {predicted_line(pr)}", style="dim", indent=4)
    say("Lint (flags in force" + (" and given" if any(
        i.where == "given" for i in rec.lint) else "") + "):", para=True)  # fmt: skip
    if not rec.lint:
        say("nothing to report", indent=2)
    for i in rec.lint:
        say(f"{i.level} [{i.check}] ({i.where}) {i.message}  ({cite(i.rule)})", indent=2)
        rv = v.revert_of(i.allocator, i.check) if i.where == "in force" else None
        if rv is not None:  # what the verdict made of it, so the two agree
            say(f"weighed: {said(wording.revert, rv)}", indent=4)
    for i in rec.withheld:
        say(f"withheld (our own proposal tripped the lint): {i.message}", indent=2)
    for note in rec.notes:
        say(f"note: {note}", indent=2)
    if v.advised:
        say(f"Predicted for all the flags together (node's flags in force: "
            f"{said(wording.flags_in_force, v.flags_in_force)}):", para=True)
        if rec.proposal is not None:
            for run in rec.proposal.runs:
                say(predicted_line(run), indent=2)
        else:
            say(f"{rec.not_predicted}", indent=2)
    if cited:
        # One link per document part, each alone on its line: a link cannot wrap at the width.
        say("Docs cited above, shipped with beamalloc:", para=True)
        for c, uri in cited.items():
            say(f"{c}:", indent=2)
            console.print(Text(f"    <{uri}>", style="dim"), soft_wrap=True)
    say(f"Paste ({fmt}):", para=True)
    # never wrapped: each line must reach the file or the shell whole, however long
    console.print(Text(paste(r, fmt)), soft_wrap=True)


def _short(rec: Recommended, console: Console, fmt: str) -> None:
    """The short output under the answer: the flags in force in a line, the table the decision
    rests on, the top holders, the paste block."""
    v = rec.verdict
    prose(console, f"Flags in force: {flags_line(rec, short=True)}", "dim", indent="")
    console.print()
    if v.advised:
        # a row names its allocator: its finding's title without it, where it names it first
        titles = {(f.rule, f.allocator): f.topic if f.topic is not None and f.about is not None
                  and f.about == f.allocator else f.title for f, _, _ in rec.findings}
        sets: dict[tuple[str, str | None], list[Recommendation]] = {}
        for x in v.advised:  # a finding's flags are predicted together
            sets.setdefault((x.rule, x.allocator), []).append(x)
        rows = []
        for (rule, alloc), xs in sets.items():
            p = xs[0].prediction
            err = None if p is None else p.calibration_error
            title = titles.get((rule, alloc), "")
            rows.append(["\n".join(f"{x.flag} {x.value}" for x in xs),
                         f"{rule} {title}".strip(),
                         "not predicted" if p is None else wording.change(-p.unused_saving),
                         "-" if err is None else pct(err)])
        print_table(console, "The flags, their rule, and the predicted change of unused bytes", [
                        Col("flags", "left", key=True), Col("rule", "left", wrap=True),
                        Col("unused"), Col("calibration error")], rows)
    elif v.no_flag_helps:
        title = {"UNDECIDED": "Mostly empty: what the flags would do is not known (why above)",
                 "FLAGS IN FORCE": "Mostly empty under the rules' own flags"}.get(
                     v.state, "Mostly empty, and no flag shown to help")
        # the remedy in a few words, naming what it acts on (a holder by its name)
        print_table(console, title, [
            Col("allocator", "left", key=True), Col("unused"), Col("allocated"), Col("usage"),
            Col("what does", "left", wrap=True)], [[
                e.allocator, human(e.unused), human(e.allocated), pct(e.usage),
                "; ".join(f"{wording.remedy_short(m)} ("
                          f"{'up to ' if m.bound else ''}{human(m.releases)})"
                          for m in e.remedies[:1]) or "-"]
                for e in v.no_flag_helps[:4]])
    top_holders(rec.processes, console)
    issues = [i for i in rec.lint if i.level != "info"]
    if issues:
        prose(console, f"Lint: {', '.join(dict.fromkeys(i.check for i in issues))} "
              "(--details says what and why)", "yellow", indent="")
    console.print()
    console.print(Text(f"Paste ({fmt}):", style="bold"))
    # never wrapped: each line must reach the file or the shell whole, however long
    console.print(Text(paste_of(rec, fmt)), soft_wrap=True)
    prose(console, f"{DETAILS_HINT}: each flag's rule, evidence and cost, the findings, the "
          "lint, the predictions and every holder; --json every number.", "dim", indent="")
