"""A real Prometheus server scrapes `beamalloc watch --prometheus` (issue 13 item 1).

Debian's prometheus (installed by `make setup`) runs on loopback with a 1 s scrape interval and
the shipped rules; a real node of each test release runs with a +M flag the lint flags, so the
finding and lint gauges have something to say, and one watcher samples them all (as an operator
runs it over a fleet). Then, through Prometheus' HTTP API: the gauges and counters are
there with the labels docs/metrics.md promises, per-node series stay within its bound, the
rules evaluate without error, every query of the shipped Grafana dashboard parses and returns
data, and a watcher whose node went down still answers with beamalloc_up 0.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from otp import Node, available, release_params, start_node

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "beamalloc-rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "beamalloc-dashboard.json"
PROMETHEUS = shutil.which("prometheus")

# Each test once per release, by a plain parameter rather than the session-wide `otp_release`
# fixture: that one groups the whole session's tests by release, which would take this module's
# tests apart and start the fleet below once per release.
pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is installed by make setup"),
    pytest.mark.parametrize("release", release_params()),
]

#: Labels a beamalloc series may carry (docs/metrics.md); `instance` and `job` are Prometheus'.
LABELS = {"__name__", "node", "allocator", "rule", "level", "check", "op", "call", "category",
          "initial_call", "table", "id", "type", "instance", "job"}
#: docs/metrics.md's bound on series per node.
MAX_SERIES_PER_NODE = 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _wait(cond, within: float = 90, what: str = "condition") -> object:
    deadline = time.monotonic() + within
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, f"{what} not reached within {within} s"
        time.sleep(0.5)


class Prom:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict]:
        d = _get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert d["status"] == "success", (expr, d)
        return d["data"]["result"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prom, dict[str, Node]]]:
    """A node of each test release this machine runs (tests/otp.py), one watcher over them all
    and one Prometheus scraping it: started together, so the scrapes and R6's misses the tests
    wait for accrue once for every release, not once per release."""
    tmp = tmp_path_factory.mktemp("prom")
    cookie = f"C{secrets.token_hex(12)}"
    nodes: dict[str, Node] = {}
    procs: list[subprocess.Popen] = []
    try:
        # ets_alloc's lmbcs under 2 x sbct: the lint's lmbcs-sbct check holds while the node
        # runs. No segment cache and 100 KiB binaries over a 64 KiB sbct, allocated and freed
        # about a thousand times a second: each one an mseg_alloc call that misses (rule R6
        # after 10,000).
        for release in available():
            nodes[release] = start_node(
                ["+MMmcs", "0", "+MBsbct", "64", "+MElmbcs", "1024", "+MEsbct", "1024"],
                eval_="spawn(fun() -> F = fun L() -> B = binary:copy(<<0:(100*1024*8)>>), "
                      "_ = byte_size(B), erlang:garbage_collect(), timer:sleep(1), L() end, "
                      "F() end).",
                cookie=cookie, release=release)  # fmt: skip
        names = [n.node for n in nodes.values()]
        watch_port = _free_port()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "beamalloc.cli", "watch", *names, "--store", str(tmp / "w.db"),
             "--interval", "1", "--prometheus", f"127.0.0.1:{watch_port}"],
            env=dict(os.environ, BEAMALLOC_COOKIE=cookie), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=(tmp / "watch.stderr").open("wb")))  # fmt: skip
        prom_port = _free_port()
        (tmp / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: ['{RULES}']\n"
            "scrape_configs:\n"
            "  - job_name: beamalloc\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{watch_port}']}}]\n")  # fmt: skip
        procs.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}",
             "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=(tmp / "prometheus.stderr").open("wb")))  # fmt: skip
        p = Prom(prom_port)
        for name in names:
            # 15 scrapes (enough for rate() over the dashboard's 10 s window) and R6 active.
            _wait(lambda n=name: p.query(f'count_over_time(beamalloc_up{{node="{n}"}}[1m]) >= 15')
                  if _ready(p) else [], what=f"15 scrapes of {name}")  # fmt: skip
            _wait(lambda n=name: p.query(f'beamalloc_finding{{node="{n}", rule="R6"}}'),
                  within=120, what=f"rule R6 on {name}")
        yield p, nodes
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for n in nodes.values():
            n.stop()


@pytest.fixture
def setup(fleet: tuple[Prom, dict[str, Node]], release: str) -> tuple[Prom, str, Node]:
    """Prometheus, and the node of this test's release with its name."""
    p, nodes = fleet
    node = nodes[release]
    return p, node.node, node


def _ready(p: Prom) -> bool:
    try:
        with urllib.request.urlopen(f"{p.base}/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_gauges_and_counters_are_scraped_with_bounded_labels(setup) -> None:
    p, node, _ = setup
    assert [r["value"][1] for r in p.query(f'beamalloc_up{{node="{node}"}}')] == ["1"]
    series = p.query(f'{{__name__=~"beamalloc_.+", node="{node}"}}')
    names = {s["metric"]["__name__"] for s in series}
    for name in ("beamalloc_node_allocated_bytes", "beamalloc_unused_bytes",
                 "beamalloc_usage_ratio", "beamalloc_allocator_calls_total",
                 "beamalloc_carrier_calls_total", "beamalloc_mseg_cache_hits_total",
                 "beamalloc_mseg_alloc_calls_total", "beamalloc_lint_in_force",
                 "beamalloc_memory_category_bytes"):
        assert name in names, name
    for s in series:
        assert set(s["metric"]) <= LABELS, s["metric"]
    assert len(series) <= MAX_SERIES_PER_NODE
    calls = p.query(f'sum(rate(beamalloc_allocator_calls_total{{node="{node}"}}[10s]))')
    assert float(calls[0]["value"][1]) > 0  # an idle node still allocates: counters move


def test_lint_in_force_is_a_gauge_an_alert_fires_on(setup) -> None:
    p, node, _ = setup
    lint = p.query(f'beamalloc_lint_in_force{{node="{node}"}} == 1')
    assert {(r["metric"]["check"], r["metric"]["allocator"]) for r in lint} == {
        ("lmbcs-sbct", "ets_alloc")}
    alerts = _wait(lambda: [a for a in _get(f"{p.base}/api/v1/alerts")["data"]["alerts"]
                            if a["labels"]["alertname"] == "BeamallocFlagLintInForce"
                            and a["labels"]["node"] == node],
                   what="the lint alert")  # fmt: skip
    assert alerts[0]["labels"]["node"] == node
    assert alerts[0]["labels"]["check"] == "lmbcs-sbct"


def test_every_rule_evaluates_without_error(setup) -> None:
    p, _, _ = setup
    groups = _get(f"{p.base}/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 12
    for r in rules:
        assert r["health"] == "ok", (r["name"], r.get("lastError"))


def test_every_dashboard_query_parses_and_returns_data(setup) -> None:
    p, node, _ = setup
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    assert len(exprs) >= 12
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            assert p.query(var["definition"].replace("label_values(", "group by (node) (")
                           .replace(", node)", ")"))  # fmt: skip
    for expr in exprs:
        q = expr.replace("$node", re.escape(node)).replace("$__rate_interval", "10s")
        assert p.query(q), f"no data for dashboard query {expr!r}"


def test_a_watcher_whose_node_died_still_answers_with_up_0(setup) -> None:
    p, node, target = setup
    target.stop()
    _wait(lambda: p.query(f'beamalloc_up{{node="{node}"}} == 0'), what="beamalloc_up 0")
    # Its gauges keep their last values, so a dashboard still shows the node.
    assert p.query(f'beamalloc_node_allocated_bytes{{node="{node}"}}')
