"""The web UI without a browser: security rules, the upload limit, figures for serve and report
alike, the report's size, on real SQLite and a real waitress server where it matters."""

from __future__ import annotations

import builtins
import html
import http.client
import io
import json
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest
from browser.synth import SAMPLE, build_store
from support import run_cli, serve_in_thread

from beamalloc.analyzer.analysis import analyze
from beamalloc.collector.sources import read_file
from beamalloc.htmlreport.html import render_report
from beamalloc.timeseries.store import Store
from beamalloc.units import tick_label
from beamalloc.webui import figures
from beamalloc.webui.app import create_app

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("webui") / "watch.db"
    build_store(path, node="app@web1", days=0.5)
    return path


@pytest.fixture
def client(store_path: Path):
    return create_app(store_path, upload_limit=1 << 20).test_client()


def test_every_page_answers(client):
    for url in ("/", "/node?n=app%40web1", "/snapshot/s1", "/compare?r=s1&r=s2", "/upload",
                "/compare", "/api/nodes", "/api/snapshot/s1", "/api/node?n=app%40web1"):
        r = client.get(url)
        assert r.status_code == 200, url
        assert "script-src 'self'" in r.headers["Content-Security-Policy"]


def test_unknown_things_are_404_with_a_page(client):
    for url in ("/node?n=nobody", "/snapshot/s999999", "/snapshot/u" + "0" * 32,
                "/snapshot/x1", "/assets/nothing.js"):
        r = client.get(url)
        assert r.status_code == 404, url
    assert b"no node &#39;nobody&#39; in the store" in client.get("/node?n=nobody").data


def test_no_request_path_reaches_the_filesystem(client, monkeypatch):
    for url in ("/", "/snapshot/s1", "/assets/app.js", "/upload", "/nope"):  # templates load once
        client.get(url)
    opened: list[str] = []
    real_open = builtins.open

    def spy(file, *a, **kw):
        opened.append(str(file))
        return real_open(file, *a, **kw)

    monkeypatch.setattr(builtins, "open", spy)
    for url in ("/assets/../../setup.cfg", "/assets/..%2f..%2fsetup.cfg", "/assets/%2e%2e/etc",
                "/assets/style.css/../../../setup.cfg", "/snapshot/..%2f..%2fetc%2fpasswd",
                "/snapshot/%2fetc%2fpasswd", "/node?n=../../../etc/passwd",
                "/static/app.js", "/templates/base.html", "/webui/app.py"):
        r = client.get(url)
        assert r.status_code in (404, 308), url
        assert b"[metadata]" not in r.data and b"root:" not in r.data
    assert client.get("/assets/style.css").status_code == 200
    assert opened == []


def test_upload_limit_holds_on_the_real_server(store_path):
    from waitress.server import create_server

    srv = create_server(create_app(store_path, upload_limit=1 << 20), host="127.0.0.1", port=0)
    port = srv.socket.getsockname()[1]
    stop = serve_in_thread(srv)
    try:
        body = b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.txt\"\r\n" \
               b"\r\n" + b"a" * (2 << 20) + b"\r\n--x--\r\n"
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/upload", body, {"Content-Type": "multipart/form-data; boundary=x"})
        r = c.getresponse()
        page = r.read().decode()
        assert r.status == 413
        assert "larger than the upload limit of 1.0 MiB" in page
    finally:
        stop()


def test_upload_bad_and_good(client):
    bad = (ROOT / "tests/data/bad/truncated.json").read_bytes()
    r = client.post("/upload", data={"file": (io.BytesIO(bad), "truncated.json")})
    assert r.status_code == 400
    assert b"truncated.json" in r.data and b"beamalloc-upload" not in r.data
    r = client.post("/upload", data={"file": (io.BytesIO(SAMPLE.read_bytes()), "node1.txt")})
    assert r.status_code == 303 and r.headers["Location"].startswith("/snapshot/u")
    page = client.get(r.headers["Location"]).data.decode()
    assert "<h1 class=\"node\">node1.txt</h1>" in page


