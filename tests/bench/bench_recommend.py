"""Bench: `beamalloc recommend NODE` on a node with 2 GiB of binary_alloc (issue 22, cost line).

    .venv/bin/python tests/bench/bench_recommend.py [--runs N] [--base B]

One real node runs samples/workloads/churn.erl scaled up under `+MBas bf` (a base set of B
binaries of 600-1000 B, a spike to 15 x B, a random drop, every survivor replaced, then steady
churn): about 2.2 GiB of binary_alloc at B = 160,000. Then, alternated N times:

* `recommend NODE --json` as an operator runs it: two reads of the node (the turnover), the
  restart-true prediction (the node's history replayed from an empty VM, scaled down to
  analyzer/predict.HISTORY_BLOCKS peak blocks), the verdict;
* `recommend NODE --json --rate-seconds 0`: the same without the turnover's second read (and
  the second's wait, analyzer/predict.TURNOVER_SECONDS);
* the floor, in the same run: `recommend NODE --json --no-predict --rate-seconds 0` (reading the
  node, its processes and the rules, no replay, no second read);
* `snapshot NODE`: the allocators only (issue 28 item 3: recommend within 1.5x of it, the
  process scan and ETS scan over our own client: no BEAM booted).

Prints medians, the ratios to the floor and to `snapshot`, the time the prediction adds, and the
prediction (its scale, calibration error, futures). Goal: the full command within 3 s on this
machine. A plain script, not a test: tests never assert wall-clock times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from beamalloc.cli.demo import WorkloadNode
from beamalloc.collector.live import snapshot_node


def _cli(node: str, cookie: Path, *extra: str, command: str = "recommend"
         ) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if k != "BEAMALLOC_COOKIE"}
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "beamalloc.cli", command, node, "--cookie-file",
           str(cookie), "--timeout", "120", "--json",
           *extra]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=True)
    return time.perf_counter() - t, json.loads(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--base", type=int, default=160_000)
    args = ap.parse_args()
    env = {"CHURN_BASE": str(args.base), "CHURN_LOAD": "5000"}
    with WorkloadNode("churn", ["+MBas", "bf"], env) as wl, tempfile.TemporaryDirectory() as tmp:
        wl.wait_ready(timeout=900)
        cookie = Path(tmp) / "cookie"
        cookie.write_text(wl.cookie + "\n")
        snap = snapshot_node(wl.node, wl.cookie, timeout=120.0)
        insts = snap.instances("binary_alloc")
        size = sum(i.mbcs.carriers_size.current + i.sbcs.carriers_size.current
                   + (i.mbcs_pool.carriers_size if i.mbcs_pool else 0) for i in insts)  # fmt: skip
        print(
            f"node: churn x {args.base} under +MBas bf, binary_alloc {size / 2**30:.2f} GiB in "
            f"{len(snap.carriers_of('binary_alloc'))} carriers"
        )
        times: dict[str, list[float]] = {"recommend": [], "no_turnover": [], "floor": [],
                                         "snapshot": []}
        result: dict = {}
        for _ in range(args.runs):
            dt, result = _cli(wl.node, cookie)
            times["recommend"].append(dt)
            dt, _ = _cli(wl.node, cookie, "--rate-seconds", "0")
            times["no_turnover"].append(dt)
            dt, _ = _cli(wl.node, cookie, "--no-predict", "--rate-seconds", "0")
            times["floor"].append(dt)
            dt, _ = _cli(wl.node, cookie, command="snapshot")
            times["snapshot"].append(dt)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(
            f"{k:9}: median {med[k]:.2f} s over {len(v)} runs ({', '.join(f'{x:.2f}' for x in v)})"
        )
    print(
        f"ratio recommend / floor: {med['recommend'] / med['floor']:.2f}; the prediction and "
        f"the second read add {med['recommend'] - med['floor']:.2f} s"
    )
    print(
        f"ratio recommend / snapshot: {med['recommend'] / med['snapshot']:.2f}; without the "
        f"turnover's second read (--rate-seconds 0): "
        f"{med['no_turnover'] / med['snapshot']:.2f}; the floor: "
        f"{med['floor'] / med['snapshot']:.2f} (goal: within 1.5)"
    )
    shown = set()
    for r in result.get("recommendations", []) + result.get("held_back", []):
        p = r.get("predicted") or {}
        if p.get("seeded_from") == "history" and r["rule"] not in shown:
            shown.add(r["rule"])
            futures = ", ".join(f"{f['name']} {-100 * f['unused_saving']:+.0f} %"
                                for f in p.get("futures") or ())  # fmt: skip
            print(
                f"{r['rule']}: history at {p['model']['scale']:.3f} of the node, "
                f"{p['model']['events']} events, calibration error "
                f"{p['calibration']['error']:.3f}, {-100 * p['unused_saving']:+.0f} % "
                f"(known: {p['known']}; {p['known_by']}){'; ' + futures if futures else ''}"
            )
    print(f"goal: recommend NODE within 3 s: {'met' if med['recommend'] <= 3 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
