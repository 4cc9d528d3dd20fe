"""Build Snapshot objects from `erlang:system_info({allocator, A})` terms.

Three shapes of the same data reach this module (docs/erts/recon-formulas.md §0.1, §0.2;
docs/erts/alloc_util.md §6.1-6.2):

* OTP ≥ 23, raw: `{blocks, [{Type, [{count,C,L,M}, {size,C,L,M}]}]}` per carrier section, and in
  `mbcs_pool` `{blocks, [{Type, [{count,N}, {size,N}]}]}`;
* OTP ≤ 22, raw: `{blocks,C,L,M}` and `{blocks_size,C,L,M}` totals (pool: `{blocks,N}`,
  `{blocks_size,N}`, and on OTP 22 `{foreign_blocks, [...]}`);
* recon's normalized form (`recon_alloc:allocators/0`, what snapshot files hold): the totals as in
  OTP ≤ 22 plus `{raw_blocks, L}` holding the OTP ≥ 23 list and `{foreign_blocks, L}`.

All three become the same AllocatorInstance, with blocks per type where the source has them.
"""

from __future__ import annotations

from typing import Any

from beamalloc._refalloc import AllocReply, alloc_reply
from beamalloc.collector.terms import Atom, Term, format_term, proplist
from beamalloc.errors import InputError
from beamalloc.limits import MAX_SCHEDULERS
from beamalloc.snapshot import (
    NUMERIC_OPTIONS,
    UINT64_MAX,
    AllocatorInstance,
    BlockStats,
    CarrierStats,
    FixType,
    MsegInstance,
    PoolStats,
    Snapshot,
    Triple,
    describe,
)

GIGA = 1_000_000_000  # call counters are {Name, Giga, Ones} (docs/erts/recon-formulas.md §0)


class FormatError(InputError):
    """Allocator data whose shape this reader does not know."""


def _int(v: Any, what: str) -> int:
    """A count or size: an unsigned machine word (docs/erts/alloc_util.md §6.1)."""
    if type(v) is int and 0 <= v <= UINT64_MAX:  # the common case first: ~40,000 per snapshot
        return v
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= UINT64_MAX:
        return v
    raise FormatError(f"{what}: expected an integer, got {describe(v)}")


def _triple(v: Any, what: str) -> Triple:
    """`{K, C, L, M}` arrives here as the tuple (C, L, M)."""
    if isinstance(v, tuple) and len(v) == 3:
        return Triple(_int(v[0], what), _int(v[1], what), _int(v[2], what))
    raise FormatError(f"{what}: expected three values, got {describe(v)}")


def _calls(v: Any, what: str, skip: frozenset[str] = frozenset()) -> dict[str, int]:
    """`[{Name, Giga, Ones}]` (or `{Name, Count}`) as Name -> count, as proplist() would read
    the list (the first of equal names kept), in one pass: ~3,500 lists in a +S 64 snapshot."""
    out: dict[str, int] = {}
    if not isinstance(v, list):
        return out
    for it in v:
        if not (isinstance(it, tuple) and it and isinstance(it[0], str)):
            continue
        k = str(it[0])
        if k in out or k in skip:
            continue
        if len(it) == 3:
            g, n = it[1], it[2]
            if type(g) is int and type(n) is int and 0 <= g <= UINT64_MAX \
                    and 0 <= n <= UINT64_MAX:
                out[k] = g * GIGA + n
            else:
                out[k] = _int(g, what) * GIGA + _int(n, what)
            continue
        val = it[1] if len(it) == 2 else it[1:]
        if isinstance(val, tuple) and len(val) == 2:
            out[k] = _int(val[0], what) * GIGA + _int(val[1], what)
        else:
            out[k] = _int(val, what)
    return out


def _typed_blocks(lst: Any, what: str) -> dict[str, BlockStats]:
    """`[{Type, [{count,C,L,M},{size,C,L,M}]}]` (OTP ≥ 23)."""
    if not isinstance(lst, list):
        raise FormatError(f"{what}: blocks is neither a list nor a number")
    out: dict[str, BlockStats] = {}
    for entry in lst:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
            raise FormatError(f"{what}: unexpected blocks entry {describe(entry)}")
        p = proplist(entry[1])
        out[str(entry[0])] = BlockStats(
            count=_triple(p.get("count", (0, 0, 0)), what),
            size=_triple(p.get("size", (0, 0, 0)), what),
        )
    return out


