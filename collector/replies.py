"""What a target's replies must look like before they are used: a target could send anything
(issue 25, tests/test_hostile_peer.py); a reply of the wrong shape is described, never quoted,
and is the one line `bad_reply` (exit 3). The same checks for both transports
(collector/transport.py)."""

from __future__ import annotations

import re
from typing import Any

from beamalloc.collector import dist
from beamalloc.collector.terms import Atom
from beamalloc.collector.transport import NodeError
from beamalloc.snapshot import describe

#: The tables erts sizes at boot for its limits, and what they hold (analyzer/limits.py).
LIMIT_KEYS = ("process_limit", "port_limit", "process_count", "port_count")



def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


_int = as_int


def instrument_result(v: Any) -> Any:
    """instrument's answer as a value: an exception there (a target without the tools
    application answers undef) is `{exception, Class, Reason}`, not a failed snapshot."""
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "badrpc":
        why = v[1]
        if isinstance(why, tuple) and len(why) == 2 and why[0] == "EXIT":
            x = why[1]
            if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], list):
                return (Atom("exception"), Atom("error"), x[0])
            return (Atom("exception"), Atom("exit"), x)
        return (Atom("exception"), Atom("throw"), why)
    return v


#: The most allocators a node lists in alloc_util_allocators (OTP 25 has 12, with every
#: optional one on 14): a reply listing more is not a node's, and each name is one request.
MAX_ALLOCATORS = 64
#: An allocator's name, as alloc_util names them (and no other text: it becomes a request).
_ALLOC_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: The most erlang:memory() entries (OTP 25 has 11).
MAX_MEMORY_KEYS = 64


def bad_reply(what: str, v: Any) -> dist.DistError:
    """A reply of the wrong shape: described, never quoted (docs/robustness.md)."""
    return dist.DistError("bad_reply", f"{what}: {describe(v)}".encode())


def check_utils(v: Any) -> list[Atom]:
    if not (isinstance(v, list) and len(v) <= MAX_ALLOCATORS
            and all(type(a) is Atom and _ALLOC_NAME.fullmatch(a) for a in v)):
        raise bad_reply(f"alloc_util_allocators is not a list of at most {MAX_ALLOCATORS} "
                         "allocator names", v)
    return list(dict.fromkeys(v))


def _is_text(v: Any, limit: int = 64) -> bool:
    return type(v) is str and len(v) <= limit and v.isprintable()


#: What each of _SIMPLE's replies must be (erlang:memory/0, system_info/1, os:getpid/0).
_SHAPES: dict[str, tuple[str, Any]] = {
    "memory": (f"a list of at most {MAX_MEMORY_KEYS} {{atom, integer}} pairs",
               lambda v: isinstance(v, list) and len(v) <= MAX_MEMORY_KEYS and all(
                   isinstance(x, tuple) and len(x) == 2 and type(x[0]) is Atom
                   and _int(x[1]) is not None for x in v)),
    "otp_release": ("a release string", _is_text),
    "version": ("a version string", _is_text),
    "wordsize": ("4 or 8", lambda v: _int(v) in (4, 8)),
    "schedulers": ("a scheduler count", lambda v: _int(v) is not None and 1 <= v <= 1024),
    "os_pid": ("a process id", lambda v: _is_text(v, 10) and v.isdigit()),
    **{k: ("a count", lambda v: _int(v) is not None and 0 <= v < 1 << 32) for k in LIMIT_KEYS},
}


def check_reply(key: Any, v: Any) -> Any:
    """`v` if it has the shape `key`'s reply must have; else bad_reply (exit 3)."""
    if isinstance(key, tuple):  # {allocator, A}: its info list, or false when not started
        if not (isinstance(v, list) or v == "false"):
            raise bad_reply(f"system_info({{allocator, {key[1]}}}) is not a list", v)
        return v
    what, ok = _SHAPES[str(key)]
    if not ok(v):
        raise bad_reply(f"{key} is not {what}", v)
    return v


#: The most members `snapshot --cluster` reads: each is a connection and a snapshot.
MAX_CLUSTER = 1024


def cluster_members(node: str, names: Any) -> list[str]:
    """`node` and the names of its nodes() reply, which must be a list of at most MAX_CLUSTER
    node names (a target could list a million, each a snapshot)."""
    if not (isinstance(names, list) and len(names) <= MAX_CLUSTER
            and all(type(n) is Atom and n.isprintable() and "@" in n for n in names)):
        raise NodeError(f"{node} sent a reply no Erlang node sends: nodes() is not a list of "
                        f"at most {MAX_CLUSTER} node names")
    return list(dict.fromkeys([node, *(str(n) for n in names)]))
