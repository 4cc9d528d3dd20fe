"""Per-carrier data of a live node: the snapshot's `instrument:carriers/1` answers as Carriers.

The snapshot (collector/collect.py, carriers()) asks OTP's own `instrument` module
on the target, one request per allocator instance, and hands back the raw answers; here they
become `Snapshot.carriers` (docs/snapshot-schema.md, "carriers"). Nothing here raises on an
answer of another shape: an OTP release whose tuples we do not know, a target without the
application that ships `instrument` (tools before OTP 26, runtime_tools from 26.0:
docs/erts/releases.md §2), or a scan the VM refused leave `carriers` None, say why in
`carriers_unavailable`, and keep the rest of the snapshot.

Shapes read (the 6-tuple was checked by running instrument:carriers/1 on OTP 25.2.3, 27.3.4
and 29.1.1: tests/live/test_carriers_live.py):
- OTP 23+: `{Allocator, InPool, TotalSize, UnscannedSize, [{Type, Count, Size}], FreeHist}`,
  the allocations keyed by the allocator type that made them (foreign blocks from the pool);
- OTP 21-22: `{Allocator, TotalSize, UnscannedSize, AllocatedSize, AllocatedCount, InPool,
  FreeHist}`.

`instrument:allocations/1` (the tagged blocks: NIFs, drivers, binaries) is asked per port from
OTP 27 (`flags => [per_port]`, OTP-18577; docs/erts/releases.md §2): a driver's blocks are then
attributed to the port that made them (`#Port<0.7>`), and the snapshot names the heaviest ports by
erlang:port_info(Port, name) (`port_names`).
"""

from __future__ import annotations

from typing import Any

from beamalloc.limits import MAX_CARRIERS
from beamalloc.snapshot import Carrier, FreeHistogram, Snapshot, TaggedBlocks

# The cap on carriers read (`--max-carriers`) and the carrier scan's period in `watch`
# (`--carriers-every`) are in beamalloc/limits.py.


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


_BOOL = {"true": True, "false": False}


def _bool(v: Any) -> bool | None:
    return _BOOL.get(v) if isinstance(v, str) else None


def _hist(v: Any, unit: int) -> FreeHistogram | None:
    if isinstance(v, tuple) and v and all(_int(c) is not None and c >= 0 for c in v):
        return FreeHistogram(unit, tuple(v))
    return None


#: Carrier's fields in order: _new_carrier fills them without the frozen dataclass's
#: per-field object.__setattr__, half of a carrier's cost (tests/test_snapshot_encoding.py).
_CARRIER_FIELDS = tuple(Carrier.__dataclass_fields__)


def _new_carrier(*values: Any) -> Carrier:
    """Carrier(*values), as the frozen dataclass's __init__ makes it (Carrier has no
    __post_init__, no slots, no defaults left out here): its __dict__ filled at once."""
    c = object.__new__(Carrier)
    c.__dict__.update(zip(_CARRIER_FIELDS, values, strict=True))
    return c


def _carrier(t: Any, instance: int | None, unit: int,
             hists: dict[Any, FreeHistogram] | None = None) -> Carrier | None:
    """One carrier tuple, or None when it has neither known shape. `hists`: the histograms of
    this answer so far, shared by the carriers whose counts are equal (most are: an empty
    carrier's, a single-block carrier's); the decoder's counts are ints, never bools, so an
    equal tuple is the same histogram."""
    if not isinstance(t, tuple) or not t or not isinstance(t[0], str):
        return None
    alloc = str(t[0])
    if len(t) == 6:  # OTP 23+
        _, pool, size, unscanned, allocs, hist = t
        if not isinstance(allocs, list):
            return None
        count = used = foreign = 0
        for a in allocs:
            if not (type(a) is tuple and len(a) == 3 and type(a[1]) is int
                    and type(a[2]) is int) and not (
                    isinstance(a, tuple) and len(a) == 3 and _int(a[1]) is not None
                    and _int(a[2]) is not None):  # fmt: skip
                return None
            count += a[1]
            used += a[2]
            if a[0] != alloc:
                foreign += a[2]
    elif len(t) == 7:  # OTP 21-22
        _, size, unscanned, used, count, pool, hist = t
        foreign = 0
    else:
        return None
    in_pool = _bool(pool)
    h = None
    if hists is not None and type(hist) is tuple:
        try:
            h = hists.get(hist)
        except TypeError:  # an unhashable element: _hist refuses it below
            h = None
    if h is None:
        h = _hist(hist, unit)
        if h is not None and hists is not None:
            hists[hist] = h
    if in_pool is None or h is None:
        return None
    if not (type(size) is int and type(unscanned) is int and type(used) is int
            and type(count) is int) and (  # the common case first, then as _int says
            _int(size) is None or _int(unscanned) is None or _int(used) is None
            or _int(count) is None):  # fmt: skip
        return None
    if used > size:
        return None
    return _new_carrier(alloc, instance, in_pool, size, count, used, h, foreign, unscanned)


