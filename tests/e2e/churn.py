"""Issue 22 on real nodes: the class where +M flags are the cure. samples/workloads/churn.erl
(600-1000 B refc binaries: churn of a base set, a spike to 15x, a random drop, then survivors
that turn over or stay) runs under a setting people carry; `beamalloc recommend NODE --json`
predicts from the live node (sampled twice, idle or under load); the workload runs again on a
fresh node started with the node's flags followed by the advised ones, and binary_alloc's unused
bytes are measured.

Run `.venv/bin/python tests/e2e/churn.py [CASE ...]` to print the table of docs/recommend.md
("Prediction"); tests/e2e/test_churn_e2e.py asserts on the same measurements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from before_after import carriers, future_pct

from beamalloc.cli.demo import WorkloadNode
from beamalloc.collector.live import snapshot_node
from beamalloc.snapshot import Snapshot

#: The flags each rule proposes for binary_alloc's post-spike waste (R3), as the verdict pastes
#: them after a stale setting: what is measured where the verdict holds them back.
R3 = "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512 +MBacul de"
#: name: (survivors, the node's flags, binaries replaced per second per worker after "ready")
CASES = {
    "bf-turnover-idle": ("turnover", "+MBas bf", 0),
    "bf-turnover-load": ("turnover", "+MBas bf", 20000),
    "bf-kept": ("kept", "+MBas bf", 0),
    "acul0-turnover-load": ("turnover", "+MBacul 0", 20000),
    "defaults-turnover": ("turnover", "", 0),
    "defaults-kept": ("kept", "", 0),
}


@dataclass
class Churn:
    case: str
    mode: str
    flags: str  # the node's
    advised: str  # the flags measured after the node's: the advice, or R3 where held back
    verdict: str
    prediction: dict[str, Any] | None  # R3's on binary_alloc; None where no rule fired
    before: tuple[int, int]  # (allocated, unused) of binary_alloc, measured
    after: tuple[int, int]

    @property
    def measured_pct(self) -> float:
        return 100.0 * (self.after[1] - self.before[1]) / self.before[1]

    def future(self, name: str) -> float | None:
        """A future's predicted change of the unused bytes, in %."""
        return future_pct(self.prediction, name)

    @property
    def predicted_pct(self) -> float | None:
        return None if self.prediction is None else -100.0 * self.prediction["unused_saving"]


def _env(mode: str, load: int) -> dict[str, str]:
    return {"CHURN_MODE": mode, "CHURN_LOAD": str(load)}


def _recommend(node: WorkloadNode) -> dict[str, Any]:
    """`beamalloc recommend NODE --json` as an operator runs it (it samples the node twice)."""
    with tempfile.TemporaryDirectory() as tmp:
        cookie = Path(tmp) / "cookie"
        cookie.write_text(node.cookie + "\n")
        env = {k: v for k, v in os.environ.items() if k != "BEAMALLOC_COOKIE"}
        r = subprocess.run([sys.executable, "-m", "beamalloc.cli", "recommend", node.node,
                            "--json", "--cookie-file", str(cookie), "--timeout", "60"],
                           capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"recommend exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def _prediction(rec: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """(flags to measure, their binary_alloc prediction): the advice, else the held-back R3,
    else none (no rule fired: a healthy node is not restarted)."""
    for r in rec["recommendations"]:
        p = r.get("predicted")
        if r["rule"] == "R3" and p:
            return rec["emulator_flags"], p
    for h in rec["held_back"]:
        p = h.get("predicted")
        if h["rule"] == "R3" and p:
            return h["flags"], p
    return "", None


def measure(case: str) -> Churn:
    mode, flags, load = CASES[case]
    with WorkloadNode("churn", extra_args=flags.split(), env=_env(mode, load)) as wl:
        wl.wait_ready()
        rec = _recommend(wl)
        snap = snapshot_node(wl.node, wl.cookie, timeout=60.0)
    advised, p = _prediction(rec)
    after = run(mode, f"{flags} {advised}".strip(), load) if advised else snap
    return Churn(case, mode, flags, advised, rec["verdict"]["state"], p,
                 carriers(snap, "binary_alloc"), carriers(after, "binary_alloc"))  # fmt: skip


def run(mode: str, flags: str, load: int = 0) -> Snapshot:
    with WorkloadNode("churn", extra_args=flags.split(), env=_env(mode, load)) as wl:
        wl.wait_ready()
        return snapshot_node(wl.node, wl.cookie, timeout=60.0)


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0f} %"


HEAD = ("| case | node's flags | verdict | prediction (known by) | if they turn over | if they "
        "stay | calibration error | measured after the restart | difference |\n"
        "|---|---|---|---|---|---|---|---|---|")  # fmt: skip


def row(r: Churn) -> str:
    mib = 1 << 20
    p = r.prediction or {}
    cal = (p.get("calibration") or {}).get("error")
    diff = None if r.predicted_pct is None else r.predicted_pct - r.measured_pct
    how = f"{p.get('seeded_from')}; {p.get('known') or 'unknown'}: {p.get('known_by')}" if p else ""
    return (
        f"| {r.case} | `{r.flags or '(defaults)'}` | {r.verdict} | {_pc(r.predicted_pct)} "
        f"({how}) | {_pc(r.future('turnover'))} | {_pc(r.future('kept'))} | "
        f"{'-' if cal is None else f'{cal:.3f}'} | {r.before[1] / mib:.1f} → "
        f"{r.after[1] / mib:.1f} MiB ({r.measured_pct:+.0f} %) | "
        f"{'-' if diff is None else f'{diff:+.0f} points'} |"
    )


if __name__ == "__main__":
    print(HEAD, flush=True)
    for name in sys.argv[1:] or list(CASES):
        print(row(measure(name)), flush=True)
    sys.exit(0)
