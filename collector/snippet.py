"""`beamalloc snippet`: one expression to paste where an operator already has a shell on the node,
and the reader of the file it writes (docs/access.md, "No new connection allowed").

Many sites allow no new distribution connection to a production node but do allow
`bin/app remote_console`, `bin/app eval`, `bin/app rpc` (Elixir releases) or `iex --remsh`. The
expression asks the node for what collector/collect.py asks over distribution (the same BIFs:
erlang:system_info/1 of every allocator, erlang:memory/0, the release, word size, schedulers, the
OS pid) plus the node's own /proc status, smaps_rollup and the host's meminfo where there are such
files (RSS and what the kernel could take back), and writes them as one Erlang external term
(term_to_binary, compressed) to a file. It calls only BIFs and modules every node has loaded at
boot (erlang, os, file), defines no module and loads none; the shell that evaluates it is the
operator's. Per-carrier data is not collected: it needs OTP's instrument module, which would
load on the node.

File: `{beamalloc_snippet, 1, [{Key, Value}]}` with the keys of collect.collect() (no
carriers) and `proc_status`, `smaps_rollup`, `meminfo` (binaries, or `undefined`).
"""

from __future__ import annotations

import re
from typing import Any

from beamalloc.collector import build, etf
from beamalloc.collector.terms import Atom, proplist
from beamalloc.errors import InputError
from beamalloc.snapshot import Snapshot, describe

#: The first byte of every Erlang external term (term_to_binary's version byte).
MAGIC = b"\x83"
TAG = "beamalloc_snippet"
VERSION = 1
#: The /proc texts the snippet carries, by key.
_OS_KEYS = ("proc_status", "smaps_rollup", "meminfo")

# The allocators asked for beside alloc_util_allocators' list, as collect.collect() does.
_FIXED = ("sys_alloc", "mseg_alloc", "erts_mmap", "alloc_util")
_SCALARS = ("otp_release", "version", "wordsize", "schedulers")


def _erl_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ex_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("#", "\\#") + '"'


def erlang_expression(path: str | None = None) -> str:
    """The Erlang expression (one line, ending in a dot, no single quote: it fits in
    `bin/app eval '...'`). It returns `{beamalloc_snippet, Path, Bytes}` or the write's error.
    Without `path`: /tmp/beamalloc-snippet-OSPID.etf on the node's host."""
    where = (_erl_string(path) if path
             else '"/tmp/beamalloc-snippet-" ++ os:getpid() ++ ".etf"')
    fixed = ", ".join(_FIXED)
    scalars = ", ".join(f"{{{k}, erlang:system_info({k})}}" for k in _SCALARS)
    os_files = ", ".join(f'{{{k}, R("{f}")}}' for k, f in zip(_OS_KEYS, _proc_files(), strict=True))
    return (
        "(fun() -> U = erlang:system_info(alloc_util_allocators), "
        "T0 = os:system_time(microsecond), "
        f"A = [{{X, erlang:system_info({{allocator, X}})}} || X <- [{fixed} | U]], "
        "T1 = os:system_time(microsecond), "
        "R = fun(F) -> case file:read_file(F) of {ok, D} -> D; _ -> undefined end end, "
        f"P = {where}, "
        f"B = term_to_binary({{{TAG}, {VERSION}, [{{node, node()}}, "
        "{alloc_util_allocators, U}, {memory, erlang:memory()}, "
        f"{scalars}, {{os_pid, os:getpid()}}, {{allocators, A}}, "
        f"{{sampled_at_us, (T0 + T1) div 2}}, {os_files}]}}, [compressed]), "
        f"case file:write_file(P, B) of ok -> {{{TAG}, P, byte_size(B)}}; E -> E end end)()."
    )


