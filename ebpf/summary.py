"""The kernel's aggregates -> one summary document (`beamalloc trace --json`; its terminal
tables are reporters/trace.py).

Calls are counted at entry, so they are exact even when a return probe is missed; block bytes
(outstanding = allocated − freed block sizes, headers included, as the `blocks` statistics count
them, docs/erts/alloc_util.md §3.1, §6.1) come from the block headers read at alloc return and at
free.
A time-sliced (sampled) run scales the calls by 1/attached fraction and says so; its outstanding
bytes are not meaningful (frees of blocks made outside a slice) and are left out.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from beamalloc.ebpf.beam import BeamProcess
from beamalloc.ebpf.event import OP_FREE, OP_RET

#: Call names by op number (event.bpf.h: OP_ALLOC, OP_FREE, OP_REALLOC).
OPS = ("alloc", "free", "realloc")
MADVICE = {0: "normal", 1: "random", 2: "sequential", 3: "willneed", 4: "dontneed", 8: "free",
           9: "remove", 10: "dontfork", 12: "mergeable", 14: "hugepage", 15: "nohugepage",
           20: "cold", 21: "pageout"}


def _tree() -> defaultdict[str, Any]:
    return defaultdict(_tree)


def _plain(d: Any) -> Any:
    return {k: _plain(v) for k, v in d.items()} if isinstance(d, dict) else d


def block_summary(proc: BeamProcess, hist: list[tuple[int, ...]], elapsed: float,
                  fraction: float) -> dict[str, Any]:
    names = {t.n: t.name for t in proc.types}
    scale = 1.0 / fraction if fraction > 0 else 0.0
    allocs: dict[str, Any] = {}

    def entry(a: int) -> dict[str, Any]:
        name = proc.allocators.get(a, f"allocator_{a}")
        return allocs.setdefault(name, {
            "calls": dict.fromkeys(OPS, 0), "rates_per_s": {}, "requested_bytes": 0,
            "outstanding_bytes": 0, "instances": {}, "types": {}})

    for allctr, typ, op, slot, count, nbytes, blk, old_blk in hist:
        a = typ & proc.alloc_mask
        tname = names.get(typ >> proc.type_shift, f"type_{typ}")
        e = entry(a)
        t = e["types"].setdefault(tname, {**dict.fromkeys(OPS, 0), "requested_bytes": 0,
                                          "outstanding_bytes": 0, "log2_hist": {}})
        base = op & ~OP_RET
        if op & OP_RET or base == OP_FREE:  # block bytes, by owner
            delta = blk - old_blk if base != OP_FREE else -blk
            t["outstanding_bytes"] += delta
            e["outstanding_bytes"] += delta
            owner = proc.instances.get(allctr)
            ix = str(owner[1]) if owner else "?"
            e["instances"][ix] = e["instances"].get(ix, 0) + delta
        if op & OP_RET:
            continue
        n = round(count * scale)
        t[OPS[base]] += n
        e["calls"][OPS[base]] += n
        if base != OP_FREE:
            t["requested_bytes"] += round(nbytes * scale)
            e["requested_bytes"] += round(nbytes * scale)
        key = f"{OPS[base]}:{1 << slot}"
        t["log2_hist"][key] = t["log2_hist"].get(key, 0) + n
    for e in allocs.values():
        e["rates_per_s"] = {op: round(e["calls"][op] / elapsed, 1) if elapsed else 0.0
                            for op in OPS}
        if fraction < 1:
            e["outstanding_bytes"] = None
            e["instances"] = {}
            for t in e["types"].values():
                t["outstanding_bytes"] = None
    return dict(sorted(allocs.items(), key=lambda kv: -sum(kv[1]["calls"].values())))


def carrier_summary(proc: BeamProcess, rows: list[tuple[str, int, int, int, int]],
                    elapsed: float) -> dict[str, Any]:
    out = _tree()
    for kind, sub, slot, count, nbytes in rows:
        if kind in ("mmap", "munmap", "mremap", "madvise"):
            label = {"madvise": MADVICE.get(sub, str(sub)), "mremap": "grow" if sub else "shrink"
                     }.get(kind, "all")
            d = out["syscalls"][kind][label]
        elif kind.startswith("mseg"):
            a, mbc = sub >> 1, sub & 1
            d = out["mseg"][proc.allocators.get(a, str(a))][kind][("mbc" if mbc else "sbc")]
        elif kind.startswith("sys"):
            who = "aligned (MBC carriers)" if sub == 0xFFFF else "by type"
            d = out["sys_alloc"][kind][who]
        else:
            d = out["libc"][kind]["all"]
        d["count"] = d.get("count", 0) + count
        d["bytes"] = d.get("bytes", 0) + nbytes
        h = d.setdefault("log2_hist", {})
        h[str(1 << slot)] = h.get(str(1 << slot), 0) + count
    res = _plain(out)
    res["elapsed_s"] = round(elapsed, 3)
    return res
