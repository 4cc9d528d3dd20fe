"""Issue 22 item 6, measured: is the verdict stable?

1. Fresh nodes: the same workload under the same setting on RUNS fresh nodes, each judged by
   `beamalloc recommend NODE --json` as an operator runs it: the same state and flags every time,
   and each figure (the prediction, and each future's) within 10 points over the runs.
2. One snapshot: the verdict of one snapshot, computed twice: the same figures to the digit.
3. Two reads: an idle node read twice a few seconds apart, each read judged alone: figures
   within 2 points.

Run `.venv/bin/python tests/e2e/stability.py [--releases 25,27,29] [--runs 5]
[--cases spike-drop/defaults,churn-load/bf] [--no-reads]` (two nodes at once at most); it prints
one line per case and exits 1 where a bound does not hold. `--cases` runs only those fresh-node
cases, `--no-reads` skips checks 2 and 3.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from matrix import SETTINGS, WORKLOADS, _recommend, start, tested
from otp import RELEASES, missing

from beamalloc.advice.recommend import recommend
from beamalloc.collector.live import snapshot_node
from beamalloc.snapshot import Snapshot

#: (workload, setting): the cases whose verdict turned on a close call before (issue 22): a
#: carrier-seeded spike, churn under load, idle churn and kept survivors under bf.
CASES = [("spike-drop", "defaults"), ("churn-load", "bf"), ("churn-idle", "bf"), ("kept", "bf")]
FRESH_POINTS = 10.0
READS_POINTS = 2.0
#: Seconds between the two reads of an idle node (ejabberd's were 3 s apart, issue 22).
READS_APART = 3.0


def figures(rec: dict[str, Any]) -> dict[str, float]:
    """The figures a verdict stands on, in % of the unused bytes: the flags' prediction and each
    future's."""
    _, _, p = tested(rec)
    out: dict[str, float] = {}
    if p and p.get("unused_saving") is not None:
        out["prediction"] = -100.0 * p["unused_saving"]
        for f in p.get("futures") or ():
            out[f["name"]] = -100.0 * f["unused_saving"]
    return out


@dataclass
class Fresh:
    release: str
    workload: str
    setting: str
    runs: list[dict[str, Any]]  # recommend --json of each fresh node

    @property
    def verdicts(self) -> set[tuple[str, str]]:
        return {(r["verdict"]["state"], tested(r)[0]) for r in self.runs}

    def spread(self) -> dict[str, float]:
        """Max - min of each figure over the runs that gave it (a future is given only where
        its history comes within RULES_OUT; the prediction must be in every run)."""
        figs = [figures(r) for r in self.runs]
        out = {}
        for n in sorted(set().union(*figs)):
            xs = [f[n] for f in figs if n in f]
            out[n] = max(xs) - min(xs)
        return out

    @property
    def ok(self) -> bool:
        s = self.spread()
        given = all("prediction" in figures(r) for r in self.runs) or not any(
            "prediction" in figures(r) for r in self.runs)
        return len(self.verdicts) == 1 and given and all(x <= FRESH_POINTS for x in s.values())

    def line(self) -> str:
        figs = [figures(r) for r in self.runs]
        states = [r["verdict"]["state"] for r in self.runs]
        by = {n: " ".join(f"{f[n]:+.0f}" if n in f else "-" for f in figs)
              for n in sorted(set().union(*figs))}  # fmt: skip
        spread = ", ".join(f"{n} {v:.1f}" for n, v in self.spread().items()) or "-"
        preds = [tested(r)[2] or {} for r in self.runs]
        how = " ".join(f"{p.get('seeded_from')}/{p.get('known')}" for p in preds)
        return (f"fresh otp{self.release}/{self.workload}/{self.setting}: "
                f"{len(self.verdicts)} verdict(s) {sorted(set(states))}; figures "
                f"{'; '.join(f'{n}: {v}' for n, v in by.items()) or '-'} ({how}); spread (points) "
                f"{spread}: {'ok' if self.ok else 'FAIL'}")  # fmt: skip


def fresh(release: str, workload: str, setting: str, runs: int) -> Fresh:
    wl = WORKLOADS[workload]

    def one(_: int) -> dict[str, Any]:
        node = start(release, wl, SETTINGS[setting])
        try:
            node.wait_ready(timeout=240)
            return _recommend(node.node, node.cookie)
        finally:
            node.stop()

    with ThreadPoolExecutor(max_workers=2) as ex:
        return Fresh(release, workload, setting, list(ex.map(one, range(runs))))


def two_reads(release: str, workload: str, setting: str) -> tuple[Snapshot, Snapshot]:
    wl = WORKLOADS[workload]
    node = start(release, wl, SETTINGS[setting])
    try:
        node.wait_ready(timeout=240)
        first = snapshot_node(node.node, node.cookie, timeout=60.0)
        time.sleep(READS_APART)  # the interval between two operators' calls, not a wait
        return first, snapshot_node(node.node, node.cookie, timeout=60.0)
    finally:
        node.stop()


def diff(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {n: abs(a[n] - b[n]) for n in sorted(set(a) | set(b)) if n in a and n in b}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", default=",".join(RELEASES))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cases", default=",".join(f"{w}/{s}" for w, s in CASES),
                    help="fresh-node cases, WORKLOAD/SETTING,...")
    ap.add_argument("--no-reads", action="store_true",
                    help="skip the one-snapshot and two-reads checks")
    a = ap.parse_args(argv)
    cases = [tuple(c.split("/", 1)) for c in a.cases.split(",") if c]
    for w, s in cases:
        if w not in WORKLOADS or s not in SETTINGS:
            ap.error(f"no case {w}/{s}: workloads {', '.join(WORKLOADS)}; settings "
                     f"{', '.join(SETTINGS)}")
    bad = 0
    for release in a.releases.split(","):
        if why := missing(release):
            print(f"skipping OTP {release}: {why}", file=sys.stderr)
            continue
        for workload, setting in cases:
            f = fresh(release, workload, setting, a.runs)
            print(f.line(), flush=True)
            bad += not f.ok
        if a.no_reads:
            continue
        # One snapshot judged twice, and two reads of an idle node (idle churn under bf: the
        # case ejabberd's two calls disagreed on).
        first, second = two_reads(release, "churn-idle", "bf")
        r1, r1b, r2 = (figures(recommend(s)) for s in (first, first, second))
        same = r1 == r1b and bool(r1)
        reads = diff(r1, r2)
        reads_ok = bool(reads) and all(x <= READS_POINTS for x in reads.values())
        print(f"snapshot otp{release}/churn-idle/bf twice: {r1} vs {r1b}: "
              f"{'same' if same else 'FAIL'}", flush=True)  # fmt: skip
        print(f"reads otp{release}/churn-idle/bf {READS_APART:.0f} s apart: {r1} vs {r2}; "
              f"apart (points) {reads}: {'ok' if reads_ok else 'FAIL'}", flush=True)  # fmt: skip
        bad += (not same) + (not reads_ok)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
