"""The snapshot's calls, over either transport (collector/transport.py): the allocator data
and the node's facts, then its carriers (instrument:carriers/1) and allocation tags. One copy,
whatever reaches the node (issue 27 item 2).

Nothing is loaded on the target: each call runs in a process rex (our client) or erpc (the
relay) spawns there, and the calls are BIFs or os:getpid/0 (loaded at boot). The one exception
is per-carrier data (cap > 0): OTP's own instrument module (tools application; runtime_tools
from OTP 27) loads from the target's own code path on first use, as any `instrument:carriers()`
typed in a shell would (docs/snapshot-schema.md, "carriers"). The one thing these calls change
on the target is the "max since last call" element of each statistic, which every
system_info({allocator, _}) resets (docs/erts/alloc_util.md §6.1), as any poller such as
recon_alloc does.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

from beamalloc._refalloc import AllocReply
from beamalloc.collector import dist, etf
from beamalloc.collector.instrument import port_origins
from beamalloc.collector.replies import (
    LIMIT_KEYS,
    check_reply,
    check_utils,
    instrument_result,
)
from beamalloc.collector.replies import (
    as_int as _int,
)
from beamalloc.collector.system_info import native_info
from beamalloc.collector.terms import Atom, Opaque
from beamalloc.collector.transport import Transport, result, us
from beamalloc.snapshot import wrapped

#: instrument:carriers/1 histograms: free blocks from 256 B (the scan doubles the start it is
#: given, erl_alloc_util.c gather_cinfo) in 18 doubling buckets, the last one open from ~32 MiB.
HIST_START, HIST_WIDTH = 128, 18
#: instrument:allocations/1 walks every block again: it is skipped (and said so) when the tagged
#: allocators hold more blocks than this (a 2 GiB binary_alloc of 1 KB binaries has 2 M; the walk
#: costs the target about 70 ms per million blocks on this machine, tests/bench/bench_carriers.py).
MAX_TAGGED_BLOCKS = 500_000
_SIMPLE = (("memory", "erlang", "memory", []),
           ("otp_release", "erlang", "system_info", [Atom("otp_release")]),
           ("version", "erlang", "system_info", [Atom("version")]),
           ("wordsize", "erlang", "system_info", [Atom("wordsize")]),
           ("schedulers", "erlang", "system_info", [Atom("schedulers")]),
           *((k, "erlang", "system_info", [Atom(k)]) for k in LIMIT_KEYS),
           ("os_pid", "os", "getpid", []))
_FIXED = ("sys_alloc", "mseg_alloc", "erts_mmap", "alloc_util")


def collect(conn: Transport, target: str, cap: int, deadline: float,
            main_us: int, connected_us: int,
            meanwhile: Callable[[list[Any]], None] | None = None) -> Any:
    """`{ok, [{Key, Value}]}`, what build.build_snapshot() reads, from one request per BIF, all
    in flight at once: each system_info({allocator, A}) gathers every scheduler's instance on
    the target, so the wall time is about the slowest call rather than the sum. The allocator
    list is only known after alloc_util_allocators answers. With `cap` > 0 the carriers are
    read afterwards (carriers()). Every reply is checked for its shape before use (a target
    could send anything: issue 25), and the deadline between steps. `meanwhile(body)`, when
    carriers are read, is called with the reply but its carriers while the target scans them
    (live.snapshot_node starts the Snapshot there: build.start_snapshot)."""
    util_key = conn.send("erlang", "system_info", [Atom("alloc_util_allocators")])
    started = us()
    reqs = [(Atom(k), conn.send(m, f, a)) for k, m, f, a in _SIMPLE]
    reqs += [((Atom("allocator"), Atom(a)),
              conn.send("erlang", "system_info", [(Atom("allocator"), Atom(a))]))
             for a in _FIXED]
    utils = check_utils(result(conn.receive(util_key, deadline)))
    # their replies are 99 % of the bytes: kept as bytes, read to records in one pass
    reqs += [((Atom("allocator"), a),
              conn.send_raw("erlang", "system_info", [(Atom("allocator"), a)])) for a in utils]
    results = [(k, _reply(conn, k, conn.receive(r, deadline))) for k, r in reqs]
    dist.check_deadline(deadline, "collecting")
    done = us()
    scalars = [(k, v) for k, v in results if isinstance(k, Atom)]
    allocs = [(k[1], v) for k, v in results if isinstance(k, tuple)]
    otp = next((v for k, v in scalars if k == "otp_release"), None)
    head = [(Atom("node"), Atom(target)), (Atom("alloc_util_allocators"), utils), *scalars,
            (Atom("allocators"), allocs)]
    tail = [(Atom("sampled_at_us"), (started + done) // 2),
            (Atom("timings"), [(Atom("main"), main_us), (Atom("connected"), connected_us),
                               (Atom("calls_sent"), started), (Atom("replies_in"), done)]),
            (Atom("collect_us"), done - started)]
    carriers_ = carriers(conn, [(a, v) for a, v in allocs if a in utils], cap, deadline, otp,
                         None if meanwhile is None else lambda: meanwhile([*head, *tail]))
    return (Atom("ok"), [*head, *carriers_, *tail])


def _reply(conn: Transport, key: Any, v: Any) -> Any:
    """A checked reply; one asked for raw (dist.RawReply) is an allocator's: its records and
    text when collector/native/src/alloc_reply.rs reads it (an AllocReply), else its term,
    decoded as any reply is (its errors the transport's "unreadable" line)."""
    if type(v) is dist.RawReply:
        t0 = time.perf_counter()
        info = native_info(str(key[1]), v.data, v.pos, etf.MAX_WORDS)
        if info is None:
            try:
                v = etf.term_at(v.data, v.pos, 1)[0]  # inside {Ref, Result} or {ok, Result}
            except etf.ETFError as e:
                what = "message" if isinstance(conn, dist.Connection) else "answer"
                raise dist.DistError("call_failed", f"unreadable {what}: {e}".encode()) from None
        conn.stats["decode_s"] += time.perf_counter() - t0
        if info is not None:
            return info
    return check_reply(key, result(v))


def _keyfind(key: str, items: Any) -> tuple[Any, ...] | None:
    """lists:keyfind(Key, 1, Items): the first tuple whose first element is Key."""
    for it in items if isinstance(items, list) else []:
        if isinstance(it, tuple) and it and it[0] == key:
            return it
    return None


def _stat(key: str, sec: Any) -> int:
    """A count of a section, 0 when absent or wrapped (a negative counter of the VM read as
    unsigned: never summed raw, snapshot.wrapped)."""
    it = _keyfind(key, sec)
    v = it[1] if it and len(it) in (2, 4) else None
    return v if _int(v) is not None and v >= 0 and not wrapped(v) else 0


def _instance_carriers(info: Any) -> list[tuple[Any, int, int]]:
    """(instance, carriers, carrier bytes) of each instance of an allocator's reply, its
    mbcs, sbcs and pool sections summed: alloc_reply.rs sums them as _section reads the term."""
    if type(info) is AllocReply:
        return info.carriers
    out = []
    for e in info if isinstance(info, list) else []:
        if isinstance(e, tuple) and len(e) == 3 and e[0] == "instance":
            sections = [_section(k, e[2]) for k in ("mbcs", "sbcs", "mbcs_pool")]
            out.append((e[1], sum(c for c, _ in sections), sum(b for _, b in sections)))
    return out


def _section(key: str, props: list[Any]) -> tuple[int, int]:
    it = _keyfind(key, props)
    if it and len(it) == 2 and isinstance(it[1], list):
        return _stat("carriers", it[1]), _stat("carriers_size", it[1])
    return 0, 0


def carriers(conn: Transport, allocs: list[tuple[Any, Any]], cap: int,
             deadline: float, otp: Any = None,
             meanwhile: Callable[[], None] | None = None) -> list[Any]:
    """Per-carrier data through OTP's instrument:carriers/1, one request per allocator instance
    (scheduler id N scans instance N; 0 is the instance of non-scheduler threads and of the
    allocators that have one instance), all in flight at once. Each scan runs as aux work on
    the scheduler owning the instance and yields between carriers.

    `cap` bounds what the target builds and sends: the carrier counts system_info just gave
    decide which instances are read, whole instances, largest carrier bytes first, until `cap`
    carriers are taken; the rest is reported as skipped with its count. Allocation tags
    (instrument:allocations/1) are read for the allocators that have them on (atags), the same
    way. From OTP 27 the tags are asked per port (flags [per_port], OTP-18577): a driver's
    blocks are then its port's, and the heaviest ports are named by erlang:port_info(Port,
    name) (collector/instrument.py port_origins picks them). The order of the requests and of
    each allocator list is that of the Erlang agent this replaced (the snapshot JSON is the
    same byte for byte). `meanwhile()` runs once the requests are out, before the answers."""
    if cap <= 0:
        return []
    insts = [(a, ix, n, size) for a, info in allocs
             for ix, n, size in _instance_carriers(info) if n > 0]
    # lists:sort with {S1, N1} >= {S2, N2}: largest bytes first, then count; stable otherwise
    insts.sort(key=lambda x: (x[3], x[2]), reverse=True)
    take, skip, left = [], [], cap
    for x in insts:
        if x[2] <= left:
            left -= x[2]
            take.append(x)
        else:
            skip.append(x)
    by_inst: dict[int, list[Any]] = {}
    for a, i, _, _ in reversed(take):  # a fold over the reversed take list, as the agent's
        by_inst.setdefault(i, []).insert(0, a)
    started = us()
    reqs = [(i, conn.send("instrument", "carriers",
                          [{Atom("scheduler_ids"): [i],
                            Atom("allocator_types"): list(reversed(by_inst[i])),
                            Atom("histogram_start"): HIST_START,
                            Atom("histogram_width"): HIST_WIDTH}]))
            for i in sorted(by_inst)]
    tagged = [a for a, info in allocs if _atags_on(info)]
    blocks = sum(_blocks(info) for a, info in allocs if a in tagged)
    if not tagged:
        areq: Any = Atom("none")
    elif blocks > MAX_TAGGED_BLOCKS:
        areq = (Atom("skipped"), blocks)
    else:
        opts = {Atom("allocator_types"): tagged, Atom("histogram_start"): HIST_START,
                Atom("histogram_width"): HIST_WIDTH}
        if isinstance(otp, str) and otp.isdigit() and int(otp) >= 27:  # OTP-18577
            opts[Atom("flags")] = [Atom("per_port")]
        areq = conn.send("instrument", "allocations", [opts])
    if meanwhile is not None:
        if isinstance(conn, dist.Connection):
            conn.flush()  # our client holds requests until a receive: the target starts now
        meanwhile()
    got = [(i, instrument_result(conn.receive(r, deadline))) for i, r in reqs]
    tags = instrument_result(conn.receive(areq, deadline)) if type(areq) is str else areq
    ports = port_origins(tags)
    names = _port_names(conn, ports, deadline) if ports else []
    return [(Atom("carriers"), got),
            (Atom("carriers_skipped"), [(a, i, n) for a, i, n, _ in skip]),
            (Atom("carriers_cap"), cap),
            (Atom("carrier_hist"), (HIST_START, HIST_WIDTH)),
            (Atom("allocation_tags"), tags),
            (Atom("port_names"), names),
            (Atom("carriers_us"), us() - started)]


def _port_names(conn: Transport, ports: list[str], deadline: float) -> list[Any]:
    """erlang:port_info(Port, name) of `ports` ("#Port<0.N>"),
    each sent back as the target encoded it in erlang:ports()'s reply (the decoder keeps a port
    as its text only); a port gone from that list is left out, and an odd answer gives []: the
    names are a courtesy, the tags stand without them."""
    raw = _raw_ports(result(conn.receive(conn.send_raw("erlang", "ports", []), deadline)))
    # a port closed since its blocks were counted is not listed: it stays unnamed
    ports = [p for p in ports if raw and p in raw]
    if not ports:
        return []
    arg = dist.RawTerm(b"\x6c" + struct.pack(">I", len(ports))
                       + b"".join(raw[p] for p in ports) + b"\x6a")
    names = result(conn.receive(conn.send(
        "lists", "zipwith", [dist.Export("erlang", "port_info", 2), arg,
                             [Atom("name")] * len(ports)]), deadline))
    if not (isinstance(names, list) and len(names) == len(ports)):
        return []
    return [(Opaque(p), n) for p, n in zip(ports, names, strict=True)]


def _raw_ports(r: Any) -> dict[str, bytes] | None:
    """erlang:ports()'s reply as it came (dist.RawReply): "#Port<0.N>" -> that port's
    encoding (NEW_PORT_EXT or V4_PORT_EXT: the node's atom, the number, the creation); None
    for a reply of another shape."""
    if not isinstance(r, dist.RawReply):
        return None
    data, pos = r.data, r.pos
    if data[pos:pos + 1] == b"\x6a":
        return {}
    if data[pos:pos + 1] != b"\x6c" or len(data) < pos + 5:
        return None
    n = struct.unpack_from(">I", data, pos + 1)[0]
    at, out = pos + 5, {}
    for _ in range(n):
        tag, kind = data[at:at + 1], data[at + 1:at + 2]
        if tag not in (b"Y", b"x") or kind not in (b"v", b"w"):
            return None
        alen = (struct.unpack_from(">H", data, at + 2)[0] + 3 if kind == b"v"
                else data[at + 2] + 2) if len(data) > at + 3 else 0
        body = 8 if tag == b"Y" else 12
        end = at + 1 + alen + body
        if not alen or end > len(data):
            return None
        num = (struct.unpack_from(">I", data, at + 1 + alen)[0] if tag == b"Y"
               else struct.unpack_from(">Q", data, at + 1 + alen)[0])
        out[f"#Port<0.{num}>"] = data[at:end]
        at = end
    return out if data[at:at + 1] == b"\x6a" else None


def _block_count(props: Any) -> int:
    total = 0
    for it in props if isinstance(props, list) else []:
        if isinstance(it, tuple) and len(it) == 2 and it[0] in ("mbcs", "sbcs", "mbcs_pool") \
                and isinstance(it[1], list):
            for b in it[1]:
                if isinstance(b, tuple) and len(b) == 2 and b[0] == "blocks" \
                        and isinstance(b[1], list):
                    total += sum(_stat("count", t[1]) for t in b[1]
                                 if isinstance(t, tuple) and len(t) == 2
                                 and isinstance(t[1], list))
    return total


def _blocks(info: Any) -> int:
    """The blocks of an allocator's reply, every instance and section (what
    instrument:allocations/1 would walk)."""
    if type(info) is AllocReply:  # summed there as _block_count sums the term
        return info.blocks
    return sum(_block_count(e[2]) for e in info
               if isinstance(e, tuple) and len(e) == 3 and e[0] == "instance")


def _atags_on(info: Any) -> bool:
    """Is tagging on in some instance (an option {atags, true})?"""
    if type(info) is AllocReply:
        return info.atags
    if not isinstance(info, list):
        return False
    for e in info:
        if isinstance(e, tuple) and len(e) == 3 and e[0] == "instance":
            it = _keyfind("options", e[2])
            if it and len(it) == 2 and isinstance(it[1], list) \
                    and any(isinstance(o, tuple) and o == ("atags", "true") for o in it[1]):
                return True
    return False