def test_loopback_only_without_token(store_path):
    c = create_app(store_path).test_client()
    assert c.get("/", headers={"Host": "127.0.0.1:8050"}).status_code == 200
    assert c.get("/", headers={"Host": "localhost:8050"}).status_code == 200
    assert c.get("/", headers={"Host": "[::1]:8050"}).status_code == 200
    # DNS rebinding: a foreign name that resolves to 127.0.0.1 is refused.
    assert c.get("/", headers={"Host": "attacker.example:8050"}).status_code == 403


def test_token_checked_on_every_request(store_path):
    c = create_app(store_path, token="s3cret-t0ken").test_client()
    h = {"Host": "10.0.0.5:8050"}
    for url in ("/", "/snapshot/s1", "/assets/app.js", "/api/nodes", "/nope"):
        assert c.get(url, headers=h).status_code == 401, url
    assert c.post("/upload", headers=h).status_code == 401
    assert c.get("/?token=wrong", headers=h).status_code == 401
    assert c.get("/", headers={**h, "Authorization": "Bearer s3cret-t0ken"}).status_code == 200
    r = c.get("/node?n=app%40web1&token=s3cret-t0ken", headers=h)
    assert r.status_code == 303 and "token" not in r.headers["Location"]
    assert "HttpOnly" in r.headers["Set-Cookie"]
    assert c.get("/", headers=h).status_code == 200  # the cookie now carries it


def test_serve_refuses_other_addresses_without_token(cli):
    r = cli("serve", "--host", "0.0.0.0", "--port", "1")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--token" in r.stderr


@pytest.mark.parametrize("args, words", [
    (["--port", "99999"], "between 1 and 65535"),
    (["--store", str(Path(__file__).parent / "data" / "bad" / "garbage.bin")],
     "cannot open the store"),
])
def test_serve_refuses_a_bad_port_or_store_in_one_line(cli, args, words):
    r = cli("serve", *args)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and words in r.stderr and "Traceback" not in r.stderr


def test_hostile_strings_escaped_in_html_and_figures(store_path):
    snap = read_file(str(SAMPLE))
    snap.node = "<script>alert(1)</script>"
    snap.allocators[0].allocator = "<b onmouseover=x>"
    a = analyze(snap)
    doc = render_report([a], [snap])
    assert "<script>alert(1)</script>" not in doc
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in doc
    figs = figures.snapshot_figures(a)
    text = json.dumps(figs)
    assert "<b onmouseover" not in text and "&lt;b onmouseover=x&gt;" in text


def test_figures_are_valid_plotly(store_path):
    """One figures module for serve and report: every figure passes plotly's own schema."""
    snaps = [read_file(str(SAMPLE)), read_file(str(ROOT / "samples/otp25/erl_crash.dump"))]
    analyses = [analyze(s) for s in snaps]
    figs = dict(figures.snapshot_figures(analyses[0]))
    figs.update(figures.compare_figures(analyses, ["A", "B"]))
    with Store(store_path, readonly=True) as st:
        series = st.series("app@web1", max_points=200)
        assert series["downsampled"]
    from beamalloc.webui.data import Data

    usage, calls = Data(store_path).node_samples("app@web1", None, None)
    figs.update(figures.node_figures(series, usage, calls))
    # instances come as (allocator, instance) data, and a row is named from the pair
    pairs = {k for _, u in usage for k in u}
    assert pairs and all(isinstance(a, str) and isinstance(i, int) for a, i in pairs)
    rows = figs["inst_heatmap"]["data"][0]["y"]
    assert sorted(rows) == sorted(f"{a}[{i}]" for a, i in pairs)
    bins = [r for r in rows if r.startswith("binary_alloc[")]
    # by instance within a type, in the order rows were drawn before (not as text: 10 after 9)
    assert bins == [f"binary_alloc[{i}]" for i in range(len(bins))] and len(bins) == 3
    assert {"memory", "stacked", "sbcs", "mseg", "inst_heatmap", "calls"} <= set(figs)
    for name, f in figs.items():
        go.Figure({k: v for k, v in f.items() if k != "note"})  # raises on any property
        # plotly does not know (a note replaces a chart of fewer than two points)
        assert f["data"], name
    # every stacked layer covers the series once, split into stretches at the 30 min gap
    stacked = figs["stacked"]["data"]
    groups = {t["stackgroup"] for t in stacked}
    assert len(groups) == 2
    for name in {t["name"] for t in stacked}:
        assert sum(len(t["x"]) for t in stacked if t["name"] == name) == len(series["t"])


