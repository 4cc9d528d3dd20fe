"""Where the Erlang cookie comes from (docs/design.md, "Conventions": the cookie rule).

The first of: `--cookie-file F`; `$BEAMALLOC_COOKIE`; `$RELEASE_COOKIE` (an Elixir release's
own variable: a release started with it set, as in a container or pod spec, uses it over its
file); `$RELEASE_ROOT/releases/COOKIE` (the file a mix release writes, and reads when
RELEASE_COOKIE is unset); `~/.erlang.cookie`. The cookie comes back as a `Cookie`, which names
its source: an error says which source was tried ("authentication failed with the cookie from
$RELEASE_COOKIE"), never the cookie, nor any character of it.

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
#: An Elixir release's cookie: its environment variable, and its file under RELEASE_ROOT (the
#: release's start script reads the variable, else that file: bin/APP of `mix release`).
RELEASE_VAR = "RELEASE_COOKIE"
RELEASE_ROOT_VAR = "RELEASE_ROOT"
RELEASE_FILE = Path("releases", "COOKIE")
#: An atom's limit in characters (erlang:system_info(atom_limit) is the count, not the length).
MAX_LEN = 255
#: Largest cookie file read: 255 characters of up to 2 bytes in UTF-8, a line end, room for
#: white space. More is not a cookie file (a /dev/zero grew to 19 GB: issue 25).
MAX_FILE = 4096


class CookieError(InputError):
    """No usable cookie: missing, unreadable or empty."""


class Cookie(str):
    """A cookie (the string itself) and its `source`, as an error names it: "$RELEASE_COOKIE",
    "--cookie-file /etc/app/cookie". repr() shows the source only, so a cookie that ends up in
    a traceback or a debug line is not shown either."""

    source: str

    def __new__(cls, value: str, source: str) -> Cookie:
        self = super().__new__(cls, value)
        self.source = source
        return self

    def __repr__(self) -> str:
        return f"<cookie from {self.source}>"


def source_of(cookie: str) -> str | None:
    """Where `cookie` came from, if resolve_cookie() gave it (a library caller's plain string
    has no source to name)."""
    return cookie.source if isinstance(cookie, Cookie) else None


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


def resolve_cookie(cookie_file: str | None) -> Cookie:
    """The cookie to present to the target node, from the first source that is set."""
    if cookie_file:
        path = Path(cookie_file).expanduser()
        return Cookie(_read(path, "cookie file"), f"--cookie-file {path}")
    for var in (ENV_VAR, RELEASE_VAR):
        env = os.environ.get(var, "").strip()
        if env:  # set but empty counts as unset
            return Cookie(check_cookie(env, f"${var}"), f"${var}")
    root = os.environ.get(RELEASE_ROOT_VAR, "").strip()
    if root:
        path = Path(root).expanduser() / RELEASE_FILE
        return Cookie(_read(path, f"the release's cookie file (${RELEASE_ROOT_VAR})"),
                      f"${RELEASE_ROOT_VAR}/{RELEASE_FILE} ({path})")
    default = Path.home() / ".erlang.cookie"
    if not default.exists():
        raise CookieError(f"no cookie: pass --cookie-file, set {ENV_VAR} or {RELEASE_VAR} (or "
                          f"{RELEASE_ROOT_VAR}, for its {RELEASE_FILE}), or create {default}")
    return Cookie(_read(default, "cookie file"), str(default))
