"""Where the Erlang cookie comes from (docs/design.md, "Conventions": the cookie rule).

`--cookie-file`, else `$BEAMALLOC_COOKIE`, else `~/.erlang.cookie`. Error messages name the
source, never the cookie, nor any character of it.

A cookie Erlang cannot use is refused here, before any node starts (exit 2): OTP keeps a cookie
as an atom, at most 255 characters, and the handshake digests its characters as bytes, so one
above U+00FF makes the digest fail on both sides (no node can use it: a target started with
such a -setcookie accepts no connection either).
"""

from __future__ import annotations

import os
from pathlib import Path

from beamalloc.errors import InputError
from beamalloc.files import open_input

ENV_VAR = "BEAMALLOC_COOKIE"
#: An atom's limit in characters (erlang:system_info(atom_limit) is the count, not the length).
MAX_LEN = 255
#: Largest cookie file read: 255 characters of up to 2 bytes in UTF-8, a line end, room for
#: white space. More is not a cookie file (a /dev/zero grew to 19 GB: issue 25).
MAX_FILE = 4096


class CookieError(InputError):
    """No usable cookie: missing, unreadable or empty."""


def _read(path: Path, what: str) -> str:
    """The cookie in `path`: a regular file only (a FIFO hung forever), of at most MAX_FILE
    bytes, refused before it is opened as every other input is (beamalloc/files.py)."""
    if not path.exists() and not path.is_symlink():
        raise CookieError(f"{what} {path} does not exist")
    try:
        with open_input(path, f"{what} {path}") as f:
            raw = f.read(MAX_FILE + 1)
    except InputError as e:
        raise CookieError(str(e)) from None
    except OSError as e:
        raise CookieError(f"cannot read {what} {path}: {e.strerror}") from None
    if len(raw) > MAX_FILE:
        raise CookieError(f"{what} {path} is larger than {MAX_FILE} bytes: not a cookie file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CookieError(f"{what} {path} is not UTF-8 text") from None
    cookie = text.strip()
    if not cookie:
        raise CookieError(f"{what} {path} is empty")
    if "\n" in cookie or "\r" in cookie:
        raise CookieError(f"{what} {path} holds more than one line")
    return check_cookie(cookie, f"the cookie in {path}")


def check_cookie(cookie: str, what: str) -> str:
    """`cookie` if Erlang can use it, else CookieError naming `what` (its source), its length
    and the position of the first bad character, never a character."""
    if not cookie:
        raise CookieError(f"{what} is empty")
    if len(cookie) > MAX_LEN:
        raise CookieError(f"{what} has {len(cookie)} characters; Erlang takes at most {MAX_LEN} "
                          "(a cookie is an atom)")
    bad = next((i for i, c in enumerate(cookie) if ord(c) > 0xFF), None)
    if bad is not None:
        raise CookieError(f"{what} has a character above U+00FF (character {bad + 1} of "
                          f"{len(cookie)}): Erlang's handshake digests a cookie as bytes, so no "
                          "node can use it")
    return cookie


def resolve_cookie(cookie_file: str | None) -> str:
    """The cookie to present to the target node."""
    if cookie_file:
        return _read(Path(cookie_file).expanduser(), "cookie file")
    env = os.environ.get(ENV_VAR, "").strip()
    if env:  # set but empty counts as unset
        return check_cookie(env, f"${ENV_VAR}")
    default = Path.home() / ".erlang.cookie"
    if not default.exists():
        raise CookieError(
            f"no cookie: pass --cookie-file, set {ENV_VAR}, or create {default}"
        )
    return _read(default, "cookie file")
