"""Bad input gets one clear line and exit code 2, never a traceback, and nothing stored is lost."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
import support
from support import DATA, ROOT

BAD = sorted(p for p in (DATA / "bad").iterdir() if p.name != "README.md")


def _one_clear_line(res) -> str:
    err = res.stderr if isinstance(res.stderr, str) else res.stderr.decode()
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("beamalloc: ")
    return lines[0]


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_bad_file_is_refused_with_one_line(path, cli):
    res = cli("analyze", str(path))
    assert res.returncode == 2, (res.stdout, res.stderr)
    line = _one_clear_line(res)
    assert path.name in line  # the message names the file it is about
    assert res.stdout == ""


@pytest.mark.parametrize("path", BAD[:6], ids=[p.name for p in BAD[:6]])
def test_a_bad_file_never_replaces_a_stored_snapshot(path, tmp_path, cli):
    out = tmp_path / "stored.json"
    good = cli("snapshot", str(DATA / "hand_recon.txt"), "-o", str(out))
    assert good.returncode == 0
    before = out.read_bytes()
    res = cli("snapshot", str(path), "-o", str(out))
    assert res.returncode == 2
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["stored.json"]  # no temporary left behind


def test_two_gigabyte_integer_literal_on_stdin():
    """Streamed: the reader stops at its size bound instead of swallowing 2 GiB."""
    feeder = subprocess.Popen(
        ["sh", "-c", "printf '{[{total,'; head -c 2147483648 /dev/zero | tr '\\0' 9"],
        stdout=subprocess.PIPE,
    )
    try:
        res = subprocess.run(
            [sys.executable, "-m", "beamalloc.cli", "analyze", "-"],
            stdin=feeder.stdout,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        feeder.kill()
        feeder.wait()
    assert res.returncode == 2
    assert "standard input" in _one_clear_line(res)


def test_two_gigabyte_file(tmp_path, cli):
    f = tmp_path / "huge.txt"
    with open(f, "wb") as fh:
        fh.write(b"{[{total," + b"9" * 4096)
        fh.truncate(2 << 30)  # sparse: costs no disk
    res = cli("analyze", str(f))
    assert res.returncode == 2
    assert "too large" in _one_clear_line(res)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["analyze"], "required"),
        (["frobnicate"], "invalid choice"),
        (["analyze", "/nonexistent/snap.json"], "no such file"),
        (["analyze", str(ROOT)], "is a directory"),
        (["analyze", "no_at_sign"], "no such file"),
        (["analyze", "--top", "x", "f"], "--top: expected a whole number"),
    ],
)
def test_usage_errors(args, needle, cli):
    res = cli(*args)
    assert res.returncode == 2
    assert needle in _one_clear_line(res)


@pytest.mark.parametrize("command", ["snapshot", "report"])
def test_unwritable_output_is_one_line(command, cli, tmp_path):
    res = cli(command, str(DATA / "hand_recon.txt"), "-o", str(tmp_path / "no" / "dir.out"))
    assert res.returncode == 2
    assert "cannot write" in _one_clear_line(res)


# ---- issue 25: what a decoder builds, and what an error line shows ------------------------

CORPUS_BAD = ROOT / "tests" / "corpus" / "bad"
BOMBS = sorted(CORPUS_BAD.glob("x_etf_bomb_*.etf"))


@pytest.mark.parametrize("path", BOMBS, ids=[p.name for p in BOMBS])
def test_a_decompression_bomb_is_one_line_under_200_mib(path):
    """A 130 KB file whose compressed term is a list of 128 Mi NILs built 9.6 GB (and, under a
    4 GB limit, ended in a pyo3 panic and an abort). Now: refused from its stated size, or
    by the build budget before the list is made, or part way through within it."""
    rc, out, err, rss = support.run_capped("analyze", str(path), timeout=30)
    assert rc == 2, err
    assert out == ""
    line = err.strip()
    assert len(line.splitlines()) == 1 and line.startswith("beamalloc: ") and path.name in line
    assert "Traceback" not in err and "panic" not in err
    assert rss < 200 << 20, f"peak {rss >> 20} MiB"


def test_the_decoder_refuses_an_over_budget_term_before_building_it():
    """A list that cannot fit the budget is refused at its head with the budget's line, from
    decode and decode_at alike; a list within it decodes."""
    from beamalloc.collector import etf

    n = etf.MAX_WORDS  # a list this long cannot fit: 8 + n words for the list alone
    data = b"\x83\x6c" + n.to_bytes(4, "big") + b"\x6a" * n + b"\x6a"
    with pytest.raises(etf.ETFError, match="more than 128 MiB of objects"):
        etf.decode(data)
    with pytest.raises(etf.ETFError, match="more than 128 MiB of objects"):
        etf.decode_at(data, 0, {})
    small = b"\x83\x6c" + (1000).to_bytes(4, "big") + b"\x61\x01" * 1000 + b"\x6a"
    assert etf.decode(small) == [1] * 1000 == etf.decode_at(small, 0)[0]


@pytest.mark.parametrize("name, must_not", [
    ("x_etf_snippet_version_binary.etf", "secretXYZ"),
    ("x_etf_snippet_escape_node.etf", "\x1b"),
    ("x_json_unknown_source.json", "secretXYZ"),
    ("x_json_deep_900.json", "Recursion"),
])
def test_hostile_files_say_one_clean_line(name, must_not, cli):
    """File bytes were quoted with {!r} (`b'secretXYZ'`), escape sequences printed raw, and a
    900-deep JSON was a RecursionError (issue 25, items 4, 6, 9)."""
    for command in ("analyze", "snapshot"):
        res = cli(command, str(CORPUS_BAD / name))
        assert res.returncode == 2, res.stderr
        line = _one_clear_line(res)
        assert must_not not in res.stderr + res.stdout
        assert "\x1b" not in line and "\x07" not in line


def test_clean_escapes_controls_and_caps_length():
    from beamalloc.console import MAX_LINE, clean

    assert clean("a\x1b]0;T\x07\x1b[2J\u202eb\n") == "a\\x1b]0;T\\x07\\x1b[2J\\u202eb\\x0a"
    long = clean("n" * 436_956)
    assert len(long) < MAX_LINE + 40 and long.endswith("(435,956 more characters)")
    assert clean("plain text, ünïcode") == "plain text, ünïcode"


@pytest.mark.parametrize("token", [None, "s3cret-t0ken"])
def test_web_ui_refuses_cross_origin_uploads(token, tmp_path):
    """No-token loopback mode accepted a POST with `Origin: http://evil.example`, so any page
    the operator opened could upload (a bomb) to it (issue 25 item 9): refused in every mode,
    before the body is read; the same page's own upload still works."""
    from beamalloc.webui.app import create_app

    c = create_app(None, token=token).test_client()
    host = "127.0.0.1:8050"
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    sample = (DATA / "hand_recon.txt").read_bytes()
    for url in ("/upload", "/whatif/upload"):
        for evil in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                     {"Origin": "http://127.0.0.1:9999"},  # another port is another origin
                     {"Sec-Fetch-Site": "cross-site"},
                     {"Referer": "http://evil.example/page"}):
            r = c.post(url, headers={"Host": host, **auth, **evil},
                       data={"file": (io.BytesIO(sample), "n.txt")})
            assert r.status_code == 403, (url, evil)
    for own in ({"Origin": f"http://{host}"}, {"Sec-Fetch-Site": "same-origin"},
                # Chromium's own form POST under a no-referrer policy: Origin null, but
                # Sec-Fetch-Site says same-origin, and decides
                {"Origin": "null", "Sec-Fetch-Site": "same-origin"}):
        r = c.post("/upload", headers={"Host": host, **own, **auth},
                   data={"file": (io.BytesIO(sample), "n.txt")})
        assert r.status_code in (200, 302, 303), (own, r.status_code)
    # a cross-origin GET is a page view, as before
    assert c.get("/", headers={"Host": host, "Origin": "http://evil.example", **auth}
                 ).status_code == 200


