"""Issue 22 item 8: the verdict's matrix, workload x the setting a node carries x OTP release.

In each cell a workload (samples/workloads) runs on a fresh node under the release and the
setting; `beamalloc recommend NODE --json` judges it as an operator runs it (it reads the node
twice); the node is stopped; the same workload runs on a second fresh node started with the
node's flags followed by the flags the verdict is about (the advised ones; for NO FLAG HELPS and
UNDECIDED the ones it held back, to measure what it held back), and that allocator's unused bytes
are measured. A cell is ok when the verdict is right by that measurement (`judge`, below) and the
predicted change lies within 15 points of the measured one.

Run `make matrix` (or `.venv/bin/python tests/e2e/matrix.py [--releases 25,27] [--workloads ..]
[--settings ..] [--jobs 2] [--markdown FILE] [--docs]`): it prints one row per cell as it
finishes; `--docs` writes the table into docs/recommend.md ("The matrix", between its markers)
when every cell ran. At most `--jobs` cells at once, each with one node at a time (the
machine's cores are shared). tests/e2e/test_matrix_e2e.py runs a subset covering every verdict
state on each release.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/otp.py

from before_after import future_pct
from otp import RELEASES, Node, compile_workload, missing, start_workload

from beamalloc.advice.records import MIN_GAIN
from beamalloc.analyzer import metrics as m
from beamalloc.collector.live import snapshot_node
from beamalloc.snapshot import Snapshot

#: How far a prediction may lie from the restart it stands for (issue 22 item 8), in points.
TOLERANCE = 15.0
#: The gain floor in points of the unused bytes (advice/records.py MIN_GAIN).
FLOOR = -100.0 * MIN_GAIN
MIB = 1 << 20


@dataclass(frozen=True)
class Workload:
    module: str
    env: dict[str, str]
    what: str
    #: The node replaces blocks after "ready": a second read can tell the futures apart, so
    #: UNDECIDED is no right answer for it.
    under_load: bool = False


#: Small sizes (tens of MiB a node): a cell takes about half a minute.
WORKLOADS: dict[str, Workload] = {
    "spike-drop": Workload("binspike", {"BURST": "40000", "STRAGGLE": "2000"},
                           "a burst dropped but for evenly spread stragglers"),
    "churn-load": Workload("churn", {"CHURN_MODE": "turnover", "CHURN_BASE": "10000",
                                     "CHURN_LOAD": "10000"},
                           "churn after a spike, still replacing when read", under_load=True),
    "churn-idle": Workload("churn", {"CHURN_MODE": "turnover", "CHURN_BASE": "10000"},
                           "churn after a spike, idle when read"),
    "kept": Workload("churn", {"CHURN_MODE": "kept", "CHURN_BASE": "10000"},
                     "the spike's random survivors kept for good"),
    "heap-peak": Workload("heappeak", {}, "a peak of large heaps, a few kept"),
    "healthy": Workload("healthy", {}, "a steady mixed live set"),
}  # fmt: skip

#: The settings people carry (issue 22): OTP's defaults, bf without migration, a pool turned off
#: (binary_alloc bf on OTP 25/27), af, and an lmbcs below 2 x sbct (lint `lmbcs-sbct`).
SETTINGS: dict[str, str] = {
    "defaults": "",
    "bf": "+MBas bf",
    "acul0": "+MBacul 0",
    "af": "+MBas af",
    "lmbcs<sbct": "+MBlmbcs 512",
}


#: The flags R3 and R4 give (advice/rules.py), measured where a NO FLAG HELPS names an
#: allocator that no rule fired on.
PROBES = {"binary_alloc": "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512",
          "eheap_alloc": "+MHas ageffcbf +MHlmbcs 1024"}  # fmt: skip


@dataclass
class Cell:
    release: str
    workload: str
    setting: str
    verdict: str = "-"
    allocator: str | None = None
    tested: str = ""  # the flags measured after the node's own
    tested_as: str = ""  # advised, held back, revert
    prediction: dict[str, Any] | None = None
    before: tuple[int, int] | None = None  # (allocated, unused) of `allocator`
    after: tuple[int, int] | None = None
    healthy_measured: bool | None = None  # no allocator mostly empty, measured on the node
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"otp{self.release}/{self.workload}/{self.setting}"

    @property
    def measured_pct(self) -> float | None:
        if self.before is None or self.after is None or not self.before[1]:
            return None
        return 100.0 * (self.after[1] - self.before[1]) / self.before[1]

    def future(self, name: str) -> float | None:
        """A future's predicted change of the unused bytes, in %."""
        return future_pct(self.prediction, name)

    @property
    def predicted_pct(self) -> float | None:
        """The figure the verdict stands on; for UNDECIDED, the future the restart bore out
        (the verdict gave both)."""
        p = self.prediction
        if p is None or p.get("unused_saving") is None:
            return None
        if self.verdict == "UNDECIDED" and p.get("futures") and self.measured_pct is not None:
            figs = [-100.0 * f["unused_saving"] for f in p["futures"]]
            return min(figs, key=lambda x: abs(x - self.measured_pct))  # type: ignore[operator]
        return -100.0 * p["unused_saving"]

    @property
    def calibration(self) -> float | None:
        cal = (self.prediction or {}).get("calibration") or {}
        return cal.get("error")

    def judge(self) -> tuple[bool, str]:
        """(ok, why): the verdict is right by the restart, the figure within TOLERANCE."""
        if self.error:
            return False, self.error
        meas, pred = self.measured_pct, self.predicted_pct
        if self.verdict == "HEALTHY":
            return bool(self.healthy_measured), (
                "" if self.healthy_measured else "an allocator is mostly empty")
        if self.verdict == "CHANGE FLAGS":
            if meas is None:
                return False, "advised flags not measured"
            if meas > FLOOR:
                return False, f"the advice gained {meas:+.0f} % (floor {FLOOR:+.0f} %)"
        elif self.verdict in ("NO FLAG HELPS", "FLAGS IN FORCE"):
            if meas is not None and meas <= FLOOR:
                return False, f"the held-back flags measured {meas:+.0f} %"
        elif self.verdict == "UNDECIDED":
            if WORKLOADS[self.workload].under_load:
                return False, "undecided on a node under load (a second read tells)"
            if not (self.prediction or {}).get("futures"):
                return False, "undecided: the model does not reproduce the node"
        else:
            return False, f"unknown verdict {self.verdict}"
        if meas is not None and pred is None and self.verdict != "NO FLAG HELPS":
            return False, "no prediction for the flags measured"
        if meas is not None and pred is not None and abs(pred - meas) > TOLERANCE:
            return False, f"predicted {pred:+.0f} %, measured {meas:+.0f} %"
        return True, ""


