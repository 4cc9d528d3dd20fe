"""Issue 22 item 6, the odd runs kept: fresh nodes of one matrix case (tests/e2e/matrix.py), each
read twice, TURNOVER_SECONDS apart, both reads saved, so that the verdict of a run that came out
otherwise can be judged again, offline, after a change to the model.

    .venv/bin/python tests/e2e/reads.py capture 27 churn-load bf --runs 5 --out DIR
    .venv/bin/python tests/e2e/reads.py judge DIR [DIR...]

`capture` starts the runs two at a time and writes two full snapshots of each node,
DIR/otpR-WORKLOAD-SETTING-K.{first,second}.json. (`recommend NODE` itself no longer reads a
second snapshot for the turnover: it reads binary_alloc's counters again until they show it, for
at most TURNOVER_SECONDS without a speed trade, advice/reading.py `Reader.turnover`; the pair
here is the longest wait it makes.)

`judge` runs the recommender on each saved pair as `recommend()` is called with a turnover:
the second read judged, with the turnover between the two; no process scan and no carrier-call
rate, so no holder and no speed-trade flag weighs in. It prints per pair the verdict, the figure
and how it is known (seeded from / known by), the calibration error, the fill bands the
calibration compared (the node's and the model's), each future's figure and calibration error,
and why the history did not fit where it did not; then per case its runs, its verdicts and the
spread of its figures: "ok" when the runs agree (one verdict, figures within 10 points, a figure
for every run or for none), else "FAIL", and exit 1 if any case fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/otp.py

from matrix import SETTINGS, WORKLOADS, start, tested

from beamalloc.advice.predict import TURNOVER_SECONDS, measure_turnover
from beamalloc.advice.recommend import recommend
from beamalloc.collector.live import snapshot_node
from beamalloc.collector.sources import read_file


def capture(release: str, workload: str, setting: str, runs: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    wl = WORKLOADS[workload]

    def one(k: int) -> str:
        node = start(release, wl, SETTINGS[setting])
        try:
            node.wait_ready(timeout=240)
            first = snapshot_node(node.node, node.cookie, timeout=60.0)
            time.sleep(TURNOVER_SECONDS)
            second = snapshot_node(node.node, node.cookie, timeout=60.0)
        finally:
            node.stop()
        stem = out / f"otp{release}-{workload}-{setting}-{k}"
        Path(f"{stem}.first.json").write_text(first.to_json())
        Path(f"{stem}.second.json").write_text(second.to_json())
        return stem.name

    with ThreadPoolExecutor(max_workers=2) as ex:
        for name in ex.map(one, range(runs)):
            print(f"saved {name}", flush=True)


def _bands(xs: list[float] | None) -> str:
    return "/".join(f"{x:.2f}" for x in xs or ())


def judge_pair(first: Path) -> tuple[str, dict[str, Any]]:
    second = Path(str(first).replace(".first.json", ".second.json"))
    a, b = read_file(str(first)), read_file(str(second))
    rec = recommend(b, turnover=measure_turnover(a, b))
    _, _, p = tested(rec)
    return first.name.replace(".first.json", ""), {"state": rec["verdict"]["state"],
                                                   "flags": tested(rec)[0], "p": p or {}}


def line(name: str, r: dict[str, Any]) -> str:
    p = r["p"]
    fig = "-" if p.get("unused_saving") is None else f"{-100 * p['unused_saving']:+.0f} %"
    cal = p.get("calibration") or {}
    bands = (cal.get("measures") or {}).get("bands") or [[], []]
    futs = " ".join(f"{f['name']} {-100 * f['unused_saving']:+.0f} %"
                    f" ({f['calibration']['error']:.3f})" for f in p.get("futures") or ())
    return (f"{name}: {r['state']} {fig} ({p.get('seeded_from')}/{p.get('known')}) cal "
            f"{cal.get('error')} node {_bands(bands[0])} model {_bands(bands[1])} {futs}"
            + (f" unfit: {p['history_unfit']}" if p.get("history_unfit") else ""))


def judge(dirs: list[Path]) -> int:
    cases: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in dirs:
        for first in sorted(d.glob("*.first.json")):
            name, r = judge_pair(first)
            print(line(name, r), flush=True)
            cases[name.rsplit("-", 1)[0]].append(r)
    bad = 0
    for case, rs in cases.items():
        verdicts = {(r["state"], r["flags"]) for r in rs}
        figs = [-100 * r["p"]["unused_saving"] for r in rs
                if r["p"].get("unused_saving") is not None]
        spread = max(figs) - min(figs) if figs else 0.0
        ok = len(verdicts) == 1 and spread <= 10.0 and len(figs) in (0, len(rs))
        bad += not ok
        print(f"{case}: {len(rs)} runs, {len(verdicts)} verdict(s) "
              f"{sorted({s for s, _ in verdicts})}, spread {spread:.1f} points: "
              f"{'ok' if ok else 'FAIL'}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("release")
    c.add_argument("workload", choices=list(WORKLOADS))
    c.add_argument("setting", choices=list(SETTINGS))
    c.add_argument("--runs", type=int, default=5)
    c.add_argument("--out", type=Path, required=True)
    j = sub.add_parser("judge")
    j.add_argument("dirs", type=Path, nargs="+")
    a = ap.parse_args(argv)
    if a.cmd == "capture":
        capture(a.release, a.workload, a.setting, a.runs, a.out)
        return 0
    return judge(a.dirs)


if __name__ == "__main__":
    sys.exit(main())
