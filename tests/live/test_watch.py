"""`beamalloc watch` and `snapshot --cluster` against real nodes, run as users run them.

Every node is killed in teardown; the watcher's hidden node must die with the watcher.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from beamalloc.timeseries.store import Store, StoreError

pytestmark = pytest.mark.live

# This directory's conftest (real nodes, epmd), loaded by path: `conftest` names tests/conftest.py.
_spec = importlib.util.spec_from_file_location("live_conftest", Path(__file__).with_name(
    "conftest.py"))
_lc = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules["live_conftest"] = _lc  # dataclasses look their module up there
_spec.loader.exec_module(_lc)  # type: ignore[union-attr]
HOST, Node, epmd_names = _lc.HOST, _lc.Node, _lc.epmd_names


def _start(name: str, cookie: str, *args: str) -> Node:
    return _lc.start_node(list(args), cookie=cookie, name=name)


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for n in started:
        n.stop()


def _watch(store: Path, cookie: str, *args: str,
           hidden: bool = False) -> tuple[subprocess.Popen[bytes], Path]:
    """`beamalloc watch` in a child process; `hidden` sends it through the hidden node
    (BEAMALLOC_HIDDEN_NODE, docs/access.md) instead of our own distribution client."""
    err = store.with_suffix(".stderr")
    env = dict(os.environ, BEAMALLOC_COOKIE=cookie)
    env.pop("BEAMALLOC_HIDDEN_NODE", None)
    if hidden:
        env["BEAMALLOC_HIDDEN_NODE"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "beamalloc.cli", "watch", "--store",
                             str(store), *args], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=err.open("wb"))
    return proc, err


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _gone(pids: list[int], within: float = 15) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() for p in pids):
            return True
        time.sleep(0.1)
    return False


def _counts(path: Path) -> dict[str, int]:
    try:
        with Store(path, readonly=True) as st:
            return {n["node"]: n["samples"] for n in st.list_nodes()}
    except StoreError:
        return {}


def _gaps(path: Path, node: str) -> list[dict]:
    try:
        with Store(path, readonly=True) as st:
            return st.gaps(node)
    except StoreError:
        return []


def _connected(seed: Node) -> set[str]:
    """The nodes `seed` is connected to, asked over distribution by a hidden probe node."""
    out = _lc.erl_eval(seed, "erpc:call(T, erlang, nodes, [])")
    return set(re.findall(r"'?([\w.-]+@[\w.-]+)'?", out))


def _wait(cond, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.2)


@pytest.mark.parametrize("way", ["direct", "hidden"])
def test_three_nodes_stall_restart_and_metrics(tmp_path, nodes, way: str) -> None:
    cookie = f"C{secrets.token_hex(12)}"
    steady, restarted, stalled = (f"t_{secrets.token_hex(4)}" for _ in range(3))
    for name in (steady, restarted, stalled):
        nodes.append(_start(name, cookie))
    names = [f"{n}@{HOST}" for n in (steady, restarted, stalled)]
    db = tmp_path / "w.db"
    proc, err = _watch(db, cookie, *names, "--interval", "1", "--duration", "30",
                       "--prometheus", "127.0.0.1:0", hidden=way == "hidden")
    try:
        _wait(lambda: len(_counts(db)) == 3 and min(_counts(db).values()) >= 3)
        children = _children(proc.pid)
        if way == "hidden":
            assert children, "no hidden node under the watcher"
        else:  # our own client over kept connections: no BEAM booted for us
            assert children == [], f"processes under a direct watcher: {children}"

        os.killpg(nodes[2].pid, signal.SIGSTOP)  # a stalled node: answers nothing
        _wait(lambda: _gaps(db, names[2]))  # until the watcher has given up on it
        os.killpg(nodes[2].pid, signal.SIGCONT)

        old_pid = nodes[1].pid
        nodes[1].stop()
        _wait(lambda: _gaps(db, names[1]))  # until the watcher has seen it go
        nodes.append(_start(restarted, cookie))
        new_pid = nodes[-1].pid

        port = int(re.search(rb"127\.0\.0\.1:(\d+)/metrics", err.read_bytes()).group(1))
        _wait(lambda: _counts(db)[names[1]] >= 1 and _metrics(port)["beamalloc_up"].get(
            (names[1],)) == 1.0)
        metrics = _metrics(port)
        assert proc.wait(timeout=60) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _gone(children), "the hidden node outlived the watcher"

    with Store(db, readonly=True) as st:
        series = {n: st.series(n, max_points=None) for n in names}
        # The steady node was sampled all along: no gap, and samples while the other two
        # were down (the stall and the restart did not hold it up).
        t = series[names[0]]["t"]
        assert len(t) >= 20 and st.gaps(names[0]) == []
        for down in (*st.gaps(names[1]), *st.gaps(names[2])):
            assert [x for x in t if down["start"] < x < down["end"]], down

        (gap,) = st.gaps(names[1])
        assert gap["end"] is not None and gap["start"] < gap["end"]
        assert gap["reason"] == f"restarted (os pid {old_pid} -> {new_pid})"
        after = [x for x in series[names[1]]["t"] if x > gap["end"] - 0.001]
        assert len(after) >= 5, "sampling did not continue after the restart"
        assert st.latest(names[1]).os_pid == new_pid
        pids = {st.snapshot(s["id"]).os_pid for s in st.snapshots(names[1]) if s["kept"]}
        assert pids == {old_pid, new_pid}

        (stall,) = st.gaps(names[2])
        assert "timed out" in stall["reason"] and stall["end"] is not None
        assert [x for x in series[names[2]]["t"] if x > stall["end"]]
        assert st.latest(names[2]).os_pid == nodes[2].pid

    assert {k[0] for k, v in metrics["beamalloc_up"].items() if v == 1.0} >= {names[0]}
    used = metrics["beamalloc_used_bytes"]
    for n in names:
        assert used[(n, "binary_alloc")] > 0 and used[(n, "eheap_alloc")] > 0
    assert set(metrics["beamalloc_usage_ratio"]) == set(used)
    assert all(0 <= v <= 1 for v in metrics["beamalloc_usage_ratio"].values())
    assert all(metrics["beamalloc_usage_ratio"][(n, "binary_alloc")] > 0 for n in names)
    assert all(v > 0 for v in metrics["beamalloc_rss_bytes"].values())


def _metrics(port: int) -> dict[str, dict[tuple[str, ...], float]]:
    """Scrape /metrics and parse it with prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = tuple(s.labels[k] for k in ("node", "allocator") if k in s.labels)
            out.setdefault(s.name, {})[key] = s.value
    return out


