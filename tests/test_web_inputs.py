"""The web UI's query parameters are range-checked like the CLI's options: a 400 with one line,
never a 500 (docs/robustness.md, "Ranges"). Issue 16: `/node?n=NODE&start=nan` (inf, 1e20) was
an OverflowError deep in the store's SQL, a 500."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from browser.synth import build_store

from beamalloc.webui.app import create_app

NODE = "app%40web1"
BAD_TIMES = ["nan", "inf", "-inf", "1e20", "1e300", "-1", "-1e300", "abc", "1" * 5000]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    path: Path = tmp_path_factory.mktemp("webinputs") / "watch.db"
    build_store(path, node="app@web1", days=0.2)
    app = create_app(path)
    app.logger.setLevel(logging.CRITICAL)  # a 500 would log a traceback; the status says it
    return app.test_client()


@pytest.mark.parametrize("page", ["/node", "/api/node"])
@pytest.mark.parametrize("param", ["start", "end"])
def test_bad_time_range_is_400(client, page: str, param: str) -> None:
    for value in BAD_TIMES:
        r = client.get(f"{page}?n={NODE}&{param}={value}")
        assert r.status_code == 400, (page, param, value, r.status_code)
        assert b"Traceback" not in r.data
    assert client.get(f"{page}?n={NODE}&{param}=1700000000").status_code == 200


@pytest.mark.parametrize("url", [
    "/snapshot/s" + "9" * 5000, "/snapshot/sabc", "/snapshot/s-1", "/api/snapshot/s" + "9" * 30,
    "/compare?r=s1&r=s" + "9" * 5000, "/node?n=%ff%fe", "/node?n=" + "a" * 10000,
])
def test_odd_refs_and_names_are_404_not_500(client, url: str) -> None:
    assert client.get(url).status_code in (400, 404)
