"""recon_alloc's numbers, computed exactly as recon computes them (docs/erts/recon-formulas.md
§0.4, §1).

Everything here reads one Snapshot, so unlike recon (which samples the node again for each call,
docs/erts/recon-formulas.md §5 bug 1) `used`, `allocated`, `unused` and `usage` always agree with
each other.

`keyword` is "current" (recon's element 2 of a statistic; the carrier pool is added to mbcs) or
"max" (element 4, the all-time maximum; the pool is not added, it has no maxima). Remember that
`max` sums peaks that did not happen at the same time (§5 bug 2): it is an upper bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from beamalloc.snapshot import AllocatorInstance, CarrierStats, Snapshot, Triple

Keyword = Literal["current", "max"]

#: The allocators recon counts (?UTIL_ALLOCATORS, docs/erts/recon-formulas.md §0.3). literal_alloc,
#: exec_alloc
#: and test_alloc are left out by recon; beamalloc reports them beside recon's totals.
RECON_ALLOCATORS = (
    "temp_alloc",
    "eheap_alloc",
    "binary_alloc",
    "ets_alloc",
    "driver_alloc",
    "sl_alloc",
    "ll_alloc",
    "fix_alloc",
    "std_alloc",
)

Container = Literal["blocks", "blocks_size", "carriers", "carriers_size"]


def _pick(t: Triple, keyword: Keyword) -> int:
    return t.current if keyword == "current" else t.max


def _section_value(cs: CarrierStats, container: Container, keyword: Keyword) -> int:
    if container == "blocks":
        return _pick(cs.block_count, keyword)
    if container == "blocks_size":
        return _pick(cs.block_size, keyword)
    if container == "carriers":
        return _pick(cs.carriers, keyword)
    return _pick(cs.carriers_size, keyword)


def container_value(
    inst: AllocatorInstance, keyword: Keyword, kind: Literal["sbcs", "mbcs"], container: Container
) -> int:
    """recon's container_value/4: for current mbcs, the pool's carriers count as the owner's."""
    if kind == "sbcs":
        return _section_value(inst.sbcs, container, keyword)
    value = _section_value(inst.mbcs, container, keyword)
    if keyword == "current" and inst.mbcs_pool is not None:
        pool = inst.mbcs_pool
        value += {
            "blocks": pool.block_count,
            "blocks_size": pool.block_size,
            "carriers": pool.carriers,
            "carriers_size": pool.carriers_size,
        }[container]
    return value


def container_size(inst: AllocatorInstance, keyword: Keyword, container: Container) -> int:
    return container_value(inst, keyword, "sbcs", container) + container_value(
        inst, keyword, "mbcs", container
    )


def usage(block: int | float, carrier: int | float) -> float:
    """recon's usage/2: an empty carrier set is fully used (1.0), not 0/0.

    recon divides whenever `carrier` is 0 and `block` is not, and crashes with badarith. Such
    numbers are real: OTP 22 counts the blocks of a pooled carrier by their owner and the carrier
    by the instance that holds it (docs/erts/recon-formulas.md §0.1), so an instance can show
    blocks and no carrier. None of its carrier bytes is unused, so 1.0 again: the waste
    `(1 - usage) * carrier` is 0, which is what its carriers hold.
    """
    if carrier <= 0:
        return 1.0
    return block / carrier


def util_instances(snap: Snapshot, recon_only: bool = True) -> list[AllocatorInstance]:
    if not recon_only:
        return list(snap.allocators)
    return [a for a in snap.allocators if a.allocator in RECON_ALLOCATORS]


def memory(
    snap: Snapshot,
    key: str,
    keyword: Keyword = "current",
    instances: Iterable[AllocatorInstance] | None = None,
) -> int | float:
    """recon_alloc:memory(Key, Keyword) for used, allocated, unused, usage."""
    insts = list(util_instances(snap) if instances is None else instances)
    used = sum(container_size(i, keyword, "blocks_size") for i in insts)
    allocated = sum(container_size(i, keyword, "carriers_size") for i in insts)
    if key == "used":
        return used
    if key == "allocated":
        return allocated
    if key == "unused":
        return allocated - used
    if key == "usage":
        return usage(used, allocated)  # = used / allocated whenever anything is allocated
    raise ValueError(f"unknown memory key {key!r}")


def allocated_types(snap: Snapshot, keyword: Keyword = "current") -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for i in util_instances(snap):
        out[i.allocator] = out.get(i.allocator, 0) + container_size(i, keyword, "carriers_size")
    return sorted(out.items())


def allocated_instances(snap: Snapshot, keyword: Keyword = "current") -> list[tuple[int, int]]:
    out: dict[int, int] = {}
    for i in util_instances(snap):
        out[i.instance] = out.get(i.instance, 0) + container_size(i, keyword, "carriers_size")
    return sorted(out.items())


