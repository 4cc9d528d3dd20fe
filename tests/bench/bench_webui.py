"""Bench of the web UI (issue 6, must-hold 3): prints times, asserts nothing about them.

A store with 7 days of 1-minute samples of one node (10,080 samples; a full snapshot kept every
30 minutes, as `watch` keeps them by default) is served by waitress; the node page is fetched
over HTTP cold (no cached snapshot) and warm. Then the size of the report of one snapshot.

    .venv/bin/python tests/bench/bench_webui.py
"""

from __future__ import annotations

import http.client
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from browser.synth import SAMPLE, T0, build_store  # noqa: E402
from waitress.server import create_server  # noqa: E402

from beamalloc.analyzer.analysis import analyze  # noqa: E402
from beamalloc.collector.sources import read_file  # noqa: E402
from beamalloc.reporters.html import render_report  # noqa: E402
from beamalloc.timeseries.store import Store  # noqa: E402
from beamalloc.webui.app import create_app  # noqa: E402


def fetch(port: int, path: str) -> tuple[float, int, int]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t = time.perf_counter()
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    return time.perf_counter() - t, r.status, len(body)


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "watch.db"
        t = time.perf_counter()
        n = build_store(db, node="app@web1", days=7, interval=60)
        with Store(db, readonly=True) as st:
            kept = len(st.snapshots("app@web1"))
            samples = st.list_nodes()[0]["samples"]
        print(f"store: {samples} samples ({n} minutes, one gap), {kept} snapshots, "
              f"{db.stat().st_size / 1e6:.1f} MB, built in {time.perf_counter() - t:.1f} s")
        srv = create_server(create_app(db), host="127.0.0.1", port=0, threads=4)
        port = srv.socket.getsockname()[1]
        threading.Thread(target=srv.run, daemon=True).start()
        try:
            node = "/node?n=" + quote("app@web1")
            mid = T0 + 3 * 86400
            for label, path in (("node page, cold", node), ("node page, warm", node),
                                ("node page, last day", node + f"&start={T0 + 6 * 86400}"),
                                ("zoom refetch (2 h)",
                                 f"/api/node?n=app%40web1&start={mid}&end={mid + 7200}"),
                                ("nodes page", "/"), ("snapshot page", "/snapshot/s1")):
                dt, status, size = fetch(port, path)
                assert status == 200, (path, status)
                print(f"{label:22s} {dt * 1000:7.0f} ms  {size / 1e3:7.0f} kB")
        finally:
            srv.close()
    snap = read_file(str(SAMPLE))
    size = len(render_report([analyze(snap)], [snap]).encode())
    print(f"report of one snapshot: {size / 1e6:.2f} MB ({size} bytes; limit 5 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