def _recommend(node: str, cookie: str) -> dict[str, Any]:
    """`beamalloc recommend NODE --json` as an operator runs it (it reads the node twice)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cookie"
        path.write_text(cookie + "\n")
        env = {k: v for k, v in os.environ.items() if k != "BEAMALLOC_COOKIE"}
        r = subprocess.run([sys.executable, "-m", "beamalloc.cli", "recommend", node, "--json",
                            "--cookie-file", str(path), "--timeout", "60"],
                           capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"recommend exited {r.returncode}: {r.stderr.strip()[-200:]}")
    return json.loads(r.stdout)


def tested(rec: dict[str, Any]) -> tuple[str, str, dict[str, Any] | None]:
    """(flags to measure, as what, their prediction): the advice, else the flags held back or
    the revert weighed (what the verdict ruled on), else none."""
    if rec["emulator_flags"]:
        preds = [r["predicted"] for r in rec["recommendations"] if r.get("predicted")]
        return rec["emulator_flags"], "advised", preds[0] if preds else None
    for h in rec["held_back"]:
        if h.get("predicted") and h["rule"] in ("R3", "R4", "R5"):
            return h["flags"], f"held back ({h['rule']})", h["predicted"]
    for r in rec["verdict"].get("reverts") or ():
        if r.get("predicted"):
            return r["flags"], "revert weighed", r["predicted"]
    # No figure: the flags a rule proposed, or for an allocator no rule fired on the flags its
    # rule gives, measured all the same (the verdict ruled them out).
    for f in rec["findings"]:
        if f.get("candidate_flags") and f["rule"] in ("R3", "R4", "R5"):
            return (" ".join(f["candidate_flags"]), f"{f['rule']}'s, unpredicted",
                    {"allocator": f["allocator"]})  # fmt: skip
    for x in rec["verdict"].get("no_flag_helps") or ():
        if x["allocator"] in PROBES:
            return PROBES[x["allocator"]], "its rule's, unpredicted", {"allocator": x["allocator"]}
    return "", "", None


def mostly_empty(snap: Snapshot) -> list[str]:
    """Allocators below 50 % usage with at least 32 MiB unused (what HEALTHY must not have)."""
    out = []
    for alloc in snap.allocator_names():
        alloc_b, unused = carriers(snap, alloc)
        if unused >= 32 * MIB and unused > alloc_b / 2:
            out.append(alloc)
    return out


def carriers(snap: Snapshot, allocator: str) -> tuple[int, int]:
    """(allocated, unused) carrier bytes of one allocator, recon's current values."""
    insts = snap.instances(allocator)
    allocated = sum(m.container_size(i, "current", "carriers_size") for i in insts)
    used = sum(m.container_size(i, "current", "blocks_size") for i in insts)
    return allocated, allocated - used


_compiling = threading.Lock()


def start(release: str, wl: Workload, flags: str) -> Node:
    """A node running `wl` under `release` and `flags`. The module is compiled once per release
    under a lock: two cells compiling it at once loaded a half-written beam (`churn:main` undef)."""
    with _compiling:
        compile_workload(release, wl.module)
    return start_workload(release, wl.module, flags=flags.split(), env=wl.env)


