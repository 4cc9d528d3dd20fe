"""A real server (waitress, the production WSGI server) over a real SQLite store, and a real
browser: Debian's chromium, headless, driven by selenium through the system chromedriver."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import serve_in_thread

from beamalloc.snapshot import Snapshot
from beamalloc.timeseries import scans
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store

from .synth import T0, base_snapshot, build_few, build_restart, build_store, snapshot_at

XSS = "<script>alert(1)</script>"
#: Where screenshots go: BEAMALLOC_SHOTS=docs/img/webui writes the PNGs docs/webui.md shows.
SHOTS = Path(os.environ["BEAMALLOC_SHOTS"]) if os.environ.get("BEAMALLOC_SHOTS") else (
    Path(os.environ.get("BEAMALLOC_SCREENSHOTS", tempfile.gettempdir())) / "beamalloc-shots")
#: Nodes of the session store besides app@web1 (tests/browser/pages.py names their pages).
T_RESTART = T0 + 3 * 86400


def _need(path: str) -> None:
    if not os.path.exists(path):
        pytest.fail(f"{path} missing: make setup installs chromium and chromium-driver")


@pytest.fixture(scope="session")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "watch.db"
    build_store(path, node="app@web1", days=2)
    base = base_snapshot(XSS)
    with Store(path) as st:  # a hostile node name, as a snapshot from anywhere could carry
        for i in range(3):
            snap = snapshot_at(base, T0 + i * 60, i)
            st.add_sample(snap, derive(snap), force_keep=True)
        build_restart(st, "restart@host", T_RESTART)
        build_few(st, "one@host", T0, 1)
        build_few(st, "two@host", T0, 2)
        # a watched node and its process scan, read together from samples/workloads/holders.erl
        # (tests/data/holders_*.json): who holds the memory on its pages, the scan 4 minutes
        # before its latest sample
        data = Path(__file__).parents[1] / "data"
        held = Snapshot.from_json((data / "holders_snapshot.json").read_text())
        for t in (T0 - 300, T0):
            held.taken_at = t
            st.add_sample(held, derive(held), force_keep=True)
        scans.add(st.db, "holders@host", T0 - 240, scans.table_from_doc(
            json.loads((data / "holders_scan.json").read_text())))
        # a node with flags to advise and their predictions: churn under +MBas bf, watched, so
        # two samples a minute apart give its turnover (recommend_fixtures.earlier_snapshot)
        from recommend_fixtures import earlier_snapshot, load

        for snap, t in ((earlier_snapshot("churn_bf", 200_000, 60.0), T0 - 60),
                        (load("churn_bf"), T0)):
            snap.node, snap.taken_at = "churn@host", t
            st.add_sample(snap, derive(snap), force_keep=True)
    return path


@pytest.fixture(scope="session")
def server(store_path: Path) -> Iterator[str]:
    from waitress.server import create_server

    from beamalloc.webui.app import create_app

    srv = create_server(create_app(store_path, upload_limit=4 << 20), host="127.0.0.1", port=0,
                        threads=4)
    port = srv.socket.getsockname()[1]
    stop = serve_in_thread(srv)
    yield f"http://127.0.0.1:{port}"
    stop()


@pytest.fixture
def fresh_server(store_path: Path) -> Iterator[str]:
    """A server started now over the same store: no verdict computed yet (issue 28 item 5)."""
    from waitress.server import create_server

    from beamalloc.webui.app import create_app

    srv = create_server(create_app(store_path), host="127.0.0.1", port=0, threads=4)
    stop = serve_in_thread(srv)
    yield f"http://127.0.0.1:{srv.socket.getsockname()[1]}"
    stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    _need("/usr/bin/chromium")
    _need("/usr/bin/chromedriver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="beamalloc-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--no-first-run", "--disable-sync",
              f"--user-data-dir={profile}", "--window-size=1360,1000"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    drv.set_page_load_timeout(60)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield drv
    drv.quit()
    shutil.rmtree(profile, ignore_errors=True)