def test_sigkill_keeps_every_committed_sample(tmp_path, nodes) -> None:
    cookie = f"C{secrets.token_hex(12)}"
    for _ in range(2):
        nodes.append(_start(f"t_{secrets.token_hex(4)}", cookie))
    names = [n.node for n in nodes]
    db = tmp_path / "w.db"
    # Through the hidden node: a killed watcher must not leave it behind.
    proc, err = _watch(db, cookie, *names, "--interval", "0.25", hidden=True)
    try:
        _wait(lambda: len(_counts(db)) == 2 and min(_counts(db).values()) >= 20)
        children = _children(proc.pid)
        assert children, "no hidden node under the watcher"
        with Store(db, readonly=True) as st:
            before = {n: st.series(n, max_points=None) for n in names}
            latest_before = {n: st.latest(n).taken_at for n in names}
        proc.send_signal(signal.SIGKILL)  # while it is writing
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _gone(children), "the hidden node outlived the killed watcher"

    with Store(db) as st:  # read-write: recovers the WAL as the next watcher would
        assert st.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for n in names:
            now = st.series(n, max_points=None)
            index = {t: i for i, t in enumerate(now["t"])}
            for i, t in enumerate(before[n]["t"]):
                j = index[t]  # KeyError: a committed sample is missing
                assert {k: v[j] for k, v in now["columns"].items()} == {
                    k: v[i] for k, v in before[n]["columns"].items()}
            assert st.latest(n).taken_at >= latest_before[n]
            for s in st.snapshots(n):
                assert st.snapshot(s["id"]).node == n
        counts = {n["node"]: n["samples"] for n in st.list_nodes()}

    # A new watcher goes on writing into the same store; --retain drops what is older.
    with Store(db) as st:
        st.add_points("old@host", [(1_600_000_000.0 + i, {"allocated": i}) for i in range(5)])
    proc, err = _watch(db, cookie, *names, "--interval", "0.25", "--duration", "3",
                       "--retain", "30")
    assert proc.wait(timeout=60) == 0, err.read_text()
    after = _counts(db)
    assert all(after[n] > counts[n] for n in names)
    assert after["old@host"] == 0