def _run(release: str, wl: Workload, flags: str,
         judge: bool) -> tuple[Snapshot, dict[str, Any] | None]:
    node = start(release, wl, flags)
    try:
        node.wait_ready(timeout=240)
        rec = _recommend(node.node, node.cookie) if judge else None
        return snapshot_node(node.node, node.cookie, timeout=60.0), rec
    finally:
        node.stop()


def run_cell(release: str, workload: str, setting: str) -> Cell:
    cell = Cell(release, workload, setting)
    wl, flags = WORKLOADS[workload], SETTINGS[setting]
    try:
        snap, rec = _run(release, wl, flags, judge=True)
        assert rec is not None
        cell.verdict = rec["verdict"]["state"]
        cell.healthy_measured = not mostly_empty(snap)
        cell.tested, cell.tested_as, cell.prediction = tested(rec)
        if cell.prediction is not None:
            cell.allocator = cell.prediction.get("allocator")
        if cell.tested and cell.allocator and cell.allocator != "all":
            cell.before = carriers(snap, cell.allocator)
            after, _ = _run(release, wl, f"{flags} {cell.tested}".strip(), judge=False)
            cell.after = carriers(after, cell.allocator)
    except Exception as e:  # a cell that breaks is a FAIL row, not the end of the matrix
        cell.error = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        if os.environ.get("MATRIX_DEBUG"):
            traceback.print_exc()
    return cell


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0f} %"


HEAD = ("| cell | verdict | flags measured | predicted (known by) | measured | calibration "
        "error | ok |\n|---|---|---|---|---|---|---|")  # fmt: skip


def row(c: Cell) -> str:
    ok, why = c.judge()
    p = c.prediction or {}
    known = p.get("known") or ("both futures" if p.get("futures") else "")
    how = f" ({p['seeded_from']}{'; ' + known if known else ''})" if p.get("seeded_from") else ""
    futures = ""
    if c.verdict == "UNDECIDED" and p.get("futures"):
        futures = f"; turnover {_pc(c.future('turnover'))}, kept {_pc(c.future('kept'))}"
    meas = "-"
    if c.before and c.after:
        meas = (f"{c.before[1] / MIB:.1f} → {c.after[1] / MIB:.1f} MiB "
                f"({_pc(c.measured_pct)})")  # fmt: skip
    cal = "-" if c.calibration is None else f"{c.calibration:.3f}"
    tested = f"`{c.tested}` ({c.tested_as})" if c.tested else "-"
    return (f"| {c.name} | {c.verdict} | {tested} | {_pc(c.predicted_pct)}{how}{futures} | "
            f"{meas} | {cal} | {'ok' if ok else 'FAIL: ' + why} |")  # fmt: skip


def table(cells: Iterable[Cell]) -> str:
    cells = list(cells)
    ok = sum(c.judge()[0] for c in cells)
    return "\n".join([HEAD, *map(row, cells), "", f"{ok} of {len(cells)} cells ok."])


DOCS = Path(__file__).resolve().parents[2] / "docs" / "recommend.md"
BEGIN, END = "<!-- matrix:begin (tests/e2e/matrix.py --docs) -->", "<!-- matrix:end -->"


def write_docs(out: str) -> None:
    """The table between docs/recommend.md's markers, the rest of the page left as it is."""
    text = DOCS.read_text()
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"{DOCS}: no {BEGIN} ... {END} block")
    DOCS.write_text(f"{head}{BEGIN}\n{out}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", default=",".join(RELEASES))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--jobs", type=int, default=2, help="cells at once (one node each)")
    ap.add_argument("--markdown", type=Path, help="write the table there too")
    ap.add_argument("--docs", action="store_true",
                    help="write the table into docs/recommend.md (the whole matrix only)")
    a = ap.parse_args(argv)
    releases = []
    for r in a.releases.split(","):
        why = missing(r)
        if why:
            print(f"skipping OTP {r}: {why}", file=sys.stderr)
        else:
            releases.append(r)
    todo = [(r, w, s) for r in releases for w in a.workloads.split(",")
            for s in a.settings.split(",")]  # fmt: skip
    print(HEAD, flush=True)
    with ThreadPoolExecutor(max_workers=max(1, min(a.jobs, 2))) as ex:
        cells = []
        for c in ex.map(lambda t: run_cell(*t), todo):
            print(row(c), flush=True)
            cells.append(c)
    out = table(cells)
    print("\n" + out.splitlines()[-1])
    if a.markdown:
        a.markdown.write_text(out + "\n")
    if a.docs:
        if len(cells) == len(RELEASES) * len(WORKLOADS) * len(SETTINGS):
            write_docs(out)
        else:
            print("docs/recommend.md not written: not the whole matrix ran", file=sys.stderr)
    return 0 if all(c.judge()[0] for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
