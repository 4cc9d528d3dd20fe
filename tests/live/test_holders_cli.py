"""Who holds the memory, through the CLI as users run it (issue 12 items 3-6): analyze and
recommend of a live holders node name the holders (JSON `processes`, the verdict's words, the
terminal section at 80 and 100 columns), `--gc-probe N` announces itself on stderr as the one
action that changes the node and measures the release, a crash dump feeds the same section,
and misuse is one line and exit 2."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import run_cli

from beamalloc.cli.demo import WorkloadNode

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
ROUTER = 40_000 * 1000


@pytest.fixture(scope="module")
def wl() -> Iterator[WorkloadNode]:
    with WorkloadNode("holders", env={"WORKERS": "60"}) as w:
        w.wait_ready()
        yield w


@pytest.fixture(scope="module")
def env(wl: WorkloadNode, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {**os.environ, "BEAMALLOC_COOKIE": wl.cookie,
            "HOME": str(tmp_path_factory.mktemp("home"))}


def test_analyze_json_names_the_holders(wl: WorkloadNode, env: dict[str, str]) -> None:
    r = run_cli("analyze", wl.node, "--json", "--timeout", "60", env=env)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["processes"]
    assert p["complete"] and p["count"] == p["scanned"] + p["died"] and p["gc_probe"] is None
    assert p["top_binary"][0]["name"] == "leaky_router"
    assert p["top_binary"][0]["binary_bytes"] == ROUTER
    assert {"leaky_router", "bin_cache", "msg_queue"} <= {x["name"] for x in p["top_binary"]}
    assert any(x["name"] == "slow_consumer" for x in p["mailboxes"])
    assert "changes" not in r.stderr  # no probe, nothing announced


def test_recommend_says_processes_hold_the_memory(wl: WorkloadNode, env: dict[str, str]) -> None:
    r = run_cli("recommend", wl.node, "--json", "--no-predict", "--rate-seconds", "0",
                "--timeout", "60", env=env)
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    v = rec["verdict"]
    assert rec["processes"]["top_binary"][0]["name"] == "leaky_router"
    said = " ".join([v["headline"], *v["why"]])
    assert "leaky_router" in said and "bin_cache" in said
    live = next(s for s in v["holders"] if s.startswith("bin_cache"))
    assert "live" in live and "garbage" not in live  # a cache is named, not told to collect
    if v["state"] == "HEALTHY":
        assert "Processes, not allocator placement, hold the memory" in said


def test_terminal_section(wl: WorkloadNode, env: dict[str, str]) -> None:
    r = run_cli("recommend", wl.node, "--no-predict", "--rate-seconds", "0", "--timeout", "60",
                "--details", env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Who holds the memory" in out and "leaky_router" in out and "slow_consumer" in out
    assert out.index("Who holds the memory") > out.index("leaky_router")  # the verdict first


def test_gc_probe_is_announced_and_measured(wl: WorkloadNode, env: dict[str, str]) -> None:
    """Last of the live tests here: it collects the router."""
    r = run_cli("analyze", wl.node, "--json", "--gc-probe", "2", "--timeout", "60", env=env)
    assert r.returncode == 0, r.stderr
    assert re.search(r"--gc-probe 2: .*changes", r.stderr), r.stderr
    p = json.loads(r.stdout)["processes"]
    probe = {x["name"]: x for x in p["gc_probe"]}
    assert len(p["gc_probe"]) == 2 and "leaky_router" in probe
    got = probe["leaky_router"]["released_binary_bytes"]
    assert abs(got - ROUTER) <= ROUTER // 10
    router = next(f for f in p["findings"] if f.get("name") == "leaky_router")
    assert router["evidence"]["holder"]["kind"] == "dead"


def test_crash_dump_feeds_the_same_section(env: dict[str, str]) -> None:
    dump = ROOT / "samples/otp25/erl_crash.dump"
    r = run_cli("analyze", str(dump), "--json", env=env)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["processes"]
    assert p["source"] == "crashdump" and p["count"] == 38 and p["complete"]
    assert p["top_heap"][0]["name"] == "code_server"
    r = run_cli("analyze", str(ROOT / "samples/otp25/recon_snapshot.txt"), "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["processes"] is None


def test_gc_probe_of_a_file_is_one_line_exit_2(env: dict[str, str]) -> None:
    dump = ROOT / "samples/otp25/erl_crash.dump"
    for cmd in ("analyze", "recommend"):
        r = run_cli(cmd, str(dump), "--gc-probe", "1", env=env)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "--gc-probe" in lines[0] and "live node" in lines[0]
    r = run_cli("analyze", str(dump), "--gc-probe", "-1", env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_report_shows_the_holders(wl: WorkloadNode, env: dict[str, str],
                                  tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = run_cli("report", wl.node, "-o", str(out), "--timeout", "60", env=env)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "Who holds the memory" in html and "leaky_router" in html and "bin_cache" in html