def test_cluster_snapshot_and_watch(tmp_path, nodes, cli) -> None:
    cookie = f"C{secrets.token_hex(12)}"
    seed = _start(f"t_{secrets.token_hex(4)}", cookie)
    nodes.append(seed)
    for _ in range(2):  # members connect to the seed at boot: a cluster of three
        nodes.append(_start(f"t_{secrets.token_hex(4)}", cookie, "-eval",
                            f"pong = net_adm:ping('{seed.node}')"))
    # Each member pings the seed once it has booted: wait until the seed sees both.
    _wait(lambda: _connected(seed) == {n.node for n in nodes[1:]})
    env = dict(os.environ, BEAMALLOC_COOKIE=cookie)
    r = cli("snapshot", seed.node, "--cluster", "--json", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["errors"] == {}
    assert {s["node"]: s["os_pid"] for s in doc["snapshots"]} == {n.node: n.pid for n in nodes}

    out = tmp_path / "snaps"
    r = cli("snapshot", seed.node, "--cluster", "-o", str(out), env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n.node}.json" for n in nodes)
    r = cli("analyze", str(out / f"{nodes[1].node}.json"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["node"] == nodes[1].node

    db = tmp_path / "w.db"
    proc, err = _watch(db, cookie, seed.node, "--cluster", "--interval", "1", "--duration", "5")
    assert proc.wait(timeout=60) == 0, err.read_text()
    counts = _counts(db)
    assert set(counts) == {n.node for n in nodes} and min(counts.values()) >= 1


def test_bad_arguments(tmp_path, cli) -> None:
    env = dict(os.environ, BEAMALLOC_COOKIE="x")
    r = cli("watch", "nohost", "--store", str(tmp_path / "w.db"), env=env)
    assert r.returncode == 2 and "name@host" in r.stderr
    r = cli("watch", f"a@{HOST}", "--interval", "0", env=env)
    assert r.returncode == 2 and "--interval" in r.stderr
    (tmp_path / "junk.db").write_bytes(b"not sqlite" * 500)
    r = cli("watch", f"a@{HOST}", "--store", str(tmp_path / "junk.db"), env=env)
    assert r.returncode == 2 and "cannot open the store" in r.stderr
    assert "Traceback" not in r.stderr


_bench_spec = importlib.util.spec_from_file_location(
    "bench_watch", Path(__file__).parents[1] / "bench" / "bench_watch.py")
bench_watch = importlib.util.module_from_spec(_bench_spec)  # type: ignore[arg-type]
sys.modules["bench_watch"] = bench_watch
_bench_spec.loader.exec_module(bench_watch)  # type: ignore[union-attr]


def test_a_small_fleet_flaps_dies_leaves_and_joins(tmp_path) -> None:
    """bench_watch.py's scenario with 6 nodes at 2 s: every node that is up is sampled in every
    interval of the common grid while one flaps, one dies, one leaves and one joins; nothing
    taken is lost; the gaps are in the flapping, dead and departed nodes' series only; every
    scrape answered."""
    r = bench_watch.run(6, 2.0, 11, tmp_path / "w.db")
    assert r["missed"] == {}, r["missed"]
    assert len(r["ticks"]) == 11 and all(x["samples"] >= 4 for x in r["ticks"])
    assert r["taken"] == r["written"] == sum(r["stored"].values())
    gapped = {n for n, g in r["gaps"].items() if g}
    assert gapped == {r["flapper"], *r["dying"], *r["leaving"]}
    flaps = r["gaps"][r["flapper"]]
    assert len(flaps) == 2 and all(g["end"] is not None for g in flaps)
    for n in (*r["dying"], *r["leaving"]):
        (g,) = r["gaps"][n]
        assert g["end"] is None  # still down: an open gap
    for n in r["joined"]:
        assert r["stored"][n] >= 2
    assert r["scrapes"] and not r["scrape_errors"]


def test_a_scrape_answers_while_the_store_is_locked(tmp_path, nodes) -> None:
    """The store's writer waits on a lock another process holds; /metrics still answers with
    fresh samples meanwhile, and once the lock goes, every sample taken is written."""
    cookie = f"C{secrets.token_hex(12)}"
    nodes.append(_start(f"t_{secrets.token_hex(4)}", cookie))
    db = tmp_path / "w.db"
    Store(db).close()
    proc, err = _watch(db, cookie, nodes[0].node, "--interval", "0.25", "--duration", "12",
                       "--prometheus", "127.0.0.1:0")
    try:
        _wait(lambda: _counts(db).get(nodes[0].node, 0) >= 2)
        port = int(re.search(rb"127\.0\.0\.1:(\d+)/metrics", err.read_bytes()).group(1))
        lock = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(db)],
                                stdout=subprocess.PIPE, text=True)
        assert lock.stdout.readline().strip() == "locked"
        held = _counts(db)[nodes[0].node]
        stamps = []
        for _ in range(4):  # the writer is blocked all along (busy_timeout 10 s)
            m = _metrics(port)
            stamps.append(m["beamalloc_sample_timestamp_seconds"][(nodes[0].node,)])
            time.sleep(0.5)
        assert lock.poll() is None, "the lock was released before the scrapes"
        assert m["beamalloc_up"][(nodes[0].node,)] == 1.0
        assert stamps == sorted(stamps) and stamps[-1] > stamps[0]  # sampling went on
        assert _counts(db)[nodes[0].node] == held  # and nothing could be written
        lock.terminate()
        lock.wait()
        assert proc.wait(timeout=60) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = err.read_text().splitlines()
    written = int(re.search(r"stopped: (\d+) samples written", lines[-1]).group(1))
    assert _counts(db)[nodes[0].node] == written > held


_HOLD_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(4)
"""


def test_a_locked_or_corrupt_store_is_one_line(tmp_path, cli, nodes) -> None:
    """A store another process keeps locked past the writer's wait, and a store whose pages are
    damaged: one line, exit code 2, no traceback; what was stored before stays readable."""
    cookie = f"C{secrets.token_hex(12)}"
    nodes.append(_start(f"t_{secrets.token_hex(4)}", cookie))
    db = tmp_path / "w.db"
    proc, err = _watch(db, cookie, nodes[0].node, "--interval", "0.25", "--duration", "2")
    assert proc.wait(timeout=60) == 0, err.read_text()
    before = _counts(db)
    lock = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK.replace("4)", "30)"), str(db)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert lock.stdout.readline().strip() == "locked"
        proc, err = _watch(db, cookie, nodes[0].node, "--interval", "0.25")
        assert proc.wait(timeout=60) == 2
        text = err.read_text()
        assert "Traceback" not in text, text
        assert re.search(r"^beamalloc: cannot write to the store .*locked", text, re.M), text
    finally:
        lock.kill()
        lock.wait()
    assert _counts(db) == before

    bad = tmp_path / "bad.db"
    bad.write_bytes(db.read_bytes())
    data = bytearray(bad.read_bytes())
    page = 4096
    for off in range(2 * page, len(data), page):  # every page but the first: garbage
        data[off:off + 64] = b"\xff" * 64
    bad.write_bytes(bytes(data))
    proc, err = _watch(bad, cookie, nodes[0].node, "--interval", "0.25", "--duration", "3")
    assert proc.wait(timeout=60) == 2
    text = err.read_text()
    assert "Traceback" not in text and re.search(r"^beamalloc: .*store", text, re.M), text