def test_cookie_file_is_refused_as_other_inputs_are(tmp_path):
    """`--cookie-file` of a FIFO hung forever, of /dev/zero grew to 19 GB (issue 25 item 7):
    now a FIFO, a device, a directory and a file over 4 KiB are one line, before any connection
    and without reading them."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b"c" * 5000)
    for path, why in ((fifo, "FIFO"), ("/dev/zero", "character device"),
                      (tmp_path, "directory"), (big, "larger than 4096 bytes")):
        rc, _out, err, rss = support.run_capped("snapshot", "nobody_here@localhost",
                                               "--cookie-file", str(path), timeout=20)
        assert rc == 2, err
        assert len(err.strip().splitlines()) == 1 and why in err
        assert rss < 200 << 20


def _snapshot_doc(**changes) -> dict:
    import json

    from beamalloc.collector.sources import read_file

    doc = json.loads(read_file(str(DATA / "hand_recon.txt")).to_json())
    doc["source"] = "json"
    doc.update(changes)
    return doc


def test_wrapped_pool_counts_are_read_as_the_vm_means_them(tmp_path, cli):
    """binary_alloc's mbcs_pool carrier count really reads 18446744073709551513 (-103) on a
    fragmented node: it was summed raw ("36893488147419103127 carriers not read"). Now taken
    as 0 with a note saying what it was, on every command."""
    import json

    doc = _snapshot_doc()
    pools = [a for a in doc["allocators"] if a["allocator"] == "binary_alloc"][:2]
    assert pools, "the sample has binary_alloc instances"
    for a in pools:
        a["mbcs_pool"] = {"blocks": {}, "carriers": 18446744073709551513, "carriers_size": 0,
                          "counters": {}}
    path = tmp_path / "wrapped.json"
    path.write_text(json.dumps(doc))
    for command in (["analyze"], ["recommend", "--no-predict"], ["snapshot", "--json"]):
        res = cli(*command, str(path))
        assert res.returncode == 0, res.stderr
        assert "36893488147419" not in res.stdout + res.stderr
        # only in the two notes that say what it was
        assert (res.stdout + res.stderr).count("18446744073709551513") <= 2
    snap = json.loads(cli("snapshot", "--json", str(path)).stdout)
    assert sum("which is -103" in n for n in snap["notes"]) == 2
    assert all(a["mbcs_pool"]["carriers"] == 0 for a in snap["allocators"]
               if a.get("mbcs_pool") and a["allocator"] == "binary_alloc")


@pytest.mark.parametrize("change, where", [
    ({"carriers_skipped": -1}, "carriers_skipped"),
    ({"carriers": [{"allocator": "binary_alloc", "instance": 1, "in_pool": False,
                    "size": 1 << 64, "blocks": 0, "blocks_size": 0,
                    "free_histogram": {"start": 128, "counts": []}}]}, "carriers[0]"),
    ({"carriers": [{"allocator": "binary_alloc", "instance": 10 ** 9, "in_pool": False,
                    "size": 1, "blocks": 0, "blocks_size": 0,
                    "free_histogram": {"start": 128, "counts": []}}]}, "carriers[0]"),
    ({"notes": ["n"] * 100_000}, "notes"),
])
def test_snapshot_ranges_on_load(change, where, tmp_path, cli):
    """A carrier of 2^64 bytes, an instance of 10^9, -1 carriers skipped were accepted ("-1
    carriers were not read"); 100,000 notes took a minute to print. Each is one line now."""
    import json

    path = tmp_path / "range.json"
    path.write_text(json.dumps(_snapshot_doc(**change)))
    res = cli("analyze", str(path))
    assert res.returncode == 2, res.stderr
    line = _one_clear_line(res)
    assert where in line and path.name in line


@pytest.mark.parametrize("kind", ["json", "term"])
def test_text_that_would_build_millions_of_lists_is_refused_before_parsing(kind, tmp_path):
    """JSON and term text bound what they build as ETF does: 20 Mi empty lists (60 MB of
    `[],`) would be 1.2 GB of lists; they are counted first (one line, exit 2, under 200 MiB)."""
    body = b"[" + b"[]," * (20 << 20) + b"[]]"
    data = (b'{"schema": "beamalloc.snapshot/1", "extra": {"x": ' + body + b"}}"
            if kind == "json" else b"{[{total,1}]," + body + b"}.")
    path = tmp_path / f"lists.{kind}"
    path.write_bytes(data)
    rc, out, err, rss = support.run_capped("analyze", str(path), timeout=60)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "lists, tuples or objects" in err
    assert rss < 200 << 20, f"peak {rss >> 20} MiB"


def test_a_node_listing_more_carriers_than_asked_is_cut_off():
    """instrument:carriers/1 answers for whole instances up to --max-carriers: a node sending
    500,000 carriers against a cap of 10 (each one an object of ours) gets no per-carrier data
    and a note, not 500,000 Carrier objects."""
    from beamalloc.collector.instrument import add_carriers
    from beamalloc.collector.terms import Atom
    from beamalloc.snapshot import Snapshot

    one = (Atom("binary_alloc"), Atom("false"), 32768, 0,
           [(Atom("binary_alloc"), 1, 64)], (0,) * 18)
    p = {"carriers": [(1, (Atom("ok"), ((128, 18), [one] * 500_000)))],
         "carrier_hist": (128, 18), "carriers_cap": 10}
    snap = Snapshot(node="a@b", source="live")
    add_carriers(snap, p)
    assert snap.carriers is None and "more than 1,020 carriers" in (snap.carriers_unavailable or "")
    p["carriers"] = [(1, (Atom("ok"), ((128, 18), [one] * 10)))]
    snap = Snapshot(node="a@b", source="live")
    add_carriers(snap, p)
    assert snap.carriers is not None and len(snap.carriers) == 10
