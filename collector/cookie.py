"""Where the Erlang cookie comes from (docs/design.md, "Conventions": the cookie rule).

`--cookie-file`, else `$BEAMALLOC_COOKIE`, else `~/.erlang.cookie`. Error messages name the
source, never the cookie.
"""

from __future__ import annotations

import os
from pathlib import Path

from beamalloc.errors import InputError

ENV_VAR = "BEAMALLOC_COOKIE"


class CookieError(InputError):
    """No usable cookie: missing, unreadable or empty."""


def _read(path: Path, what: str) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CookieError(f"{what} {path} does not exist") from None
    except UnicodeDecodeError:
        raise CookieError(f"{what} {path} is not UTF-8 text") from None
    except OSError as e:
        raise CookieError(f"cannot read {what} {path}: {e.strerror}") from None
    cookie = text.strip()
    if not cookie:
        raise CookieError(f"{what} {path} is empty")
    if "\n" in cookie or "\r" in cookie:
        raise CookieError(f"{what} {path} holds more than one line")
    return cookie


def resolve_cookie(cookie_file: str | None) -> str:
    """The cookie to present to the target node."""
    if cookie_file:
        return _read(Path(cookie_file).expanduser(), "cookie file")
    env = os.environ.get(ENV_VAR, "").strip()
    if env:  # set but empty counts as unset
        return env
    default = Path.home() / ".erlang.cookie"
    if not default.exists():
        raise CookieError(
            f"no cookie: pass --cookie-file, set {ENV_VAR}, or create {default}"
        )
    return _read(default, "cookie file")
