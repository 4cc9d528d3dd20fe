"""One interface to a target, whatever reaches it (issue 27 item 2): what the snapshot, the
process scan, the ETS scan and the GC probe need of a node, and the one-line errors of failing.

Two implementations, chosen by direct():
- collector/dist.py's Connection: our own client, plain TCP distribution (IPv4 or IPv6, any
  epmd port, epmd-less); no BEAM boots on our side;
- collector/relay.py's RelayTransport: a hidden node of ours that only relays the same calls,
  where our client cannot go (TLS and any other -proto_dist), or with $BEAMALLOC_HIDDEN_NODE=1.

A call's result is rex's (`{badrpc, {'EXIT', X}}` for an exception on the target) on both, a
failure is dist.DistError(kind, detail) on both; node_error() makes it the one line the user
reads (exit 3).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Protocol

from beamalloc.collector import dist
from beamalloc.collector.access import Access
from beamalloc.collector.cookie import source_of
from beamalloc.collector.terms import format_term
from beamalloc.errors import InputError, NodeUnavailable

#: Our hidden names are beamalloc_1 .. beamalloc_POOL, for both transports (dist.Local, and the
#: ?POOL of beamalloc_link.erl): a target learns at most POOL atoms from all our runs.
NAME_POOL = 16

#: Set to 1, every node is reached through the hidden node's relay, as before collector/dist.py:
#: the escape hatch should a target refuse our own client (and what the relay's tests use).
ENV_HIDDEN_NODE = "BEAMALLOC_HIDDEN_NODE"

# The host may be an IPv6 address (`app@::1`, long names over inet6_tcp).
_NODE = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.+-]*)@([A-Za-z0-9_:][A-Za-z0-9_.:-]*)\Z")


class NodeError(NodeUnavailable):
    """The node is unreachable, rejected the cookie, went down or stalled (one line, exit 3)."""


class NodeNameError(InputError):
    """Not a node name of the form name@host."""


def split_node(node: str) -> tuple[str, str]:
    m = _NODE.match(node)
    if not m:
        raise NodeNameError(f"not a node name (name@host): {node!r}")
    return m.group(1), m.group(2)


class Transport(Protocol):
    """A connection to one target. send()/send_raw() put a call in flight and return its key,
    receive() waits for its result by `deadline` (time.monotonic()); many calls may be in flight
    at once. A RawReply (send_raw) is the result's bytes, undecoded, for the caller that reads a
    large regular reply itself or sends parts of it back (pids, ports, table ids)."""

    target: str
    #: where the time went: seconds decoding, bytes and messages received
    stats: dict[str, Any]

    def send(self, m: str, f: str, args: list[Any]) -> str: ...

    def send_raw(self, m: str, f: str, args: list[Any]) -> str: ...

    def receive(self, key: str, deadline: float) -> Any: ...

    def call(self, m: str, f: str, args: list[Any], deadline: float) -> Any: ...

    def pid(self, text: str) -> dist.RawTerm: ...

    def pids(self, texts: list[str]) -> dist.RawTerm: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...


def direct(access: Access) -> bool:
    """Does collector/dist.py reach the target, rather than the hidden node's relay? For plain
    TCP distribution, IPv4 or IPv6, any epmd port, epmd-less; TLS distribution (and a vendor's
    -proto_dist) take the relay (docs/access.md), as does $BEAMALLOC_HIDDEN_NODE=1."""
    return (access.proto in ("inet_tcp", "inet6_tcp")
            and os.environ.get(ENV_HIDDEN_NODE, "").strip() != "1")


def us() -> int:
    """Now, in Unix microseconds (the stamps of a snapshot's timings)."""
    return time.time_ns() // 1000


def result(v: Any) -> Any:
    """rex's answer as erpc's: `{badrpc, {'EXIT', X}}` is an exception on the target."""
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "badrpc":
        try:
            why = format_term(v[1])
        except TypeError:  # a map (OTP 24+ error_info): said without it
            why = "an exception on the target"
        raise dist.DistError("call_failed", why[:2000].encode())
    return v


# ---- the cookie, kept out of messages ------------------------------------------------------

def scrub(text: str, cookie: str) -> str:
    """`text` without any piece of the cookie: plain, as the hex the hidden node reads, or as
    the list of character codes Erlang prints for a string (`~p` of a list of integers); any run
    of 4 or more characters found in one of those forms becomes `***` (a truncated print of the
    cookie is still a secret). Over-redacting a message is the safe side."""
    if not cookie:
        return text
    for form in (cookie, cookie.encode("utf-8", "surrogatepass").hex(),
                 ",".join(str(ord(c)) for c in cookie)):
        text = _redact(text, form, min(4, len(form)))
    return text


def _redact(text: str, secret: str, least: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        j = i + least
        if j <= len(text) and text[i:j] in secret:
            while j < len(text) and text[i:j + 1] in secret:
                j += 1
            out.append("***")
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _text(v: Any, cookie: str = "") -> str:
    text = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    return scrub(text, cookie)


# ---- errors ------------------------------------------------------------------------------

#: Names of epmd's list an error line shows (a hostile epmd listed 20,000).
SHOW_NAMES = 10


def node_error(node: str, kind: str, detail: Any, timeout: float, cookie: str,
               access: Access | None = None) -> NodeError:
    """The one-line message for a failure `DistError(kind, detail)` of either transport.

    Free-form details (exit reasons) are scrubbed of the cookie: a crash reason can quote a
    function's arguments. A connection that failed names the access options it used.
    """
    name, host = split_node(node)
    how = (access or Access()).describe()
    if kind == "connect_failed" and how:
        return NodeError(f"cannot connect to {node} ({how}): "
                         f"{_text(detail, cookie)[:200] or 'no reason given'}")
    if kind == "no_such_node":
        others = sorted(_text(n)[:64] for n in detail if not _text(n).startswith("beamalloc_"))
        shown = ", ".join(others[:SHOW_NAMES]) + (f" and {len(others) - SHOW_NAMES} more"
                                                  if len(others) > SHOW_NAMES else "")
        known = f"epmd there knows {shown}" if others else "epmd there knows no node"
        if how:  # which epmd we asked, or that the node may be epmd-less
            known += f"; {how}"
        return NodeError(f"no node named {name} on host {host} ({known})")
    if kind == "host_unreachable":
        return NodeError(f"cannot reach epmd on host {host}: the host is unreachable or no "
                         f"Erlang node runs there ({_text(detail)})")
    if kind == "bad_cookie":  # which source was tried, never the cookie (collector/cookie.py)
        src = source_of(cookie)
        return NodeError(f"authentication failed{f' with the cookie from {src}' if src else ''}: "
                         f"the node is up but rejected our cookie ({node})")
    if kind == "nodedown":
        return NodeError(f"node {node} went down during the snapshot")
    if kind == "timeout":
        what = "connecting to" if detail == "connecting" else "waiting for allocator data from"
        return NodeError(f"timed out after {timeout:g} s {what} {node}")
    if kind == "connect_failed":  # epmd knows the node, the handshake failed: a hint
        return NodeError(f"cannot connect to {node}: {_text(detail, cookie)[:160]} (a node run "
                         "with TLS or IPv6 distribution needs --proto-dist, docs/access.md)")
    if kind == "call_failed":
        return NodeError(f"a call on {node} failed: {_text(detail, cookie)[:200]}")
    if kind == "bad_reply":
        return NodeError(f"{node} sent a reply no Erlang node sends: {_text(detail)[:200]}")
    if kind == "died_in_handshake":
        return NodeError(f"node {node} went away during the connection handshake (epmd listed "
                         f"it when we connected, and no longer does: "
                         f"{_text(detail, cookie)[:160]})")
    if kind == "hidden_node":  # the relay itself failed (collector/relay.py): said there
        return NodeError(_text(detail, cookie)[:300])
    if kind in ("names_in_use", "no_distribution", "no_cookie"):
        return start_error(kind, detail, cookie)
    return NodeError(f"the beamalloc hidden node failed ({kind}): {_text(detail, cookie)[:200]}")


def start_error(kind: str, detail: Any, cookie: str = "") -> NodeError:
    """The message for a hidden name we could not hold, or a hidden node that could not start
    distribution on our side."""
    if kind == "no_cookie":
        return NodeError("the beamalloc hidden node received no cookie")
    if kind == "names_in_use":
        return NodeError(f"all {NAME_POOL} beamalloc node names (beamalloc_1..{NAME_POOL}) are "
                         "registered with epmd on this host: as many beamalloc runs at once, "
                         "or nodes of that name; retry when one ends")
    return NodeError(f"cannot start Erlang distribution on this host: "
                     f"{_text(detail, cookie)[:200]}")
