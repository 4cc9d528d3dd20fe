"""On live nodes of OTP 25, 27 and 29, `analyze --json` equals recon_alloc's formulas evaluated in
Erlang on the very same sample (the raw term the snapshot keeps), for an idle node and for one
fragmented by the demo workload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from otp import start_workload

from beamalloc.analyzer.analysis import analyze
from beamalloc.collector import live

ESCRIPT = Path(__file__).with_name("recon_formulas.escript")

pytestmark = pytest.mark.live


def _recon_in_erlang(raw: str, tmp_path: Path) -> tuple[dict, list]:
    f = tmp_path / "raw.term"
    f.write_text(raw + ".\n", encoding="utf-8")
    out = subprocess.run(["escript", str(ESCRIPT), str(f)], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split("\n")
    totals, frag = {}, []
    for line in out:
        parts = line.split()
        if parts[:1] == ["totals"]:
            totals = {"used": int(parts[1]), "allocated": int(parts[2])}
        elif parts[:1] == ["frag"]:
            a, n, su, mu, sb, sc, mb, mc = parts[1:]
            frag.append(((a, int(n)), {
                "sbcs_usage": float(su), "mbcs_usage": float(mu), "sbcs_block_size": int(sb),
                "sbcs_carriers_size": int(sc), "mbcs_block_size": int(mb),
                "mbcs_carriers_size": int(mc)}))
    return totals, frag


def _check(snap, tmp_path):
    a = analyze(snap).to_json()
    totals, frag = _recon_in_erlang(snap.raw, tmp_path)
    assert a["totals"]["used"] == totals["used"]
    assert a["totals"]["allocated"] == totals["allocated"]
    assert a["totals"]["unused"] == totals["allocated"] - totals["used"]
    assert a["totals"]["usage"] == pytest.approx(totals["used"] / totals["allocated"], abs=1e-9)
    ours = [((r["allocator"], r["instance"]), {k: r[k] for k in frag[0][1]})
            for r in a["allocators"] if r["in_recon"]]
    assert [k for k, _ in ours] == [k for k, _ in frag]  # the same order, ties included
    for (key, mine), (_, theirs) in zip(ours, frag, strict=True):
        for k, v in theirs.items():
            assert mine[k] == (v if isinstance(v, int) else pytest.approx(v, abs=1e-9)), (key, k)
    return a


def test_idle_node(any_target, tmp_path):
    snap = live.snapshot_node(any_target.node, any_target.cookie)
    assert snap.otp_release == any_target.release
    _check(snap, tmp_path)


def test_fragmented_node_through_the_cli(otp_release, tmp_path):
    with start_workload(otp_release, "frag", env={"FRAG_BASE": "8000"}) as wl:
        wl.wait_ready()
        snap = live.snapshot_node(wl.node, wl.cookie, timeout=30)
    a = _check(snap, tmp_path)
    binary = next(t for t in a["allocator_types"] if t["allocator"] == "binary_alloc")
    # the workload's signature: binary_alloc holds most unused bytes, at low usage
    assert a["allocator_types"][0]["allocator"] == "binary_alloc"
    assert binary["usage"] < 0.5
    # and the JSON the CLI prints for the stored snapshot is this same analysis
    f = tmp_path / "snap.json"
    f.write_text(snap.to_json())
    res = subprocess.run([sys.executable, "-m", "beamalloc.cli", "analyze", str(f), "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(res.stdout) == json.loads(json.dumps(a))