def _why(answer: Any, release: object = None) -> str:
    """Why an instance's answer holds no carriers, in words an operator can act on."""
    if isinstance(answer, tuple) and len(answer) == 3 and answer[0] == "exception":
        reason = answer[2]
        if reason == "undef":
            from beamalloc.versions import instrument_app  # here: an error's words only

            app = instrument_app(release)
            return (f"the target has no instrument module in its code path (OTP's {app} "
                    f"application): start it with {app} installed to see inside its carriers")
        return f"instrument:carriers/1 failed on the target ({answer[1]}: {str(reason)[:120]})"
    if isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "error":
        return f"instrument:carriers/1 answered {{error, {answer[1]}}}"
    return "instrument:carriers/1 answered in a shape this beamalloc does not read"


def add_carriers(snap: Snapshot, p: dict[str, Any]) -> None:
    """Fill `snap.carriers` from the agent's proplist `p` (nothing when it did not ask)."""
    answers = p.get("carriers")
    if answers is None:
        return
    hist = p.get("carrier_hist")
    start = hist[0] if isinstance(hist, tuple) and len(hist) == 2 else None
    if _int(start) is None or start < 1 or not isinstance(answers, list):
        snap.carriers_unavailable = "the agent's carrier data has an unknown shape"
        snap.notes.append(f"no per-carrier data: {snap.carriers_unavailable}")
        return
    unit = 2 * start  # the scan doubles histogram_start (FreeHistogram's docstring)
    # Whole instances are asked for up to the cap, counted a moment before the scan: twice
    # it (and some) is more than a node sends, and each carrier is an object of ours.
    cap = p.get("carriers_cap")
    most = 2 * (cap if _int(cap) is not None and 0 <= cap <= 100_000_000 else MAX_CARRIERS) + 1000
    carriers: list[Carrier] = []
    hists: dict[Any, FreeHistogram] = {}
    for entry in answers:
        if not (isinstance(entry, tuple) and len(entry) == 2 and _int(entry[0]) is not None):
            return _unavailable(snap, "the agent's carrier data has an unknown shape")
        inst, answer = entry
        if answer == ("error", "not_enabled"):  # no carrier of these types on this scheduler
            continue
        ok = (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "ok"
              and isinstance(answer[1], tuple) and len(answer[1]) == 2
              and isinstance(answer[1][1], list))
        if not ok:
            return _unavailable(snap, _why(answer, snap.otp_release))
        for t in answer[1][1]:
            c = _carrier(t, inst, unit, hists)
            if c is None:
                return _unavailable(
                    snap, f"instrument:carriers/1 of OTP {snap.otp_release or '?'} lists "
                    "carriers in a shape this beamalloc does not read")
            carriers.append(c)
            if len(carriers) > most:
                return _unavailable(snap, f"the node listed more than {most:,} carriers, "
                                          "past the cap asked for")
    carriers.sort(key=lambda c: (c.allocator, c.instance or 0, not c.in_pool, -c.size))
    snap.carriers = carriers
    skipped = p.get("carriers_skipped")
    if isinstance(skipped, list) and skipped:
        n = sum(s[2] for s in skipped if isinstance(s, tuple) and len(s) == 3
                and _int(s[2]) is not None)
        snap.carriers_skipped = n
        names = ", ".join(f"{s[0]}[{s[1]}]" for s in skipped[:4] if isinstance(s, tuple))
        more = f" and {len(skipped) - 4} more" if len(skipped) > 4 else ""
        snap.notes.append(
            f"per-carrier data capped at {p.get('carriers_cap')} carriers: {n} carriers of "
            f"{names}{more} not read (whole instances are read, largest first; "
            "--max-carriers raises the cap)")
    _add_tags(snap, p.get("allocation_tags"))
    _add_port_names(snap, p.get("port_names"))


