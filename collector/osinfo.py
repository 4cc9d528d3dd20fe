"""What the OS of this host says of a node running on it: its RSS, what it could give back
(LazyFree), the host's MemAvailable, its memory cgroup and open-file limit (/proc, cgroup).
Only for a node of this host: a snapshot of a remote node has none of these."""

from __future__ import annotations

import itertools
import os
import re
import socket
from pathlib import Path

from beamalloc.collector.transport import split_node
from beamalloc.snapshot import Snapshot


def local_host_names() -> set[str]:
    fqdn = socket.getfqdn()
    host = socket.gethostname()
    return {host, host.split(".")[0], fqdn, fqdn.split(".")[0], "localhost", "127.0.0.1", "::1"}


def is_local_host(host: str) -> bool:
    """`host in local_host_names()`, asking the resolver for this host's full name (getfqdn:
    a lookup, and the idna codec) only when the names at hand do not match."""
    name = socket.gethostname()
    return host in (name, name.split(".")[0], "localhost", "127.0.0.1", "::1") \
        or host in local_host_names()


def rss(pid: int | None, node: str) -> int | None:
    """VmRSS of `pid` if it is a beam process of `node` on this host, else None."""
    if pid is None:
        return None
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    if not os.path.basename(argv[0]).startswith(b"beam"):
        return None
    name, host = split_node(node)
    for flag, value in itertools.pairwise(argv):
        if flag in (b"-sname", b"-name"):
            got = value.decode("utf-8", "replace")
            got_name, _, got_host = got.partition("@")
            if got_name != name or (got_host and got_host != host):
                return None
            if not got_host and not is_local_host(host):
                return None
            break
    else:  # distribution started at run time: the host must at least be this one
        if not is_local_host(host):
            return None
    return kb_field(status, "VmRSS")


def container(snap: Snapshot, limits: dict[str, int]) -> None:
    """The node's memory cgroup and open-file limit (collector/cgroup.py), same host only."""
    from beamalloc.collector.cgroup import read_cgroup, read_nofile

    assert snap.os_pid is not None
    cg = read_cgroup(snap.os_pid)
    if cg is not None:
        snap.extra["cgroup"] = cg.to_json()
    if (nofile := read_nofile(snap.os_pid)) is not None:
        limits["nofile"] = nofile


def kb_field(text: str, key: str) -> int | None:
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def os_memory(pid: int | None) -> tuple[int | None, int | None]:
    """(LazyFree of `pid` from smaps_rollup, the host's MemAvailable); None where unreadable.
    smaps_rollup is one read however many mappings beam.smp has (Linux >= 4.14)."""
    out: list[int | None] = []
    for path, key in ((f"/proc/{pid}/smaps_rollup", "LazyFree"), ("/proc/meminfo", "MemAvailable")):
        try:
            out.append(kb_field(Path(path).read_text(), key))
        except OSError:
            out.append(None)
    return out[0], out[1]
