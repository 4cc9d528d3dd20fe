"""Where the flags go, and the human output of `beamalloc recommend`.

Formats (issue 3): `flags` one line of emulator flags; `vm.args` one flag per line; `erl_flags`
the ERL_FLAGS environment variable; `rabbitmq` RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS (in
rabbitmq-env.conf the RABBITMQ_ prefix is dropped); `mix` rel/vm.args.eex of a mix release.
The human output teaches like recon_alloc's docs: verdict, each flag with its evidence and
cost, the lint, then the ready-to-paste block.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from beamalloc.citations import link
from beamalloc.limits import FORMATS  # the paste formats (`--format`)
from beamalloc.reporters import holders
from beamalloc.reporters.table import prose
from beamalloc.units import human, pct


def paste_block(flags: str, fmt: str) -> str:
    """The text to paste for `fmt`. Empty flags give a comment saying so."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    if fmt == "flags":
        return flags
    if not flags:
        return "# beamalloc: no +M flags to set"
    parts = _pairs(flags)
    if fmt in ("vm.args", "mix"):
        where = "rel/vm.args.eex (mix release)" if fmt == "mix" else "vm.args"
        head = f"## beamalloc recommend: add to {where}, after any +M flags already there"
        return "\n".join([head, *parts])
    if fmt == "erl_flags":
        return f'export ERL_FLAGS="$ERL_FLAGS {flags}"'
    return (
        "# rabbitmq-env.conf: SERVER_ADDITIONAL_ERL_ARGS=...; environment: as below\n"
        f'export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="$RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS {flags}"'
    )


def _pairs(flags: str) -> list[str]:
    tokens = flags.split()
    return [f"{tokens[i]} {tokens[i + 1]}" for i in range(0, len(tokens), 2)]


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
    """The verdict line: its state first (HEALTHY, CHANGE FLAGS, FLAGS IN FORCE, NO FLAG HELPS)."""
    return str(r["verdict"]["headline"])


#: Terminal style of each state: green only where nothing is to be done.
STATE_STYLE = {"HEALTHY": "green", "CHANGE FLAGS": "yellow", "FLAGS IN FORCE": "cyan",
               "NO FLAG HELPS": "red"}  # fmt: skip


def in_force_line(v: dict[str, Any]) -> str:
    """The flags in force, as the snapshot shows them."""
    fin = v["flags_in_force"]
    if fin["flags"] is not None:
        return f"`{fin['flags']}`" if fin["flags"] else "OTP defaults (no +M flag changes them)"
    opts = "; ".join(f"{n} " + " ".join(f"{k} {x}" for k, x in o.items())
                     for n, o in fin["options"].items() if o)  # fmt: skip
    note = fin["note"]
    if note.startswith("OTP ? "):  # analyzer/recommend.py's note when the source has no release
        note = "the source does not record the OTP release, so its defaults are not known"
    return f"{note}: {opts}"


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
    v = r["verdict"]
    say(verdict(r), style=f"bold {STATE_STYLE[v['state']]}")
    say(f"Flags in force: {in_force_line(v)}", style="dim")
    for e in v["no_flag_helps"]:
        say(f"\nNo flag helps {e['allocator']} ({human(e['unused'])} unused of "
            f"{human(e['allocated'])}, usage {pct(e['usage'])}):", style="bold")
        for why in e["flags_held_back"]:
            say(f"  held back: {why}")
        if e["flags_in_force"]:
            say(f"  already in force: {' '.join(e['flags_in_force'])}")
        say(f"  why: {e['why']}")
        for rem in e["remedies"]:
            bound = "up to " if rem["releases"] == e["unused"] else ""
            say(f"  what does: {rem['action']}: releases {bound}{human(rem['releases'])} "
                f"({'; '.join(map(cite, rem['sources']))})")
        if e.get("held_by"):
            say("  its binaries are referenced by: " + ", ".join(
                f"{h['name'] or h['pid']} ({human(h['binary_bytes'])})" for h in e["held_by"]))
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
            text = p["summary"] if p else str(recs[0]["not_predicted"])
            say(f"  predicted ({what}): {text}", style="magenta")
        say(f"  sources: {'; '.join(map(cite, fnd['sources']))}", style="dim")
    if infos:
        say("\nInformation (below a threshold or no flag helps; nothing to set):")
        for fnd in infos:
            say(f"  [{fnd['rule']}] {fnd['title']}: {fnd['message']}")
            if fnd.get("predicted"):
                say(f"    predicted: {fnd['predicted']['summary']}", style="dim")
    say("\nLint (flags in force" + (" and given" if any(
        i["where"] == "given" for i in r["lint"]) else "") + "):")  # fmt: skip
    if not r["lint"]:
        say("  nothing to report")
    for i in r["lint"]:
        say(f"  {i['level']} [{i['check']}] ({i['where']}) {i['message']}  "
                      f"({cite(i['rule'])})")  # fmt: skip
    for i in r["withheld"]:
        say(f"  withheld (our own proposal tripped the lint): {i['message']}")
    for note in r["notes"]:
        say(f"  note: {note}")
    if r["recommendations"]:
        whole = r.get("prediction")
        say(f"\nPredicted for all the flags together (node's flags in force: {in_force_line(v)}):")
        if whole:
            for run in whole["runs"]:
                say(f"  {run['summary']}")
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
    console.print(Text(paste_block(r["emulator_flags"], fmt)), soft_wrap=True)


def summary(r: dict[str, Any]) -> list[str]:
    """Two lines for `beamalloc demo`: the verdict's flags and the top recommendation."""
    if not r["recommendations"]:
        return [verdict(r)]
    top = r["recommendations"][0]
    lines = [
        f"Recommended +M flags: {r['emulator_flags']}",
        f"Top: {top['flag']} {top['value']} ({top['rule']}, {top['allocator']}): {top['reason']}",
    ]
    for run in (r.get("prediction") or {}).get("runs", []):
        worst = run.get("change_pct", {}).get("unused")
        best = (run.get("best_case") or {}).get("change_pct", {}).get("unused")
        if worst is None:
            continue
        what = f"Replay predicts {run['allocator']} unused bytes {worst:+.0f}%"
        if best is None:
            lines.append(f"{what} (a {run['model']['generator']} trace fitted to the snapshot).")
        else:
            lines.append(f"{what} if the survivors of the peak are spread at random (worst case), "
                         f"{best:+.0f}% if they are a few stragglers (best case).")
    return lines