#: Ports named per snapshot at most: the ports whose tagged blocks weigh most (the agent and
#: live.py ask for these many names).
MAX_PORT_NAMES = 10
#: A driver name longer than this is cut (a spawned port is named by its whole command line).
MAX_PORT_NAME = 120


def _add_port_names(snap: Snapshot, answer: Any) -> None:
    """The drivers of the ports that tagged blocks are attributed to (OTP 27+, `per_port`):
    `[{Port, {name, Name} | undefined}]` as the agent or live.py asked erlang:port_info/2
    for them, kept as extra.port_names {"#Port<0.7>": "tcp_inet"}; a port that closed in
    between, or an answer of another shape, is left unnamed."""
    if not isinstance(answer, list):
        return
    names: dict[str, str] = {}
    for x in answer[:MAX_PORT_NAMES]:
        if not (isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str)
                and x[0].startswith("#Port<") and isinstance(x[1], tuple) and len(x[1]) == 2
                and x[1][0] == "name"):
            continue
        name = x[1][1]
        if isinstance(name, list) and all(isinstance(c, int) and 0 <= c < 0x110000
                                          for c in name):
            name = "".join(map(chr, name))
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        if isinstance(name, str):
            # printable only: a spawned port's name is its command line, outside text
            names[str(x[0])] = "".join(c if c.isprintable() else "?"
                                       for c in name[:MAX_PORT_NAME])
    if names:
        snap.extra["port_names"] = names


def port_origins(answer: Any) -> list[str]:
    """The ports among an `instrument:allocations/1` answer's origins (OTP 27+, `per_port`),
    the MAX_PORT_NAMES with the most tagged blocks first: the ones to name."""
    if not (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "ok"
            and isinstance(answer[1], tuple) and len(answer[1]) == 3
            and isinstance(answer[1][2], dict)):
        return []
    weight = {}
    for origin, types in answer[1][2].items():
        if isinstance(origin, str) and origin.startswith("#Port<") and isinstance(types, dict):
            weight[str(origin)] = sum(sum(c << i for i, c in enumerate(h) if isinstance(c, int))
                                      for h in types.values() if isinstance(h, tuple))
    # as the agent's lists:sort of {-Weight, Port}: ports compare by their number
    return sorted(weight, key=lambda o: (-weight[o], _port_number(o)))[:MAX_PORT_NAMES]


def _port_number(text: str) -> int:
    """N of "#Port<0.N>" (a port's text as the decoder writes it)."""
    n = text.rpartition(".")[2].rstrip(">")
    return int(n) if n.isdigit() else -1


def _unavailable(snap: Snapshot, why: str) -> None:
    snap.carriers = None
    snap.carriers_unavailable = why
    snap.notes.append(f"no per-carrier data: {why}")


def _add_tags(snap: Snapshot, answer: Any) -> None:
    """`instrument:allocations/1`: `{ok, {HistStart, Unscanned, #{Origin => #{Type => Hist}}}}`,
    or `{skipped, Blocks}` when the snapshot spared the target a second walk of that many blocks
    (collector/collect.py, MAX_TAGGED_BLOCKS)."""
    if isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "skipped":
        snap.notes.append(f"tagged block histograms not read: the tagged allocators hold "
                          f"{answer[1]} blocks, and instrument:allocations/1 would walk them all "
                          "again")
        return
    if not (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == "ok"
            and isinstance(answer[1], tuple) and len(answer[1]) == 3
            and isinstance(answer[1][2], dict) and _int(answer[1][0])):
        return
    unit = answer[1][0]  # allocations/1 does not double its start (erl_alloc_util.c)
    out = []
    for origin, types in answer[1][2].items():
        if not isinstance(types, dict):
            return
        for typ, hist in types.items():
            h = _hist(hist, unit)
            if h is None:
                return
            out.append(TaggedBlocks(str(origin), str(typ), h))
    snap.tagged_blocks = sorted(out, key=lambda t: (t.origin, t.type))
