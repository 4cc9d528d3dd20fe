"""Issue 17 item 9: a real trace beats a fitted one. A spikes node (samples/workloads/spikes.erl)
has one spike, is snapshotted with its carriers, and its next spike is traced with `beamalloc
trace -o`; `recommend SNAPSHOT --trace TRACE` replays that spike from the snapshot's carriers
under the node's flags and under R3's. The same two spikes run on nodes started with each flag
set measure what the flags really do at the end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ebpfhelp import Churn, Tracer, requires_bpf

from beamalloc.analyzer import metrics as m
from beamalloc.collector.live import snapshot_node
from beamalloc.snapshot import Snapshot

pytestmark = [requires_bpf, pytest.mark.live, pytest.mark.slow]

FLAGS = "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512"
SPIKE = "spike 60000 3000"  # per worker: 60,000 binaries, one in 3,000 kept for good


def unused(snap: Snapshot) -> int:
    insts = snap.instances("binary_alloc")
    return sum(m.container_size(i, "current", "carriers_size")
               - m.container_size(i, "current", "blocks_size") for i in insts)  # fmt: skip


def two_spikes(ebin: str, flags: str, trace: str | None = None) -> tuple[Snapshot, Snapshot]:
    """(after the first spike, after the second), the second traced into `trace` if given."""
    node = Churn(ebin, sname=True, module="spikes", flags=flags.split())
    try:
        assert node.cmd(SPIKE)[0] == "done"
        first = snapshot_node(node.node, node.cookie, timeout=60.0)
        tr = None
        if trace:
            tr = Tracer("--node", node.node, "-o", trace, env={"BEAMALLOC_COOKIE": node.cookie})
        assert node.cmd(SPIKE)[0] == "done"
        if tr is not None:
            rc, _, err = tr.stop()
            assert rc == 0, err
        return first, snapshot_node(node.node, node.cookie, timeout=60.0)
    finally:
        node.stop()


def _experiment(ebin: str, tmp_path, run: int) -> tuple[dict, float, int]:
    """One traced spike, one run under R3's flags, and recommend's prediction from the trace:
    (R3's prediction, the unused change measured on the node with the flags, the unused bytes
    at the end without them)."""
    trace = str(tmp_path / f"spike-{run}.batr")
    first, end = two_spikes(ebin, "", trace)
    _, end_flags = two_spikes(ebin, FLAGS)
    assert first.carriers and unused(end) > 32 << 20  # the spikes did leave carriers behind
    measured = 100.0 * (unused(end_flags) - unused(end)) / unused(end)
    snap = tmp_path / f"first-{run}.json"
    snap.write_text(first.to_json())
    r = subprocess.run([sys.executable, "-m", "beamalloc.cli", "recommend", str(snap),
                        "--trace", trace, "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    (r3,) = [f for f in rec["findings"] if f["rule"] == "R3"]
    p = r3["predicted"]
    assert (p["seeded_from"], p["workload"]) == ("carriers", "traced"), p["model"]
    assert trace.rsplit("/", 1)[1] in p["model"]["fitted_to"]
    return p, measured, unused(end)


def test_traced_prediction_matches_the_flags_effect(ebin: str, tmp_path) -> None:
    p, measured, end_unused = _experiment(ebin, tmp_path, 1)
    # The replay under the node's own flags ends near the node's own end state ...
    assert 0.7 <= p["before"]["unused"] / end_unused <= 1.3, (p["before"], end_unused)
    # ... and under R3's flags changes it as the node started with them does: never promising
    # more than the node delivers (10 points of noise), and within 25 points of it. On this
    # workload the trace-seeded prediction has been 11-25 points short of the measured gain
    # in full-suite runs (-64 % predicted against -77..-89 % measured; 2026-11-23, open), on the
    # safe side; a miss reruns the whole experiment once on fresh nodes (as
    # tests/e2e/test_seeded_e2e.py does); two misses fail.
    def ok(pred: float, meas: float) -> bool:
        return pred >= meas - 10 and pred - meas <= 25

    first = (p["change_pct"]["unused"], measured)
    if not ok(*first):
        p, measured, end_unused = _experiment(ebin, tmp_path, 2)
    assert ok(p["change_pct"]["unused"], measured), (p["change_pct"], measured, first)