def elixir_expression(path: str | None = None) -> str:
    """The same in Elixir, for `bin/app rpc '...'` and `iex --remsh` (one line, no single
    quote). Only Erlang modules are called, as in the Erlang one."""
    where = (_ex_string(path) if path
             else '"/tmp/beamalloc-snippet-" <> :erlang.list_to_binary(:os.getpid()) <> ".etf"')
    fixed = ", ".join(f":{a}" for a in _FIXED)
    scalars = ", ".join(f"{k}: :erlang.system_info(:{k})" for k in _SCALARS)
    os_files = ", ".join(f'{k}: r.("{f}")' for k, f in zip(_OS_KEYS, _proc_files(), strict=True))
    return (
        "(fn -> u = :erlang.system_info(:alloc_util_allocators); "
        "t0 = :os.system_time(:microsecond); "
        f"a = for x <- [{fixed} | u], do: {{x, :erlang.system_info({{:allocator, x}})}}; "
        "t1 = :os.system_time(:microsecond); "
        "r = fn f -> case :file.read_file(f) do {:ok, d} -> d; _ -> :undefined end end; "
        f"p = {where}; "
        f"b = :erlang.term_to_binary({{:{TAG}, {VERSION}, [node: node(), "
        "alloc_util_allocators: u, memory: :erlang.memory(), "
        f"{scalars}, os_pid: :os.getpid(), allocators: a, "
        f"sampled_at_us: div(t0 + t1, 2), {os_files}]}}, [:compressed]); "
        f"case :file.write_file(p, b) do :ok -> {{:{TAG}, p, byte_size(b)}}; e -> e end end).()"
    )


def _proc_files() -> tuple[str, str, str]:
    return ("/proc/self/status", "/proc/self/smaps_rollup", "/proc/meminfo")


def how_to_paste(elixir: bool) -> str:
    """The lines `beamalloc snippet` prints on stderr beside the expression."""
    if elixir:
        return ("paste the line above into `iex --remsh NODE` or `bin/app remote`, or run "
                "`bin/app rpc '<the line>'`; it writes one file on the node's host: copy it here "
                "and give its path to any beamalloc command as SOURCE")
    return ("paste the line above into `bin/app remote_console` (or an `erl -remsh NODE` shell), "
            "or run `bin/app eval '<the line>'`; it writes one file on the node's host: copy it "
            "here and give its path to any beamalloc command as SOURCE")


# ---- the reader ---------------------------------------------------------------------------

def is_snippet(head: bytes) -> bool:
    """Does a file starting with `head` hold an Erlang external term (our snippet's format)?"""
    return head.startswith(MAGIC)


def read_snippet(data: bytes, name: str, taken_at: float | None = None) -> Snapshot:
    """The Snapshot in a file written by the snippet expression; InputError (one line, exit 2)
    for anything else."""
    try:
        term = etf.decode(data)
    except etf.ETFError as e:
        raise InputError(f"{name}: an Erlang external term that cannot be read ({e})") from None
    if not (isinstance(term, tuple) and len(term) == 3 and isinstance(term[0], Atom)
            and term[0] == TAG):
        raise InputError(f"{name}: an Erlang external term, but not one written by "
                         "`beamalloc snippet`")
    if term[1] != VERSION:  # described, never quoted: the file may be anything
        got = term[1] if type(term[1]) is int and 0 <= term[1] < 1 << 32 else describe(term[1])
        raise InputError(f"{name}: a beamalloc snippet file of version {got}; this "
                         f"beamalloc reads version {VERSION}")
    items = term[2]
    if not isinstance(items, list) or not all(isinstance(x, tuple) and len(x) == 2 and
                                              isinstance(x[0], Atom) for x in items):
        raise InputError(f"{name}: a beamalloc snippet file without its list of values")
    p = proplist(items)
    node = p.get("node")
    if not isinstance(node, Atom) or not isinstance(p.get("allocators"), list):
        raise InputError(f"{name}: a beamalloc snippet file without its node or allocators")
    body = [x for x in items if x[0] not in _OS_KEYS]
    try:
        snap = build.build_snapshot(str(node), body, taken_at=taken_at)
    except InputError as e:
        raise InputError(f"{name}: {e}") from None
    # build_snapshot looks for the pid on this host; the file's own /proc texts are the truth
    # at the time it was written, wherever it is read.
    status, smaps, meminfo = (_text(p.get(k)) for k in _OS_KEYS)
    snap.rss = _kb(status, "VmRSS")
    snap.rss_lazyfree = _kb(smaps, "LazyFree") if snap.rss is not None else None
    snap.mem_available = _kb(meminfo, "MemAvailable") if snap.rss is not None else None
    snap.notes.append(f"collected by `beamalloc snippet` in a shell on {node}; no per-carrier "
                      "data (it would load OTP's instrument module on the node)")
    return snap


def _text(v: Any) -> str:
    return v.decode("latin-1") if isinstance(v, bytes) else ""


def _kb(text: str, key: str) -> int | None:
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None