FRAGMENTATION_KEYS = (
    "sbcs_usage",
    "mbcs_usage",
    "sbcs_block_size",
    "sbcs_carriers_size",
    "mbcs_block_size",
    "mbcs_carriers_size",
)


def instance_fragmentation(inst: AllocatorInstance, keyword: Keyword) -> dict[str, int | float]:
    sb = container_value(inst, keyword, "sbcs", "blocks_size")
    sc = container_value(inst, keyword, "sbcs", "carriers_size")
    mb = container_value(inst, keyword, "mbcs", "blocks_size")
    mc = container_value(inst, keyword, "mbcs", "carriers_size")
    return {
        "sbcs_usage": usage(sb, sc),
        "mbcs_usage": usage(mb, mc),
        "sbcs_block_size": sb,
        "sbcs_carriers_size": sc,
        "mbcs_block_size": mb,
        "mbcs_carriers_size": mc,
    }


def _waste(v: dict[str, int | float]) -> float:
    """recon's sort weight: unused bytes in the instance's carriers, as a float."""
    return (1 - v["sbcs_usage"]) * v["sbcs_carriers_size"] + (1 - v["mbcs_usage"]) * v[
        "mbcs_carriers_size"
    ]


def fragmentation(
    snap: Snapshot,
    keyword: Keyword = "current",
    instances: Iterable[AllocatorInstance] | None = None,
) -> list[tuple[tuple[str, int], dict[str, int | float]]]:
    """recon_alloc:fragmentation/1: worst first, ties by {Alloc, N} descending.

    recon sorts `{Weight, {Alloc, N}, Vals}` with lists:sort and reverses the result.
    """
    insts = util_instances(snap) if instances is None else instances
    rows = [(i.key, instance_fragmentation(i, keyword)) for i in insts]
    rows.sort(key=lambda r: (_waste(r[1]), r[0]), reverse=True)
    return rows


def cache_hit_rates(snap: Snapshot) -> list[tuple[int, dict[str, int | float]]]:
    """recon_alloc:cache_hit_rates/0, per mseg_alloc instance, most misses first."""
    rows = []
    for m in snap.mseg:
        hits, calls = m.cache_hits, m.calls.get("mseg_alloc", 0)
        rows.append((m.instance, {"hit_rate": usage(hits, calls), "hits": hits, "calls": calls}))
    # lists:sort of {Weight, {instance, N}, ...} then reverse: ties by instance descending.
    rows.sort(key=lambda r: ((1 - r[1]["hit_rate"]) * r[1]["calls"], r[0]), reverse=True)
    return rows


def average(size: int, count: int) -> int | float:
    if size == 0 and count == 0:
        return 0  # recon returns the integer 0 here
    if count == 0:
        # recon would crash with badarith (docs/erts/recon-formulas.md §5 bug 9); say "no blocks"
        # instead.
        return 0
    return size / count


def average_block_sizes(
    snap: Snapshot, keyword: Keyword = "current"
) -> list[tuple[str, dict[str, int | float]]]:
    """recon_alloc:average_block_sizes/1: per allocator type, all instances summed, by name."""
    sums: dict[str, list[int]] = {}
    for i in util_instances(snap):
        s = sums.setdefault(i.allocator, [0, 0, 0, 0])
        s[0] += container_value(i, keyword, "mbcs", "blocks_size")
        s[1] += container_value(i, keyword, "mbcs", "blocks")
        s[2] += container_value(i, keyword, "sbcs", "blocks_size")
        s[3] += container_value(i, keyword, "sbcs", "blocks")
    return [
        (name, {"mbcs": average(s[0], s[1]), "sbcs": average(s[2], s[3])})
        for name, s in sorted(sums.items())
    ]


def instance_sbcs_to_mbcs(inst: AllocatorInstance, keyword: Keyword) -> int | float | str:
    sbcs = container_value(inst, keyword, "sbcs", "blocks")
    mbcs = container_value(inst, keyword, "mbcs", "blocks")
    if sbcs == 0 and mbcs == 0:
        return 0
    if mbcs == 0:
        return "infinity"
    return sbcs / mbcs


def sbcs_to_mbcs(
    snap: Snapshot, keyword: Keyword = "current"
) -> list[tuple[tuple[str, int], int | float | str]]:
    """recon_alloc:sbcs_to_mbcs/1: block counts (not bytes), worst first; infinity above all."""
    rows = [(i.key, instance_sbcs_to_mbcs(i, keyword)) for i in util_instances(snap)]
    # Erlang orders numbers before atoms, so `infinity` sorts above every ratio; ties by key.
    rows.sort(
        key=lambda r: (r[1] == "infinity", 0 if r[1] == "infinity" else r[1], r[0]), reverse=True
    )
    return rows
