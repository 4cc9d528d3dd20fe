"""collector/cookie.py: --cookie-file, else $BEAMALLOC_COOKIE, else $RELEASE_COOKIE, else
$RELEASE_ROOT/releases/COOKIE, else ~/.erlang.cookie; each named as its source (the live test of
a release's sources: tests/live/test_pastes_live.py)."""

from __future__ import annotations

import pytest

from beamalloc.collector.cookie import CookieError, resolve_cookie, source_of


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("BEAMALLOC_COOKIE", "RELEASE_COOKIE", "RELEASE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_order(home, monkeypatch) -> None:
    (home / ".erlang.cookie").write_text("FROMHOME\n")
    assert resolve_cookie(None) == "FROMHOME"
    monkeypatch.setenv("BEAMALLOC_COOKIE", "FROMENV")
    assert resolve_cookie(None) == "FROMENV"
    f = home / "c"
    f.write_text("  FROMFILE \n")
    assert resolve_cookie(str(f)) == "FROMFILE"


def test_empty_env_counts_as_unset(home, monkeypatch) -> None:
    (home / ".erlang.cookie").write_text("FROMHOME")
    monkeypatch.setenv("BEAMALLOC_COOKIE", "")
    assert resolve_cookie(None) == "FROMHOME"


def test_none_anywhere(home) -> None:
    with pytest.raises(CookieError, match="no cookie: pass --cookie-file"):
        resolve_cookie(None)


@pytest.mark.parametrize("content, words", [("", "is empty"), ("a\nb", "more than one line")])
def test_bad_file_never_echoes_content(home, content, words) -> None:
    f = home / "c"
    f.write_text(content)
    with pytest.raises(CookieError, match=words) as ei:
        resolve_cookie(str(f))
    assert content.strip() == "" or content.split()[0] not in str(ei.value).split()


def test_missing_file(home) -> None:
    with pytest.raises(CookieError, match="does not exist"):
        resolve_cookie(str(home / "nope"))


def test_release_sources_in_order_each_named(home, monkeypatch) -> None:
    (home / ".erlang.cookie").write_text("FROMHOME")
    assert source_of(resolve_cookie(None)) == str(home / ".erlang.cookie")
    rel = home / "rel"
    (rel / "releases").mkdir(parents=True)
    (rel / "releases" / "COOKIE").write_text("FROMRELEASEFILE\n")
    monkeypatch.setenv("RELEASE_ROOT", str(rel))
    c = resolve_cookie(None)
    assert c == "FROMRELEASEFILE"
    assert source_of(c) == f"$RELEASE_ROOT/releases/COOKIE ({rel}/releases/COOKIE)"
    monkeypatch.setenv("RELEASE_COOKIE", "FROMRELEASEENV")
    c = resolve_cookie(None)
    assert (c, source_of(c)) == ("FROMRELEASEENV", "$RELEASE_COOKIE")
    monkeypatch.setenv("BEAMALLOC_COOKIE", "FROMENV")
    c = resolve_cookie(None)
    assert (c, source_of(c)) == ("FROMENV", "$BEAMALLOC_COOKIE")
    f = home / "c"
    f.write_text("FROMFILE")
    c = resolve_cookie(str(f))
    assert (c, source_of(c)) == ("FROMFILE", f"--cookie-file {f}")
    assert "FROMFILE" not in repr(c) and str(f) in repr(c)  # a repr shows the source only
    assert source_of("plain") is None


def test_release_root_without_its_cookie_file(home, monkeypatch) -> None:
    monkeypatch.setenv("RELEASE_ROOT", str(home / "norelease"))
    why = r"the release's cookie file \(\$RELEASE_ROOT\) \S+ does not exist"
    with pytest.raises(CookieError, match=why):
        resolve_cookie(None)