def carrier_stats(alloc: str, section: Any, what: str) -> CarrierStats:
    p = proplist(section)
    if not p and section != []:
        raise FormatError(f"{what}: not a property list")
    blocks = p.get("raw_blocks", p.get("blocks", []))
    if "raw_blocks" in p:  # recon's totals beside the list: not used, but never impossible
        for k in ("blocks", "blocks_size"):
            if k in p:
                _triple(p[k], what)
    if isinstance(blocks, list):
        by_type = _typed_blocks(blocks, what)
    else:  # OTP ≤ 22 totals, or recon's normalized totals without raw_blocks
        by_type = {
            alloc: BlockStats(
                count=_triple(blocks, what), size=_triple(p.get("blocks_size", (0, 0, 0)), what)
            )
        }
    return CarrierStats(
        blocks=by_type,
        carriers=_triple(p.get("carriers", (0, 0, 0)), what),
        carriers_size=_triple(p.get("carriers_size", (0, 0, 0)), what),
        mseg_carriers=_int(p.get("mseg_alloc_carriers", 0), what),
        sys_carriers=_int(p.get("sys_alloc_carriers", 0), what),
        mseg_carriers_size=_int(p.get("mseg_alloc_carriers_size", 0), what),
        sys_carriers_size=_int(p.get("sys_alloc_carriers_size", 0), what),
    )


_POOL_STATS = frozenset({"blocks", "blocks_size", "raw_blocks", "foreign_blocks", "carriers",
                         "carriers_size"})


def pool_stats(alloc: str, section: Any, what: str) -> PoolStats:
    p = proplist(section)
    blocks = p.get("raw_blocks", p.get("blocks", []))
    by_type: dict[str, tuple[int, int]] = {}
    if isinstance(blocks, list):
        for entry in blocks:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
                raise FormatError(f"{what}: unexpected pool blocks entry {describe(entry)}")
            q = proplist(entry[1])
            by_type[str(entry[0])] = (_int(q.get("count", 0), what), _int(q.get("size", 0), what))
    else:
        by_type[alloc] = (_int(blocks, what), _int(p.get("blocks_size", 0), what))
    counters = _calls(section, what, _POOL_STATS)  # the rest: {Name, Giga, Ones} counters
    return PoolStats(
        blocks=by_type,
        carriers=_int(p.get("carriers", 0), what),
        carriers_size=_int(p.get("carriers_size", 0), what),
        counters=counters,
    )


_BOOLEANS = {"true": True, "false": False}


def option_value(v: Term) -> int | bool | str:
    if isinstance(v, bool):
        return v
    if isinstance(v, Atom):
        name = str(v)
        return _BOOLEANS.get(name, name)
    if isinstance(v, int | str):
        return v
    return format_term(v)


def options(lst: Any) -> dict[str, int | bool | str]:
    """An options list as proplist() reads it, each value through option_value(), in one pass:
    a +S 64 snapshot has ~600 lists of ~20 options, mostly {atom, atom | integer}."""
    out: dict[str, int | bool | str] = {}
    if not isinstance(lst, list):
        return out
    for it in lst:
        if not (isinstance(it, tuple) and it and isinstance(it[0], str)):
            continue
        k = str(it[0])
        if k in out:
            continue
        v = it[1] if len(it) == 2 else it[1:]
        t = type(v)
        if t is int:
            out[k] = v
        elif t is Atom:
            name = str(v)
            out[k] = _BOOLEANS.get(name, name)
        else:
            out[k] = option_value(v)
    return out


def instance_from_props(alloc: str, ix: int, props: Any) -> AllocatorInstance:
    what = f"{alloc}[{ix}]"
    if not isinstance(props, list):
        raise FormatError(f"{what}: expected a property list")
    p = proplist(props)
    versions = None
    for it in props:
        if isinstance(it, tuple) and len(it) >= 2 and it[0] == "versions":
            versions = [str(x) for x in it[1:]]
    fix_types = None
    if "fix_types" in p:
        fix_types = []
        for ft in p["fix_types"] if isinstance(p["fix_types"], list) else []:
            if isinstance(ft, tuple) and len(ft) == 3:
                fix_types.append(FixType(str(ft[0]), _int(ft[1], what), _int(ft[2], what)))
    return AllocatorInstance(
        allocator=alloc,
        instance=ix,
        options=options(p.get("options", [])),
        mbcs=carrier_stats(alloc, p.get("mbcs", []), f"{what} mbcs"),
        sbcs=carrier_stats(alloc, p.get("sbcs", []), f"{what} sbcs"),
        mbcs_pool=pool_stats(alloc, p["mbcs_pool"], f"{what} mbcs_pool")
        if "mbcs_pool" in p
        else None,
        calls=_calls(p.get("calls", []), f"{what} calls"),
        fix_types=fix_types,
        versions=versions,
    )