def test_report_of_one_snapshot_is_small_and_offline(tmp_path):
    snap = read_file(str(SAMPLE))
    doc = render_report([analyze(snap)], [snap])
    size = len(doc.encode())
    print(f"report of one snapshot: {size} bytes")
    assert size < 5_000_000
    assert "<script src" not in doc and "<link rel=\"stylesheet\"" not in doc
    assert 'id="plotly-gz"' in doc


def test_cli_report_writes_the_file(cli, tmp_path):
    out = tmp_path / "r.doc"
    r = cli("report", str(SAMPLE), str(ROOT / "samples/otp25/erl_crash.dump"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = out.read_text()
    assert "Compare 2 snapshots" in doc and "recon_snapshot.txt" in doc


def test_recommendations_panel_never_breaks_the_page(client, monkeypatch):
    """The adapter turns a failing or missing recommender into "recommender not available"."""
    from beamalloc.webui import recommend_view

    def boom(snap):
        raise RuntimeError("recommender bug")

    monkeypatch.setattr(recommend_view, "_call", boom)
    page = client.get("/snapshot/s1")
    assert page.status_code == 200 and b"recommender not available" in page.data
    assert recommend_view.recommendations(read_file(str(SAMPLE))) is None
    monkeypatch.undo()
    # The real recommender answers for the sample, as `beamalloc recommend` does for a user.
    rec = recommend_view.recommendations(read_file(str(SAMPLE)))
    assert rec is not None, "the recommender failed on the sample (its exception is logged)"
    r = run_cli("recommend", str(SAMPLE), "--json")
    assert r.returncode == 0, r.stderr
    assert rec["emulator_flags"] == json.loads(r.stdout)["emulator_flags"]
    # one paste block per output format when there are flags, each what --format prints
    assert rec["outputs"] == ({f: json.loads(run_cli("recommend", str(SAMPLE), "--json",
                                                     "--format", f).stdout)["paste"]
                               for f in recommend_view.FORMATS} if rec["emulator_flags"] else {})
    # and the verdict line the CLI prints leads the page of that snapshot
    r = run_cli("recommend", str(SAMPLE))
    cli_verdict = r.stdout.splitlines()[0]  # the answer first (issue 26 item 1)
    assert cli_verdict.startswith(rec["verdict"]["state"]), r.stdout
    up = client.post("/upload", data={"file": (io.BytesIO(SAMPLE.read_bytes()), "n.txt")})
    page = client.get(up.headers["Location"]).data
    assert html.escape(cli_verdict).replace("&#x27;", "&#39;").encode() in page  # as Jinja
    assert b"recommender not available" not in page
    assert b"{&#39;" not in page and b"{'" not in page  # no raw dict in a table (issue 17)


def test_verdict_on_the_page(client):
    """A page with advice shows each flag's predicted summary line, never a dict; a node where
    no flag helps shows that in the banner's colour for it, with the remedies."""
    from recommend_fixtures import SNAPS

    def page(name: str) -> str:
        data = (SNAPS / f"{name}.json").read_bytes()
        r = client.post("/upload", data={"file": (io.BytesIO(data), f"{name}.json")})
        return client.get(r.headers["Location"]).data.decode()

    heap = page("heapchurn")  # counters only: the model misses the node, and says so
    assert "UNDECIDED: 287.8 MiB of eheap_alloc unused; the model does not reproduce it" in heap
    assert "calibration error 24.3 %" in heap
    assert "{&#39;" not in heap and "&#39;before&#39;" not in heap
    kept = page("churn_kept")
    assert 'class="verdict bad"' in kept and "NO FLAG HELPS: 235.1 MiB of binary_alloc" in kept
    # the why lines, as in a terminal (3 % measured; the history's ALIGN_PAD fit says 4 %)
    assert re.search(r"Why: the flags are predicted to free [34] %", kept)
    assert "binary:copy/1" in kept


def test_show_never_prints_a_repr():
    """A recommender value with nested dicts and Nones reads as text (issue 15: the pages
    printed `{'generator': ...}` per flag)."""
    from beamalloc.advice.findings import Bytes
    from beamalloc.webui.filters import show

    text = show({"flag": None, "unused": Bytes(3 << 20), "model": {
                 "generator": "stragglers", "events": 12, "params": None},
                 "carriers": [1, 2], "empty": {}})
    assert "{'" not in text and "None" not in text
    assert "unused 3.0 MiB" in text and "model (generator stragglers, events 12)" in text
    assert show({"unused": 3 << 20}) == "unused 3145728"  # a size by the kind it carries
    assert show(None) == "-" and show([]) == "-" and show(True) == "yes"


def test_byte_axes_are_binary():
    """A 192.3 MiB bar sits below the 200 MiB gridline, which is at 200 x 2^20 bytes (issue 15:
    SI "200MB" ticks beside MiB labels put the bar across it)."""
    vals, text = figures.byte_ticks(192.3 * 2**20)
    grid = dict(zip(text, vals, strict=True))
    assert grid["200 MiB"] == 200 * 2**20 > 192.3 * 2**20
    assert all(t == "0" or t.endswith((" B", " KiB", " MiB", " GiB")) for t in text)
    assert figures.byte_ticks(3 * 2**30)[1][:3] == ["0", "1 GiB", "2 GiB"]
    assert figures.byte_ticks(300)[1][1].endswith(" B")
    # one tick formatter (units.tick_label) for linear and log axes: powers of two read whole
    assert [tick_label(1 << k) for k in (9, 10, 16, 20, 31)] == [
        "512 B", "1 KiB", "64 KiB", "1 MiB", "2 GiB"]
    assert tick_label(2.5, "MiB") == "2.5 MiB" and tick_label(0) == "0"
    snap = read_file(str(SAMPLE))
    for f in figures.snapshot_figures(analyze(snap)).values():
        for ax in ("xaxis", "yaxis"):
            a = f["layout"].get(ax) or {}
            assert a.get("tickformat") != "~s" and "ticksuffix" not in a, (f["layout"]["title"], ax)


ETS_DUMP = ROOT.parent / "shared" / "samples" / "real-dumps" / \
    "sharondad91__FinalProject__src_erl_crash.dump.dump"


@pytest.mark.skipif(not ETS_DUMP.exists(), reason="../shared/samples/real-dumps is absent")
def test_who_holds_the_memory_names_the_largest_holder_whatever_its_kind(tmp_path):
    """Issue 26 item 3: the holder the terminal names (an ETS table here, 156 MiB of a 488 MiB
    node whose processes hold 2 MiB) is named under "Who holds the memory", beside the process
    scan, with the ETS tables and the categories on the same page."""
    out = tmp_path / "r.html"
    r = run_cli("report", str(ETS_DUMP), "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = html.unescape(out.read_text())
    section = page[page.index('id="s0-holders"'):page.index('id="s0-categories"')]
    assert ('id="s0-largest-holder">ETS table mnesia_transient_decision holds 156.2 MiB'
            in section)
    assert "Processes (crashdump): read all 133 processes" in section
    ets = page[page.index("ETS tables, largest first"):]
    assert ets.index("mnesia_transient_decision") < ets.index("wx_debug_info")


@pytest.mark.parametrize("n", [0, 5, -700, 1536, 162_738_176, -(5 << 40), 3 << 50])
def test_a_cells_size_is_humans_without_a_break(n: int) -> None:
    """One byte formatter (issue 27 item 1): the web's unbreakable sizes are units.human's, its
    spaces no-break ones, with or without the exact bytes (`--bytes`), and a plain str."""
    from beamalloc.units import exact_bytes, human

    for exact in (False, True):
        with exact_bytes(exact):
            said, cell = human(n), human(n, nb=True)
        assert " " not in cell and type(cell) is str
        assert cell.replace("\u00a0", " ") == said
        assert ("B)" in cell) == (exact and abs(n) >= 1024)
