"""collector/cookie.py: --cookie-file, else $BEAMALLOC_COOKIE, else ~/.erlang.cookie."""

from __future__ import annotations

import pytest

from beamalloc.collector.cookie import CookieError, resolve_cookie


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("BEAMALLOC_COOKIE", raising=False)
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