def mseg_from_props(ix: int, props: Any) -> MsegInstance:
    what = f"mseg_alloc[{ix}]"
    p = proplist(props)
    kind = proplist(p.get("memkind", []))
    status = proplist(kind.get("status", []))
    return MsegInstance(
        instance=ix,
        options=options(p.get("options", [])),
        cached_segments=_int(status.get("cached_segments", 0), what),
        cache_hits=_int(status.get("cache_hits", 0), what),
        segments=_triple(status.get("segments", (0, 0, 0)), what),
        segments_watermark=_int(status.get("segments_watermark", 0), what),
        segments_size=_triple(status.get("segments_size", (0, 0, 0)), what),
        calls=_calls(kind.get("calls", []), what),
    )


def memory_from_term(term: Any) -> dict[str, int]:
    if not isinstance(term, list):
        raise FormatError("erlang:memory() is not a list")
    return {k: _int(v, f"memory {k}") for k, v in proplist(term).items()}


def _is_util(props: Any) -> bool:
    """An alloc_util instance has carrier sections; mseg_alloc has memkind; sys_alloc neither."""
    p = proplist(props)
    return "mbcs" in p or "sbcs" in p


def add_allocator(snap: Snapshot, alloc: str, ix: int, props: Any) -> None:
    """Add one `{Alloc, Ix}` entry (recon's shape) to a snapshot."""
    if alloc == "mseg_alloc":
        snap.mseg.append(mseg_from_props(ix, props))
    elif alloc in ("sys_alloc", "erts_mmap", "alloc_util") or not _is_util(props):
        if alloc == "erts_mmap" or (
            isinstance(props, list) and props and not isinstance(props[0], tuple)
        ):
            snap.extra[alloc] = format_term(props)
        else:
            opts = proplist(props).get("options", props)
            snap.extra.setdefault(alloc, {})[str(ix)] = {
                k: option_value(v) for k, v in proplist(opts).items()
            }
    else:
        snap.allocators.append(instance_from_props(alloc, ix, props))


#: What native_info() builds, in the order alloc_reply.rs takes them.
_CLASSES = (AllocatorInstance, CarrierStats, BlockStats, PoolStats, Triple, FixType)
#: Allocators whose replies are not alloc_util instances (mseg_alloc's cache, the others'
#: options or text): read from their terms only.
NOT_UTIL = frozenset({"mseg_alloc", "sys_alloc", "erts_mmap", "alloc_util"})


def native_info(alloc: str, data: bytes, pos: int, budget: int) -> AllocReply | None:
    """The reply to `system_info({allocator, alloc})` whose tag is at `data[pos]`, read in one
    pass to the records add_system_info() would build from its decoded term, and its term text
    (collector/native/src/alloc_reply.rs); None for a reply of any other shape, which the
    caller then decodes and reads as before. `budget`: the decoder's (etf.py MAX_WORDS)."""
    if alloc in NOT_UTIL:
        return None
    return alloc_reply(data, pos, alloc, _CLASSES, NUMERIC_OPTIONS, budget,
                       2 * MAX_SCHEDULERS + 1)


def add_system_info(snap: Snapshot, alloc: str, info: Any) -> None:
    """Add the result of `erlang:system_info({allocator, Alloc})`: its term, or what
    native_info() read of its bytes."""
    if type(info) is AllocReply:
        snap.allocators += info.instances
        return
    if info is False or info == "false":
        snap.disabled.append(alloc)
        snap.notes.append(f"{alloc} is not enabled on this node")
        return
    if alloc == "erts_mmap":
        snap.extra["erts_mmap"] = format_term(info)
        return
    if not isinstance(info, list):
        raise FormatError(f"{alloc}: system_info returned {describe(info)}")
    if info and isinstance(info[0], tuple) and len(info[0]) == 3 and info[0][0] == "instance":
        for entry in info:
            if not (isinstance(entry, tuple) and len(entry) == 3 and entry[0] == "instance"):
                raise FormatError(f"{alloc}: unexpected entry {describe(entry)}")
            add_allocator(snap, alloc, _int(entry[1], alloc), entry[2])
    else:  # sys_alloc on older releases: a bare option list
        add_allocator(snap, alloc, 0, info)
