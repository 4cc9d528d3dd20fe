"""`beamalloc diff` on real nodes: one node (same name) before and after a real flag change on
the binspike workload (samples/workloads/binspike.erl), through files, a live node and the store,
on OTP 25, 27 and 29."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

import otp
import pytest
from otp import start_workload
from support import run_cli

from beamalloc.collector import snippet
from beamalloc.collector.live import snapshot_node
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store
from beamalloc.units import human

pytestmark = pytest.mark.live

BEFORE = "+MBas bf"  # an old configuration: carrier migration off
AFTER = "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512 +MBacul de"  # R3's and R10's flags


def _run(release: str, name: str, flags: str, also: object = None) -> Snapshot:
    # the same node name before and after: a restart with new flags
    with start_workload(release, "binspike", flags=flags.split(), name=name) as wl:
        wl.wait_ready()
        snap = snapshot_node(wl.node, wl.cookie, timeout=60.0)
        if also is not None:
            also(wl)  # type: ignore[operator]
        return snap


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, otp_release: str) -> dict[str, object]:
    """Before and after on each test release (tests/otp.py)."""
    d = tmp_path_factory.mktemp("diff")
    # the snippet writes on the node's own file system: inside its chroot for OTP 27 and 29
    there_dir, there = otp.runtime(otp_release).scratch()
    name = f"beamalloc_diff_{secrets.token_hex(4)}"
    out: dict[str, object] = {"dir": d}
    a = _run(otp_release, name, BEFORE)

    def live_diff(wl: otp.Node) -> None:  # B read live by `beamalloc diff` itself
        (d / "cookie").write_text(wl.cookie)
        (d / "a.json").write_text(a.to_json())
        r = run_cli("diff", str(d / "a.json"), wl.node, "--cookie-file", str(d / "cookie"),
                    "--json", timeout=120)
        out["live"] = r
        # the snippet's one line (docs/access.md), evaluated on the node itself through rpc:
        # what an operator pastes into remote_console, writing a SOURCE file on its host
        wl.eval(snippet.erlang_expression(f"{there}/b.etf"), timeout=60)

    b = _run(otp_release, name, AFTER, also=live_diff)
    shutil.move(there_dir / "b.etf", d / "b.etf")
    shutil.rmtree(there_dir)
    (d / "b.json").write_text(b.to_json())
    out.update(a=a, b=b, name=a.node)
    return out


def test_flag_change_on_a_real_node_helped(pair, cli) -> None:
    d: Path = pair["dir"]  # type: ignore[assignment]
    r = cli("diff", str(d / "a.json"), str(d / "b.json"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["same_node"] and doc["notes"] and "restarted" in doc["notes"][0]
    t = doc["total"]
    assert t["b"]["unused"] < t["a"]["unused"]
    binary = next(x for x in doc["types"] if x["allocator"] == "binary_alloc")
    assert binary["delta"]["unused"] <= -0.4 * binary["a"]["unused"]  # test_recommend_e2e's 40 %
    assert doc["verdict"]["outcome"] in ("helped", "helped_partly")
    assert doc["verdict"]["headline"].startswith("helped")
    flags = {f["flag"]: f for f in doc["flags"]}
    assert flags["+MBas"]["a_text"] == "bf" and flags["+MBas"]["b_text"] == "ageffcbf"
    assert flags["+MBlmbcs"]["unit"] == "bytes" and flags["+MBlmbcs"]["b_text"] == "512.0 KiB"
    assert flags["+MBsbct"]["b_text"] == "256.0 KiB"
    assert flags["+MBacul"]["unit"] == "percent" and flags["+MBacul"]["b_text"].endswith("%")
    assert doc["rss"] is not None and doc["rss"]["a"] > 0


def test_text_at_80_and_100_columns_cuts_no_number(pair, cli) -> None:
    d: Path = pair["dir"]  # type: ignore[assignment]
    doc = json.loads(cli("diff", str(d / "a.json"), str(d / "b.json"), "--json").stdout)
    for cols in ("80", "100"):
        r = cli("diff", str(d / "a.json"), str(d / "b.json"),
                env={**os.environ, "COLUMNS": cols})
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert max(len(x) for x in lines) <= 80, max(lines, key=len)
        assert "…" not in r.stdout
        for f in doc["flags"]:  # every flag, whole
            assert any(f["flag"] in x and f["a_text"] in x and f["b_text"] in x for x in lines)
        row = next(x for x in lines if x.startswith("all allocators"))
        assert human(doc["total"]["a"]["unused"]) in row
        assert human(doc["total"]["a"]["carriers_size"]) in row
        assert doc["verdict"]["headline"].split(":")[0] in r.stdout


def test_live_node_as_source(pair) -> None:
    r = pair["live"]
    assert r.returncode == 0, r.stderr  # type: ignore[union-attr]
    doc = json.loads(r.stdout)  # type: ignore[union-attr]
    assert doc["b"]["source"] == "live" and doc["b"]["node"] == pair["name"]
    assert doc["total"]["b"]["unused"] < doc["total"]["a"]["unused"]


def test_snippet_file_as_source(pair, cli) -> None:
    d: Path = pair["dir"]  # type: ignore[assignment]
    r = cli("diff", str(d / "a.json"), str(d / "b.etf"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["b"]["label"].endswith("b.etf") and doc["b"]["node"] == pair["name"]
    assert doc["rss"] is not None  # the snippet reads /proc too
    assert doc["total"]["b"]["unused"] < doc["total"]["a"]["unused"]
    assert {f["flag"] for f in doc["flags"]} >= {"+MBas", "+MBlmbcs", "+MBsbct"}


def test_store_first_and_last(pair, cli, tmp_path) -> None:
    db = tmp_path / "watch.db"
    with Store(db) as st:
        for s in (pair["a"], pair["b"]):
            st.add_sample(s, derive(s), force_keep=True)  # type: ignore[arg-type]
    r = cli("diff", "--node", pair["name"], "--store", str(db), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    d: Path = pair["dir"]  # type: ignore[assignment]
    files = json.loads(cli("diff", str(d / "a.json"), str(d / "b.json"), "--json").stdout)
    assert doc["total"] == files["total"] and doc["flags"] == files["flags"]
    assert doc["a"]["label"].startswith("store sample")
    # a range holding one snapshot is one line, exit 2
    t_b = pair["b"].taken_at  # type: ignore[union-attr]
    r = cli("diff", "--node", pair["name"], "--store", str(db), "--from", str(t_b - 0.001))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "1 stored snapshot" in r.stderr
