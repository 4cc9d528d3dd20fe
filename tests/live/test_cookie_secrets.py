"""No byte of a cookie anywhere we write, whatever its characters; a cookie Erlang cannot use is
one clear line and exit 2 (docs/robustness.md, "Cookies").

OTP keeps a cookie as an atom (at most 255 characters) and digests it as bytes in the handshake:
a character above U+00FF fails the digest on both sides, so no node can use such a cookie
(a target started with one accepts no connection either). Characters U+0080..U+00FF are
usable: a target started with `-setcookie` in UTF-8 gets them as latin-1 characters, and
beamalloc must get through with the same cookie and still write none of it.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys

import pytest
from support import SecretWatch, run_cli

from beamalloc.collector import live, session, transport
from beamalloc.collector.cookie import CookieError
from beamalloc.timeseries.store import Store
from live.conftest import HOST, start_node

pytestmark = pytest.mark.live


def forms(cookie: str) -> list[bytes]:
    """How a cookie could show up in bytes: UTF-8, latin-1, hex of either, Erlang's list of
    character codes; and 6-character pieces of the text forms (a truncated print)."""
    out = [cookie.encode("utf-8", "surrogatepass"), cookie.encode("utf-8", "surrogatepass").hex()
           .encode(), ",".join(str(ord(c)) for c in cookie[:6]).encode()]
    if all(ord(c) < 256 for c in cookie):
        out += [cookie.encode("latin-1"), cookie.encode("latin-1").hex().encode()]
    pieces = [cookie[i:i + 6] for i in range(0, max(1, len(cookie) - 5))]
    out += [p.encode("utf-8", "surrogatepass") for p in pieces]
    return out


def leaks(cookie: str, data: bytes) -> list[bytes]:
    return [f for f in forms(cookie) if f in data]


def _env(cookie: str) -> dict[str, str]:
    return dict(os.environ, BEAMALLOC_COOKIE=cookie)


UNUSABLE = {
    "too long": "L" + secrets.token_hex(150),  # 301 characters
    "non-latin1": "кука-" + secrets.token_hex(8),
    "cjk": "秘密の" + secrets.token_hex(8),
    "emoji": "\U0001f36a" + secrets.token_hex(8),
}


@pytest.mark.parametrize("kind", sorted(UNUSABLE))
@pytest.mark.parametrize("command", ["snapshot", "watch"])
@pytest.mark.parametrize("via", ["env", "file"])
def test_unusable_cookie_is_one_line_and_exit_2(tmp_path, kind, command, via) -> None:
    cookie = UNUSABLE[kind]
    args = ["snapshot", f"nobody_here@{HOST}"] if command == "snapshot" else [
        "watch", f"nobody_here@{HOST}", "--store", str(tmp_path / "w.db"), "--duration", "3"]
    env = dict(os.environ)
    env.pop("BEAMALLOC_COOKIE", None)
    if via == "file":
        f = tmp_path / "cookie"
        f.write_text(cookie + "\n", encoding="utf-8")
        args += ["--cookie-file", str(f)]
    else:
        env["BEAMALLOC_COOKIE"] = cookie
    r = subprocess.run([sys.executable, "-m", "beamalloc.cli", *args], capture_output=True,
                       timeout=60, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count(b"\n") == 1 and r.stdout == b"", r.stderr
    assert leaks(cookie, r.stdout + r.stderr) == []
    line = r.stderr.decode()
    assert ("at most 255" in line) if kind == "too long" else ("above U+00FF" in line), line
    assert (str(tmp_path / "cookie") in line) if via == "file" else ("BEAMALLOC_COOKIE" in line)
    assert not (tmp_path / "w.db").exists()


@pytest.mark.parametrize("kind", sorted(UNUSABLE))
def test_unusable_cookie_starts_no_node(kind, marker, hidden) -> None:
    with pytest.raises(CookieError) as ei:
        live.snapshot_node(f"nobody_here@{HOST}", UNUSABLE[kind])
    assert leaks(UNUSABLE[kind], str(ei.value).encode()) == []
    with pytest.raises(CookieError):
        session.Session(UNUSABLE[kind])
    assert hidden() == []


def test_latin1_cookie_works_and_is_written_nowhere(tmp_path) -> None:
    """A usable cookie with characters above ASCII: `watch` samples the node that has it, fails
    on one with another cookie, and neither stderr, the store (its gaps rows included) nor the
    node pages hold any byte of it."""
    cookie = "Çøøkïé-ÿ-" + secrets.token_hex(8)
    good = start_node([], cookie=cookie)
    other = start_node([])  # another cookie: authentication fails, a gap is stored
    db = tmp_path / "w.db"
    try:
        with SecretWatch(cookie, skip=good.pid) as watch:
            # Through the hidden node: it is what holds the cookie outside our process (our own
            # client keeps it in our memory and sends only digests).
            r = run_cli("watch", good.node, other.node, "--store", str(db), "--interval", "0.5",
                        "--duration", "5", "--timeout", "3",
                        env={**_env(cookie), "BEAMALLOC_HIDDEN_NODE": "1"}, timeout=120)
        assert watch.seen, "no hidden node was seen"
        assert watch.leaks == []
    finally:
        good.stop()
        other.stop()
    assert r.returncode in (0, 3), r.stderr
    assert leaks(cookie, (r.stdout + r.stderr).encode()) == []
    with Store(db, readonly=True) as st:
        counts = {n["node"]: n["samples"] for n in st.list_nodes()}
        assert counts.get(good.node, 0) >= 2, (counts, r.stderr)
        gaps = st.gaps(other.node)
    assert gaps and "authentication failed" in gaps[0]["reason"], gaps
    for f in tmp_path.iterdir():
        assert leaks(cookie, f.read_bytes()) == [], f

    from beamalloc.webui.app import create_app

    client = create_app(db).test_client()
    for n in (good.node, other.node):
        page = client.get("/node", query_string={"n": n})
        assert page.status_code == 200
        assert leaks(cookie, page.data) == []
        api = client.get("/api/node", query_string={"n": n})
        assert leaks(cookie, api.data) == []
    assert re.search(r"authentication failed", client.get(
        "/node", query_string={"n": other.node}).get_data(as_text=True))


def test_scrub_takes_every_form_of_the_cookie() -> None:
    """What the agent sends back is scrubbed in Python (transport.scrub) before it is shown: the
    cookie, its hex, its character codes, and any piece of 4 characters or more of those."""
    cookie = "Ñandú-" + secrets.token_hex(6)
    codes = ",".join(str(ord(c)) for c in cookie)
    for text in (f"crash: {cookie}", f"crash: {cookie[:9]}...", f"[{codes[:30]}|...]",
                 f"hex {cookie.encode().hex()[:20]}"):
        out = transport.scrub(text, cookie)
        assert leaks(cookie, out.encode()) == [] and "***" in out, out

