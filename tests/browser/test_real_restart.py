"""A real node watched by `beamalloc watch` as a user runs it, restarted under the same name,
then its page in a real browser (issue 15, item 4): no line is drawn across the restart, and
the mseg chart, whose counters a restart resets, still has its lines."""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from support import serve_in_thread

from beamalloc.timeseries.store import Store

from .pages import FIGURES, line_problems, screenshot, visit

pytestmark = [pytest.mark.slow, pytest.mark.live]

_spec = importlib.util.spec_from_file_location(
    "live_conftest", Path(__file__).parents[1] / "live" / "conftest.py")
_lc = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("live_conftest", _lc)
_spec.loader.exec_module(_lc)  # type: ignore[union-attr]

#: Keeps binary_alloc busy (refc binaries made and dropped), so the lines move.
CHURN = ("spawn(fun L() -> B = [binary:copy(<<1>>, 60000) || _ <- lists:seq(1, 200)], "
         "timer:sleep(250), _ = B, L() end)")


def _samples(db: Path, node: str) -> tuple[int, int]:
    if not db.exists():
        return 0, 0
    try:
        with Store(db, readonly=True) as st:
            info = st.list_nodes(node)
            return (info[0]["samples"] if info else 0), len(st.gaps(node)) if info else 0
    except Exception:  # the writer is creating it
        return 0, 0


def _wait(cond, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.2)


def test_real_restart_breaks_every_line(browser, tmp_path):
    from waitress.server import create_server

    from beamalloc.webui.app import create_app

    name, cookie = f"t_{secrets.token_hex(4)}", f"C{secrets.token_hex(12)}"
    nodes = [_lc.start_node(eval_=CHURN, cookie=cookie, name=name)]
    node = nodes[0].node
    db = tmp_path / "w.db"
    proc = subprocess.Popen([sys.executable, "-m", "beamalloc.cli", "watch", node, "--store",
                             str(db), "--interval", "1", "--duration", "25",
                             "--carriers-every", "0"],
                            env=dict(os.environ, BEAMALLOC_COOKIE=cookie),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _samples(db, node)[0] >= 6)
        nodes[0].stop()
        nodes.append(_lc.start_node(eval_=CHURN, cookie=cookie, name=name))
        _wait(lambda: _samples(db, node)[1] >= 1)  # the watcher saw the restart
        before = _samples(db, node)[0]
        _wait(lambda: _samples(db, node)[0] >= before + 6)
        proc.terminate()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        for n in nodes:
            n.stop()

    srv = create_server(create_app(db), host="127.0.0.1", port=0, threads=2)
    stop = serve_in_thread(srv)
    try:
        visit(browser, f"http://127.0.0.1:{srv.socket.getsockname()[1]}/node?n={quote(node)}")
        figs = browser.execute_script(FIGURES)
        assert not line_problems(figs), line_problems(figs)
        memory = next(f for f in figs if f["id"] == "fig-memory")
        assert len(memory["gaps"]) >= 1
        rss = next(t for t in memory["traces"] if t["name"] == "RSS")
        # a None between the stretches: the line ends at the restart and starts again after
        assert None in rss["y"] and sum(v is not None for v in rss["y"]) >= 12
        mseg = next(f for f in figs if f["id"] == "fig-mseg")
        assert sum(v is not None for v in mseg["traces"][0]["y"]) >= 10
        screenshot(browser, "node-real-restart")
    finally:
        stop()
