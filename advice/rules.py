"""The rule base: one small function per rule of docs/erts/tuning.md §1 that has a symptom in the
statistics. Each takes Facts and returns Findings; a finding below its threshold is `info` and
never carries a flag (issue 3, must-hold 1: false advice costs restarts of production nodes).

Implemented: R0, R1, R2, R3, R4, R5, R6, R7, R9, R10, R11, R13, R16, R17. R8 and the
configuration half of R9 are lint (advice/lint.py). Not rules, because nothing in a snapshot
shows their symptom: R12 (an operator's choice), R14 (lock contention), R15 (an A/B diagnostic,
never shipped).

Thresholds marked [heur] are our operationalisation (docs/erts/tuning.md §1 legend); the floors on
bytes and calls keep a small, healthy node from getting advice for noise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from beamalloc.advice.findings import (
    FETCH_FAILURES,
    MCS_MAX,
    NON_MIGRATING,
    PASSED_OVER,
    SINCE,
    Advice,
    AllocFacts,
    Bytes,
    Facts,
    Finding,
    Level,
    Share,
)
from beamalloc.flags import NO_MIGRATION, Flag
from beamalloc.units import count, human, pct
from beamalloc.versions import erts_tuple

KB = 1024
MB = 1024 * KB

# --- shared floors [heur] ---------------------------------------------------------------------
#: Unused bytes below which a restart costs more than the memory it would give back.
MIN_UNUSED = 32 * MB
#: Calls below which a ratio of calls says nothing.
MIN_CALLS = 10_000

# --- R0 / R2 ----------------------------------------------------------------------------------
R0_USAGE_HEALTHY = 0.90  # EiA §7.3.1 "close to 100%" [heur]
R2_USAGE_SUSPECT = 0.80  # riak_kv#1820 reports 0.5–0.8 [case]
R2_MBCS_USAGE_PROBLEM = 0.50  # [heur, beamlens PR #29]
R2_MBCS_USAGE_SEVERE = 0.30  # ejabberd#775 0.094 [case]


#: Unused bytes below which a low usage is never shown as a warning: too little to act on.
USAGE_QUIET_UNUSED = 16 * MB


def usage_level(u: float, unused: int | None = None) -> str:
    """How a usage reads by R2's thresholds: "bad" below R2_MBCS_USAGE_PROBLEM, "warn" below
    R2_USAGE_SUSPECT, else "ok". The terminal's and the web UI's usage colours follow it, so a
    colour never disagrees with the rules.

    With `unused` (bytes), the level also weighs what a low usage wastes: under
    USAGE_QUIET_UNUSED it is "ok", under MIN_UNUSED (the floor of every rule) at most "warn",
    so 384 KiB unused never reads as red as 155 MiB."""
    level = "bad" if u < R2_MBCS_USAGE_PROBLEM else "warn" if u < R2_USAGE_SUSPECT else "ok"
    if unused is not None and level != "ok":
        if unused < USAGE_QUIET_UNUSED:
            return "ok"
        if unused < MIN_UNUSED:
            return "warn"
    return level

# --- R1 ---------------------------------------------------------------------------------------
R1_GAP_SHARE = 0.10
R1_GAP_MIN = 256 * MB
# --- R3/R4 ------------------------------------------------------------------------------------
R3_LMBCS = 512 * KB  # logplex b2d9ffd, RabbitMQ PR #1604
R3_SBCT = 256 * KB  # lowered with lmbcs so that lmbcs >= 2 x sbct (R8, otp#9521)
R3_SMALL_BLOCKS = R3_SBCT // 8  # mbcs blocks this small are far from the lowered sbct [heur]
MIGRATING_STRATEGY = "ageffcbf"  # RabbitMQ default; keeps carrier migration (§0.2 item 1)
# --- R6 ---------------------------------------------------------------------------------------
R6_HIT_RATE = 0.80  # recon cache_hit_rates/0 doc
R6_MCS = MCS_MAX  # the maximum
# --- R7 ---------------------------------------------------------------------------------------
R7_SBCS_SHARE = 0.50  # [heur: recon "if most of the data ends up in sbcs"]
R7_SBCS_TO_MBCS = 1.0  # [heur]
R7_MIN_SBCS = 16 * MB  # [heur]
R7_LMBCS_FACTOR = 4  # "keep lmbcs >= several x sbct"
R7_MIN_CARRIER_CALLS = 1000  # mseg/sys_alloc calls worth saving [heur]
# --- R9 ---------------------------------------------------------------------------------------
R9_IMBALANCE = 0.50  # (max - min) / max over scheduler instances [heur]
# --- R10 --------------------------------------------------------------------------------------
R10_POOL_SHARE = 0.25  # [heur]
ACFUL_SINCE = SINCE["acful"]  # erts of OTP 25.1.2
#: LazyFree this large, with acful in force, is what +Mumadtn true (OTP 28.1) gives back at once
#: (docs/erts/releases.md §4, measured) [heur]
R10_LAZYFREE = MIN_UNUSED
R10_LAZYFREE_SHARE = 0.10  # of RSS [heur]
# --- R11 --------------------------------------------------------------------------------------
R11_BINARY_SHARE = 0.50  # [heur] binary holds most of erlang:memory(total)
R11_MIN_BINARY = 64 * MB
R11_USAGE = 0.80
# --- R13 --------------------------------------------------------------------------------------
R13_REALLOC_RATIO = 0.2  # [heur]
# --- R16 --------------------------------------------------------------------------------------
R16_MIN_FAILURES = 1000  # fetch attempts that took nothing: fewer say nothing [heur]
R16_FAILURE_SHARE = 0.50  # of all fetch attempts [heur]
R16_SIZE_SHARE = 0.50  # skip_size among the skips: "too full", not "busy" [heur]
# --- R17 --------------------------------------------------------------------------------------
R17_USED_SHARE = 0.80  # of a super carrier in use [heur]
R17_TARGET_SHARE = 0.50  # the advised size holds today's use at this share [heur]
#: The flag that sizes each mapper's super carrier (docs/erts/alloc_util.md §10).
SCS_FLAG = {"literal_mmap": ("I", "literal_alloc"), "default_mmap": ("M", "mseg_alloc")}

SRC_EIA = "Erlang in Anger §7.3.1"


@dataclass(frozen=True)
class RuleSpec:
    """A rule's id and sources, declared once; its findings and advice are built from it."""

    id: str
    sources: tuple[str, ...]

    def finding(self, level: Level, title: str, message: str, evidence: dict[str, Any],
                allocator: str | None = None, advice: list[Advice] | None = None,
                about: str | None = None) -> Finding:
        """`about`: what the title names first ("binary_alloc: " + `title`), kept as data."""
        return Finding(rule=self.id, level=level,
                       title=title if about is None else f"{about}: {title}", message=message,
                       evidence=evidence, sources=self.sources, allocator=allocator,
                       advice=advice or [], topic=title, about=about)  # fmt: skip

    def advice(self, allocator: str, flag: Flag, reason: str, cost: str,
               evidence: dict[str, Any], trade_off: bool = False) -> Advice:
        return Advice(rule=self.id, allocator=allocator, flag=flag, reason=reason, cost=cost,
                      evidence=evidence, sources=self.sources, trade_off=trade_off)


#: Every rule's id and sources (docs/erts/tuning.md §1), in one table.
OOM = RuleSpec("OOM", ("docs/erts/tuning.md §3 crashdump_viewer (the slogan)",
                       "rabbitmq-server#39", "erlang/otp#3489",
                       "erts_alloc doc, max_heap_size in erlang:process_flag/2"))
# Each rule cites its home in docs/erts/tuning.md first (shipped with the package and linked from
# the output, beamalloc/citations.py); the reports and documents behind it follow.
R0 = RuleSpec("R0", ("docs/erts/tuning.md §1 R0", SRC_EIA))
R1 = RuleSpec("R1", ("docs/erts/tuning.md §1 R1", "recon_alloc memory/1 doc", "erlang/otp PR #7049",
                     "rclex PR #284"))
R2 = RuleSpec("R2", ("docs/erts/tuning.md §1 R2", SRC_EIA, "basho/riak_kv#1820",
                     "processone/ejabberd#775", "beamlens PR #29"))
R3 = RuleSpec("R3", ("docs/erts/tuning.md §1 R3", "heroku/logplex b2d9ffd, PR #163",
                     "rabbitmq-server PR #1604", "erlang/otp#9521"))
R4 = RuleSpec("R4", ("docs/erts/tuning.md §1 R4", "rabbitmq-server PR #1604, PR #1612",
                     "basho/riak_kv#1820"))
R5 = RuleSpec("R5", ("docs/erts/tuning.md §1 R5", "docs/erts/carrier-migration.md",
                     "Dahrkael/ExTracker#1", "erlang/otp#9521"))
R6 = RuleSpec("R6", ("docs/erts/tuning.md §1 R6", "recon_alloc cache_hit_rates/0 doc",
                     "RabbitMQ runtime defaults"))
R7 = RuleSpec("R7", ("docs/erts/tuning.md §1 R7",
                     "recon_alloc sbcs_to_mbcs/1, average_block_sizes/1 docs",
                     "Larsson, Memory Management: Battle Stories, case 1"))
R9 = RuleSpec("R9", ("docs/erts/tuning.md §1 R9, §0.2 item 1", "docs/erts/carrier-migration.md"))
R10 = RuleSpec("R10", ("docs/erts/tuning.md §1 R10", "Erlang in Anger §7.3.2",
                       "erlang/otp PR #6378", "erlang/otp PR #2046"))
R11 = RuleSpec("R11", ("docs/erts/tuning.md §1 R11", "Erlang in Anger §7.2",
                       "heroku/logplex PR #48", "helium/miner PR #288"))
R13 = RuleSpec("R13", ("docs/erts/tuning.md §1 R13", "erts_alloc doc"))
R16 = RuleSpec("R16", ("docs/erts/tuning.md §1 R16", "docs/erts/alloc_util.md §5.1",
                       "erlang/otp erts/emulator/beam/erl_alloc_util.c cpool_fetch()"))
R17 = RuleSpec("R17", ("docs/erts/tuning.md §1 R17", "docs/erts/alloc_util.md §10",
                       "erlang/otp erts/emulator/sys/common/erl_mmap.h"))

Rule = Callable[[Facts], list[Finding]]


def _flag(a: AllocFacts, param: str, value: int | bool | str) -> Flag:
    assert a.letter is not None
    return Flag(a.letter, param, value)


def _ev(a: AllocFacts) -> dict[str, int | float]:
    """An allocator's evidence, each number of its kind (Bytes, Share: advice/findings.py)."""
    return {
        "allocated": Bytes.of(a.allocated),
        "used": Bytes.of(a.used),
        "unused": Bytes.of(a.unused),
        "usage": Share.of(round(a.usage, 4)),
        "mbcs_usage": Share.of(round(a.mbcs_usage, 4)),
        "max_allocated": Bytes.of(a.max_allocated),
        "max_usage": Share.of(round(a.max_usage, 4)),
    }


def _migration_fix(a: AllocFacts, rule: RuleSpec, ev: dict) -> list[Advice]:
    """`as ageffcbf`, plus `acul de` where the node runs with the pool off (docs/erts/tuning.md
    §0.2 items 1-2).

    Appended after flags that zeroed acul (`+MBas bf`), a new `as` alone would leave acul 0;
    the explicit `acul de` (rendered after `as`) switches the pool back on.
    """
    out = [rule.advice(
        a.name, _flag(a, "as", MIGRATING_STRATEGY),
        reason=f"{MIGRATING_STRATEGY}: age-ordered first fit, so new blocks go to the oldest "
        "carriers and the young ones (from the peak) can empty; keeps carrier migration",
        cost="a little CPU per allocation against bf/gf (docs/erts/carrier-migration.md)",
        evidence=ev,
    )]
    if a.options.get("acul") == 0:
        out.append(rule.advice(
            a.name, _flag(a, "acul", "de"),
            reason="the pool is off on this node (acul 0): turn carrier migration back on, "
            "so a mostly empty carrier can move to where it is needed",
            cost="carriers shuttle between schedulers; small CPU cost",
            evidence={**ev, "acul": 0, "as": a.options.get("as")},
        ))
    return out


def _fragmented(a: AllocFacts) -> bool:
    """R2's per-allocator test: mbcs usage below the problem line, and enough bytes to matter."""
    return a.mbcs_usage < R2_MBCS_USAGE_PROBLEM and a.unused >= MIN_UNUSED


def r0_real_usage(f: Facts) -> list[Finding]:
    """R0 Healthy / real usage: usage >= 0.90 means memory is used, not fragmented.

    Sources: Erlang in Anger §7.3.1 ("you're just using a lot of it").
    """
    if f.usage < R0_USAGE_HEALTHY:
        return []
    return [R0.finding(
        "info", "usage is real",
        message=f"The allocators use {pct(f.usage)} of their carriers: memory is held by "
        "data, not lost to fragmentation. No +M flag helps; look at erlang:memory() "
        "categories, ets:i() and recon:proc_count/2.",
        evidence={"usage": Share.of(round(f.usage, 4)), "used": Bytes.of(f.used),
                  "allocated": Bytes.of(f.allocated)},
    )]


def r1_outside_erts_alloc(f: Facts) -> list[Finding]:
    """R1 Memory outside erts_alloc: RSS exceeds allocated by more than max(10 %, 256 MiB).

    Sources: recon_alloc memory/1 doc; erlang/otp PR #7049; rclex PR #284. Needs RSS, which only
    a live snapshot has; no +M flag fixes this.
    """
    if f.rss is None:
        return []
    gap = f.rss - f.allocated
    if gap <= max(R1_GAP_SHARE * f.rss, R1_GAP_MIN):
        return []
    return [R1.finding(
        "info", "memory outside the allocators",
        message=f"The OS sees {human(f.rss)} resident but the allocators hold "
        f"{human(f.allocated)}: {human(gap)} is elsewhere. No +M flag fixes this: "
        "look for NIFs or drivers calling malloc, the mseg cache, thread stacks.",
        evidence={"rss": Bytes.of(f.rss), "allocated": Bytes.of(f.allocated),
                  "gap": Bytes.of(gap)},
    )]


def r2_fragmentation(f: Facts) -> list[Finding]:
    """R2 Fragmentation confirmed: usage < 0.80, and an allocator with mbcs usage < 0.50.

    Severe below 0.30. Sources: Erlang in Anger §7.3.1; basho/riak_kv#1820;
    processone/ejabberd#775; beamlens PR #29. Flags come from R3-R5 for the allocator found.
    """
    out = []
    for a in sorted(f.allocators.values(), key=lambda a: a.unused, reverse=True):
        if not _fragmented(a) or f.usage >= R2_USAGE_SUSPECT:
            continue
        severe = a.mbcs_usage < R2_MBCS_USAGE_SEVERE
        after_peak = a.max_usage - a.usage
        has_rule = a.name in ("binary_alloc", "eheap_alloc", "ets_alloc")
        out.append(R2.finding(
            "info", f"{a.name} is fragmented" + (" (severe)" if severe else ""),
            message=f"{a.name} holds {human(a.allocated)} of carriers and uses {human(a.used)} "
            f"(mbcs usage {pct(a.mbcs_usage)}; at its peak {pct(a.max_usage)}): "
            + ("the carriers stayed after a peak. " if after_peak > 0.2 else "")
            + ("Its allocator's own fragmentation rule gives its flags." if has_rule else
               "The rule base has no flag for this allocator; find what allocates there."),
            evidence={**_ev(a), "node_usage": Share.of(round(f.usage, 4))},
            allocator=a.name,
        ))
    return out


def r3_binary_fragmentation(f: Facts) -> list[Finding]:
    """R3 binary_alloc mbc fragmentation: R2 met for binary_alloc.

    `+MBas ageffcbf +MBlmbcs 512`, with sbct lowered to 256 KiB so lmbcs >= 2 x sbct (R8);
    where the blocks are not small, lmbcs = 2 x sbct instead. Sources: heroku/logplex b2d9ffd
    and PR #163; rabbitmq-server PR #1604; erlang/otp#9521.
    """
    a = f.allocators.get("binary_alloc")
    if a is None or not _fragmented(a) or f.usage >= R2_USAGE_SUSPECT:
        return []
    return [_small_carriers(R3, a, lower_sbct=True)]


def r4_eheap_fragmentation(f: Facts) -> list[Finding]:
    """R4 eheap_alloc fragmentation: R2 met for eheap_alloc.

    `+MHas ageffcbf` and smaller carriers; eheap sbct is never lowered (riak_kv#1820: sbct 128
    made usage fall to 0.34), so lmbcs = 2 x sbct. Sources: rabbitmq-server PR #1604 / #1612;
    basho/riak_kv#1820.
    """
    a = f.allocators.get("eheap_alloc")
    if a is None or not _fragmented(a) or f.usage >= R2_USAGE_SUSPECT:
        return []
    return [_small_carriers(R4, a, lower_sbct=False)]


def _small_carriers(rule: RuleSpec, a: AllocFacts, lower_sbct: bool) -> Finding:
    ev = _ev(a)
    sbct = a.sbct or 512 * KB
    avg = a.mbcs_used / a.mbcs_blocks if a.mbcs_blocks else 0
    advice = _migration_fix(a, rule, ev)
    # Lower sbct only where no big blocks live in sbcs (else R7's case: raise it, not lower).
    few_sbcs = a.max_sbcs_allocated < R7_MIN_SBCS
    if lower_sbct and few_sbcs and avg <= R3_SMALL_BLOCKS and sbct > R3_SBCT:
        lmbcs, new_sbct = R3_LMBCS, R3_SBCT
    else:
        lmbcs, new_sbct = max(R3_LMBCS, 2 * sbct), sbct
    cur_lmbcs = a.options.get("lmbcs")
    if isinstance(cur_lmbcs, int) and cur_lmbcs <= lmbcs:
        lmbcs = cur_lmbcs  # already small: nothing to shrink
    else:
        advice.append(rule.advice(
            a.name, _flag(a, "lmbcs", lmbcs),
            reason=f"carriers of at most {human(lmbcs)} instead of {human(cur_lmbcs)} (mseg "
            "rounds carriers up to a power of two): a carrier holding fewer blocks empties "
            "sooner and goes back to the OS",
            cost="more, smaller carriers: more mmap calls when the allocator grows; logplex "
            "warns it can make usage worse if unlucky",
            evidence={**ev, "lmbcs": Bytes.of(cur_lmbcs)},
        ))
    if new_sbct != sbct:
        advice.append(rule.advice(
            a.name, _flag(a, "sbct", new_sbct),
            reason=f"keep lmbcs >= 2 x sbct (erlang/otp#9521): blocks here average "
            f"{human(avg)}, far below {human(new_sbct)}",
            cost=f"blocks of {human(new_sbct)}..{human(sbct)} get a carrier (an mmap) each",
            evidence={**ev, "sbct": Bytes.of(sbct), "mbcs_average_block": Bytes.of(round(avg))},
        ))
    return rule.finding(
        "action", "smaller carriers and age-ordered placement", about=a.name,
        message=f"{a.name} keeps {human(a.unused)} of empty space in its carriers "
        f"(mbcs usage {pct(a.mbcs_usage)}). Smaller carriers empty sooner after a peak.",
        evidence=ev, allocator=a.name, advice=advice,
    )


def placement_flags(a: AllocFacts) -> list[Advice]:
    """The flags R3/R4/R5 give an allocator, whatever its thresholds: what a node that already
    runs them shows as FLAGS IN FORCE (none for allocators those rules do not cover)."""
    if a.letter is None:
        return []
    if a.name == "binary_alloc":
        return _small_carriers(R3, a, lower_sbct=True).advice
    if a.name == "eheap_alloc":
        return _small_carriers(R4, a, lower_sbct=False).advice
    if a.name == "ets_alloc":
        return _migration_fix(a, R5, _ev(a))
    return []


def r5_ets_fragmentation(f: Facts) -> list[Finding]:
    """R5 ets_alloc fragmentation: R2 met for ets_alloc.

    `+MEas ageffcbf` (ExTracker's aobf would switch the pool off); no `+MElmbcs 512`, which led
    to unbounded RSS in otp#9521. Sources: Dahrkael/ExTracker#1; erlang/otp#9521.
    """
    a = f.allocators.get("ets_alloc")
    if a is None or not _fragmented(a) or f.usage >= R2_USAGE_SUSPECT:
        return []
    ev = _ev(a)
    return [R5.finding(
        "action", "age-ordered placement", about="ets_alloc",
        message=f"ets_alloc keeps {human(a.unused)} empty (mbcs usage {pct(a.mbcs_usage)}).",
        evidence=ev, allocator=a.name, advice=_migration_fix(a, R5, ev),
    )]


def r6_mseg_cache(f: Facts) -> list[Finding]:
    """R6 mseg cache thrash: hit rate < 0.80 over at least MIN_CALLS mseg_alloc calls.

    `+MMmcs 30`. Sources: recon_alloc cache_hit_rates/0 doc; RabbitMQ defaults.
    """
    if f.mseg_calls < MIN_CALLS:
        return []
    rate = f.mseg_hits / f.mseg_calls
    if rate >= R6_HIT_RATE or (f.mseg_mcs or 10) >= R6_MCS:
        return []
    ev = {"hit_rate": Share.of(round(rate, 4)), "cache_hits": f.mseg_hits,
          "mseg_alloc_calls": f.mseg_calls, "mcs": f.mseg_mcs}
    adv = R6.advice(
        "mseg_alloc", Flag("M", "mcs", R6_MCS),
        reason=f"only {pct(rate)} of {f.mseg_calls} segment requests hit the cache; "
        "30 slots (the maximum) keep more freed carriers for reuse",
        cost="cached segments stay resident but are not counted in `allocated`",
        evidence=ev, trade_off=True,
    )
    return [R6.finding("action", "mseg cache misses", message=adv.reason, evidence=ev,
                       allocator="mseg_alloc", advice=[adv])]


def r7_sbcs(f: Facts) -> list[Finding]:
    """R7 Too much data in sbcs: sbcs hold > 50 % of the carrier bytes or sbcs_to_mbcs >= 1.

    Raise sbct and lmbcs together (lmbcs = 4 x sbct). This trades memory for speed: fewer
    mseg/sys_alloc calls, more carrier bytes. Sources: recon_alloc sbcs_to_mbcs/1 and
    average_block_sizes/1 docs; Larsson, "Memory Management: Battle Stories", case 1.
    """
    out = []
    for a in f.allocators.values():
        sbct = a.sbct
        if sbct is None or a.letter is None or a.max_sbcs_allocated < R7_MIN_SBCS:
            continue
        share = a.sbcs_allocated / a.allocated if a.allocated else 0.0
        ratio = a.sbcs_blocks / a.mbcs_blocks if a.mbcs_blocks else float(a.sbcs_blocks > 0)
        if share <= R7_SBCS_SHARE and ratio < R7_SBCS_TO_MBCS:
            continue
        avg = a.sbcs_used // a.sbcs_blocks if a.sbcs_blocks else 0
        new_sbct = 1 << max(2 * avg - 1, 1).bit_length() if avg else 0
        # Bounded by what the node has shown (issue 17): no sbct above the largest block it ever
        # held, no carrier larger than every carrier it ever mapped together.
        bounded = new_sbct > a.largest_block
        new_sbct = min(new_sbct, a.largest_block) // KB * KB
        lmbcs = min(R7_LMBCS_FACTOR * new_sbct, _pow2_floor(f.max_allocated))
        allocs, mseg, sysc = a.call("alloc"), a.calls.get("mseg_alloc", 0), a.calls.get(
            "sys_alloc", 0)  # fmt: skip
        ev = {
            **_ev(a),
            "sbcs_share": Share.of(round(share, 4)),
            "sbcs_to_mbcs": round(ratio, 4),
            "sbcs_average_block": Bytes.of(avg),
            "sbct": Bytes.of(sbct),
            "sbcs_blocks": a.sbcs_blocks,
            "alloc_calls": allocs,
            "mseg_alloc_calls": mseg,
            "sys_alloc_calls": sysc,
            "carrier_calls_per_alloc": round((mseg + sysc) / allocs, 4) if allocs else None,
        }
        msg = (f"{a.name}: {pct(share)} of its carrier bytes are single-block carriers, "
               f"{a.sbcs_blocks} blocks averaging {human(avg)} above sbct {human(sbct)}; "
               f"{mseg + sysc} mseg/sys_alloc calls for {allocs} allocations.")  # fmt: skip
        if new_sbct <= sbct or lmbcs < 2 * new_sbct or mseg + sysc < R7_MIN_CARRIER_CALLS:
            if (bounded and new_sbct <= sbct) or lmbcs < 2 * new_sbct:
                msg += (f" No larger sbct: the largest block it ever held is at most "
                        f"{human(a.largest_block)}, and the node never mapped more than "
                        f"{human(f.max_allocated)} of carriers.")  # fmt: skip
            out.append(R7.finding("info", "data in single-block carriers", about=a.name,
                                  message=msg, evidence=ev, allocator=a.name))
            continue
        cost = (f"trades memory for speed: blocks of up to {human(new_sbct)} share carriers of "
                f"up to {human(lmbcs)}, so a few live ones can pin a whole "
                f"carrier (more unused bytes); saves up to {mseg + sysc} carrier calls per "
                f"{allocs} allocations")  # fmt: skip
        adv = [
            R7.advice(a.name, _flag(a, "sbct", new_sbct),
                      reason=f"blocks of {human(avg)} on average go into multiblock carriers",
                      cost=cost, evidence=ev, trade_off=True),
            R7.advice(a.name, _flag(a, "lmbcs", lmbcs),
                      reason="multiblock carriers large enough for several blocks (lmbcs = "
                      f"{R7_LMBCS_FACTOR} x sbct)", cost=cost, evidence=ev, trade_off=True),
        ]
        out.append(R7.finding("action", "data in single-block carriers", about=a.name,
                              message=msg, evidence=ev, allocator=a.name, advice=adv))
    return out


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n > 0 else 0


def r9_migration_off(f: Facts) -> list[Finding]:
    """R9 Strategy vs migration: bf/aobf/gf (pool off) on an allocator whose scheduler
    instances are out of balance ((max - min) / max >= 0.5) and which wastes MIN_UNUSED.

    Sources: docs/erts/carrier-migration.md; docs/erts/tuning.md §0.2 item 1.
    """
    out = []
    for a in f.allocators.values():
        if a.letter in (None, *NO_MIGRATION) or a.options.get("as") not in NON_MIGRATING:
            continue
        if a.options.get("acul") != 0 or len(a.sched_allocated) < 2:
            continue
        hi, lo = max(a.sched_allocated), min(a.sched_allocated)
        imbalance = (hi - lo) / hi if hi else 0.0
        ev = {**_ev(a), "as": a.options.get("as"), "acul": 0,
              "imbalance": Share.of(round(imbalance, 4)),
              "scheduler_instances_allocated": [Bytes.of(x) for x in a.sched_allocated]}
        if imbalance < R9_IMBALANCE or a.unused < MIN_UNUSED:
            continue  # the lint reports the strategy itself
        out.append(R9.finding(
            "action", "carrier migration is off", about=a.name,
            message=f"{a.name} runs `as {a.options.get('as')}`, which turns the carrier "
            f"pool off, and its scheduler instances differ by {pct(imbalance)}: "
            "free carriers of one scheduler cannot serve another.",
            evidence=ev, allocator=a.name, advice=_migration_fix(a, R9, ev),
        ))
    return out


def _erts(f: Facts) -> tuple[int, ...]:
    return erts_tuple(f.erts_version) or ()


def r10_pool_bloat(f: Facts) -> list[Finding]:
    """R10 Pool bloat: mbcs_pool carriers > 25 % of the allocator's carrier bytes.

    `+M<S>acful de` (OTP >= 25.1.2) gives the free pages of pooled carriers back with
    MADV_FREE; on older releases only `acul 0` would, which loses migration: info only.
    Sources: Erlang in Anger §7.3.2; erlang/otp PR #6378; PR #2046.
    """
    out = _lazyfree(f)
    for a in f.allocators.values():
        if a.letter is None or not a.allocated or a.pool_allocated - a.pool_used < MIN_UNUSED:
            continue
        share = a.pool_allocated / a.allocated
        if share <= R10_POOL_SHARE or a.options.get("acful") not in (0, None):
            continue
        ev = {**_ev(a), "pool_carriers": a.pool_carriers,
              "pool_carriers_size": Bytes.of(a.pool_allocated),
              "pool_blocks_size": Bytes.of(a.pool_used), "pool_share": Share.of(round(share, 4))}
        msg = (
            f"{a.name} has {a.pool_carriers} abandoned carriers ({human(a.pool_allocated)}, "
            f"{pct(share)} of its carriers) holding {human(a.pool_used)} of data."
        )
        # A release that knows acful lists it among the options, in every source (a recon
        # file carries no version); else fall back to the erts version.
        if "acful" not in a.options and _erts(f) < ACFUL_SINCE:
            out.append(R10.finding(
                "info", "carrier pool bloat", about=a.name,
                message=msg + " This release has no acful; +M<S>acul 0 would turn migration off.",
                evidence=ev, allocator=a.name,
            ))
            continue
        adv = R10.advice(
            a.name, _flag(a, "acful", "de"),
            reason="let the OS take back the free pages of pooled carriers (MADV_FREE below "
            "acul - 20 % utilization): they show as LazyFree and count in MemAvailable; "
            "VmRSS and carrier bytes stay until the kernel needs the pages",
            cost="madvise calls; OTP made it opt-in because carriers moving in and out of "
            "the pool cost performance (PR #6378)",
            evidence=ev,
        )
        out.append(R10.finding("action", "carrier pool bloat", about=a.name, message=msg,
                               evidence=ev, allocator=a.name, advice=[adv]))
    return out


def _lazyfree(f: Facts) -> list[Finding]:
    """acful in force and much of RSS LazyFree: on OTP 28.1+, `+Mumadtn true` gives those pages
    back with MADV_DONTNEED, at once. Predicted for a restart with it: RSS less the LazyFree pages,
    LazyFree none, carrier bytes as they are (so nothing for the replay, which counts those):
    madtn changes only which madvise erts_mem_discard() calls on the pages acful discards, and a
    page a carrier takes again is resident under either (docs/erts/releases.md §4, checked there:
    binspike on OTP 29, seven restarts -11.7 to +4.9 % off the prediction). Info: no carrier
    changes."""
    lazy, rss = f.rss_lazyfree or 0, f.rss or 0
    acful = sorted(a.name for a in f.allocators.values()
                   if a.letter is not None and a.options.get("acful") not in (0, None))
    if not acful or lazy < max(R10_LAZYFREE, R10_LAZYFREE_SHARE * rss):
        return []
    after = max(rss - lazy, 0)
    ev = {"rss": Bytes.of(rss), "rss_lazyfree": Bytes.of(lazy), "acful_in": acful,
          "rss_with_madtn": Bytes.of(after), "rss_lazyfree_with_madtn": Bytes(0)}
    msg = (f"{human(lazy)} of RSS ({human(rss)}) is LazyFree: free pages of pooled carriers "
           f"that acful gave back with MADV_FREE ({', '.join(acful)}), resident until the kernel "
           "needs them; what reads VmRSS counts them.")
    restart = (f"RSS about {human(after)} instead of {human(rss)} (LazyFree none), the same "
               "carrier bytes")
    if _erts(f) < SINCE["madtn"]:
        msg += (" From OTP 28.1, +Mumadtn true gives them back at once (MADV_DONTNEED): "
                f"predicted for such a restart, {restart}.")
    else:
        msg += (f" A restart with +Mumadtn true gives them back at once (MADV_DONTNEED): "
                f"predicted, {restart}; the cost is a page fault for each page a carrier takes "
                "again.")
    return [R10.finding("info", "pooled carriers' free pages stay resident (LazyFree)",
                        message=msg, evidence=ev)]


def r11_binary_leak(f: Facts) -> list[Finding]:
    """R11 Binary leak, not fragmentation: binary holds most of erlang:memory(total) and
    binary_alloc uses its carriers well. Code fixes, never flags.

    Sources: Erlang in Anger §7.2; heroku/logplex PR #48; helium/miner PR #288.
    """
    total, binary = f.memory.get("total", 0), f.memory.get("binary", 0)
    a = f.allocators.get("binary_alloc")
    if not total or binary < R11_MIN_BINARY or binary / total < R11_BINARY_SHARE:
        return []
    if a is not None and a.usage < R11_USAGE:
        return []  # low usage is R2/R3's case
    return [R11.finding(
        "info", "binaries are retained, not fragmented",
        message=f"Binaries hold {human(binary)} of {human(total)}. If that is more than "
        "the node should hold, run recon:bin_leak/1; fixes are in code (hibernate, "
        "binary:copy/1 for long-kept slices, fullsweep_after), not in +M flags."
        + (" A guard meanwhile: +hmax with +hmaxib true (OTP 26+) counts the binaries a "
           "process refers to towards its max_heap_size, so the one holding them is killed "
           "and logged by name." if _erts(f) >= SINCE["hmaxib"] else ""),
        evidence={"binary": Bytes.of(binary), "total": Bytes.of(total),
                  "binary_share": Share.of(round(binary / total, 4))},
    )]


def r13_realloc(f: Facts) -> list[Finding]:
    """R13 Realloc-driven fragmentation: realloc/alloc > 0.2 on a fragmented allocator.

    `+M<S>ramv true`. Source: erts_alloc doc ("often reduces memory fragmentation, but costs
    performance").
    """
    out = []
    for a in f.allocators.values():
        allocs, reallocs = a.call("alloc"), a.call("realloc")
        if a.letter is None or allocs < MIN_CALLS or reallocs / allocs <= R13_REALLOC_RATIO:
            continue
        if a.options.get("ramv") is True:
            continue
        ev = {**_ev(a), "alloc_calls": allocs, "realloc_calls": reallocs,
              "realloc_ratio": round(reallocs / allocs, 4)}  # fmt: skip
        msg = f"{a.name}: {reallocs} reallocs for {allocs} allocations."
        if not (_fragmented(a) and f.usage < R2_USAGE_SUSPECT):
            out.append(R13.finding("info", "many reallocs", about=a.name,
                                   message=msg + " Not fragmented, so no flag.", evidence=ev,
                                   allocator=a.name))
            continue
        adv = R13.advice(
            a.name, _flag(a, "ramv", True),
            reason="every realloc moves the block, so grown blocks do not leave holes behind",
            cost="a copy per realloc (CPU)", evidence=ev, trade_off=True,
        )
        out.append(R13.finding("action", "realloc-driven fragmentation", about=a.name,
                               message=msg, evidence=ev, allocator=a.name, advice=[adv]))
    return out


def r16_pool_unusable(f: Facts) -> list[Finding]:
    """R16 Pooled carriers no instance can reuse: the pool holds >= MIN_UNUSED of an allocator's
    carriers while most fetch attempts (>= R16_FAILURE_SHARE, >= R16_MIN_FAILURES) take nothing,
    and most carriers passed over were too small (`skip_size`): their largest free block is
    smaller than what instances ask for. Needs the fetch counters, which only live sources have
    (docs/erts/alloc_util.md §5.1). Info: the remedies (acfml, acful) trade migration for
    memory, and no replay models them. Sources: erl_alloc_util.c cpool_fetch().
    """
    out = []
    for a in f.allocators.values():
        if a.letter is None or not a.pool_counters or a.pool_allocated < MIN_UNUSED:
            continue
        fetched, failed = a.pool_counters.get("fetch", 0), a.fetch_failures()
        if failed < R16_MIN_FAILURES or failed / (failed + fetched) < R16_FAILURE_SHARE:
            continue
        skips = {k: a.pool_counters.get(k, 0) for k in ("skip_size", *PASSED_OVER)}
        # Every carrier passed over counts once in PASSED_OVER; skip_size counts it again when
        # its largest free block was too small (docs/erts/alloc_util.md §5.1).
        passed, too_small = sum(skips[k] for k in PASSED_OVER), skips["skip_size"]
        size_share = too_small / passed if passed else 0.0
        ev = {**_ev(a), "pool_carriers": a.pool_carriers,
              "pool_carriers_size": Bytes.of(a.pool_allocated),
              "pool_blocks_size": Bytes.of(a.pool_used), "fetch": fetched, "fetch_failures": failed,
              **{k: a.pool_counters.get(k, 0) for k in FETCH_FAILURES}, **skips,
              "skip_size_share": Share.of(round(size_share, 4))}  # fmt: skip
        msg = (f"{a.name}: {a.pool_carriers} pooled carriers ({human(a.pool_allocated)}, "
               f"{human(a.pool_used)} of blocks in them); fetches failed {count(failed)} times "
               f"against {count(fetched)} taken")  # fmt: skip
        if size_share >= R16_SIZE_SHARE:
            sbct = a.sbct or 512 * KB
            msg += (f", and {count(too_small)} of the carriers passed over had no free block large "
                    "enough: the pool holds carriers too full for any instance's blocks. "
                    f"+M{a.letter}acfml {sbct} (bytes) lets a carrier into the pool only with a "
                    f"free block of sbct ({human(sbct)}), so every pooled carrier can serve any "
                    f"multiblock request; +M{a.letter}acful de (against pool bloat) gives the "
                    "free pages of those already there back to the OS.")  # fmt: skip
        else:
            msg += (": the carriers passed over were mostly busy or raced for, not too small "
                    "(skip_size is a minority); carrier migration is contended, no flag "
                    "fixes that.")  # fmt: skip
        out.append(R16.finding("info", "pooled carriers are not reused", about=a.name,
                               message=msg, evidence=ev, allocator=a.name))
    return out


def r17_super_carrier_headroom(f: Facts) -> list[Finding]:
    """R17 Super carrier headroom: a super carrier with `sco` (no fallback to the OS) used to
    >= R17_USED_SHARE of its size. literal_alloc maps every carrier in the literal one, so when
    it is full the node dies with `literal_alloc: Cannot allocate` (persistent_term, large
    modules, literals of loaded code). `+MIscs` (literal) or `+MMscs` (default mapper) sized so
    today's use is R17_TARGET_SHARE of it; the range is virtual, reserved not committed.
    Sources: erl_mmap.h ERTS_LITERAL_VIRTUAL_AREA_SIZE; docs/erts/alloc_util.md §10.
    """
    out = []
    for sc in f.super_carriers.values():
        if sc.mapper not in SCS_FLAG or sc.used_share < R17_USED_SHARE:
            continue
        letter, owner = SCS_FLAG[sc.mapper]
        ev = {"mapper": sc.mapper, "size": Bytes.of(sc.size), "used": Bytes.of(sc.used),
              "free": Bytes.of(sc.free), "used_share": Share.of(round(sc.used_share, 4)),
              "sco": sc.only}  # fmt: skip
        msg = (f"The {sc.mapper} super carrier is {pct(sc.used_share)} used: "
               f"{human(sc.used)} of {human(sc.size)}, {human(sc.free)} free.")
        if not sc.only:
            out.append(R17.finding(
                "info", "super carrier nearly full", about=sc.mapper,
                message=msg + " It falls back to the OS when full (sco false): no flag needed.",
                evidence=ev, allocator=owner,
            ))
            continue
        size_mb = -(-int(sc.used / R17_TARGET_SHARE) // MB)
        new_size = 1 << max(size_mb - 1, 1).bit_length()  # MB, a power of two
        what = ("literal_alloc: Cannot allocate (literals of loaded code, persistent_term)"
                if sc.mapper == "literal_mmap" else "carriers that cannot be mapped")
        adv = R17.advice(
            owner, Flag(letter, "scs", new_size * MB),
            reason=f"a super carrier of {new_size} MB keeps today's {human(sc.used)} at "
            f"{pct(sc.used / (new_size * MB))}; when it is full the node gets {what}",
            cost="more virtual address space reserved (not resident: pages are committed as "
            "carriers use them)",
            evidence=ev,
        )
        out.append(R17.finding("action", "super carrier nearly full", about=sc.mapper,
                               message=msg + f" With sco true nothing falls back: next is {what}.",
                               evidence=ev, allocator=owner, advice=[adv]))
    return out


_CANNOT_ALLOCATE = re.compile(
    r"^(\w+): Cannot allocate (\d+) bytes of memory(?: \(of type \"([^\"]+)\"\))?")
#: A size no machine of the word size can map: user address space is 2^47 on x86-64 [heur: the
#: common 4-level page tables], 2^32 on 32-bit builds.
ADDRESS_BITS = {8: 47, 4: 32}
RUNAWAY_FEW_BLOCKS = 4  # this few single-block-carrier blocks holding ...
RUNAWAY_SHARE = 0.50  # ... this share of the node's carriers is one runaway [heur]


def oom_runaway(f: Facts) -> list[Finding]:
    """OOM A node that died of one runaway allocation: a crash dump's slogan `A: Cannot allocate
    N bytes`, where N is a size no machine can map (a negative size read as unsigned, like
    rabbitmq-server#39's `std_alloc: Cannot allocate 1125316227743680 bytes`), or where a few
    blocks of that allocator's single-block carriers hold most of the node's carriers (one
    process heap or binary that grew without bound). No +M flag helps: the remedy is the
    holder's bound. Sources: docs/erts/tuning.md §3; rabbitmq-server#39; erlang/otp#3489.
    """
    m = _CANNOT_ALLOCATE.match(f.slogan or "")
    if m is None:
        return []
    name, size, typ = m.group(1), int(m.group(2)), m.group(3) or "?"
    a = f.allocators.get(name)
    bits = ADDRESS_BITS.get(f.wordsize or 8, 47)
    ev: dict[str, int | float | str | bool] = {"slogan": f.slogan or "",
                                               "size": Bytes.of(size), "type": typ}
    what = f"The node died allocating {size} bytes of \"{typ}\" in {name}"
    if size >= 1 << (8 * (f.wordsize or 8) - 1):
        neg = size - (1 << (8 * (f.wordsize or 8)))
        why = (f"{what}: as a signed number that size is {neg}, a size computed negative and "
               "read as unsigned: one runaway allocation (a bug or an unbounded term), not a "
               "shortage of memory.")
    elif size >= 1 << bits:
        why = (f"{what} ({human(size)}): more than a {8 * (f.wordsize or 8)}-bit machine can "
               "map: one runaway allocation, not a shortage of memory.")
    elif (a is not None and 0 < a.sbcs_blocks <= RUNAWAY_FEW_BLOCKS
          and a.sbcs_allocated >= RUNAWAY_SHARE * f.allocated):  # fmt: skip
        ev.update(sbcs_blocks=a.sbcs_blocks, sbcs_allocated=Bytes.of(a.sbcs_allocated),
                  allocated=Bytes.of(f.allocated))
        why = (f"{what} ({human(size)}) while {a.sbcs_blocks} block(s) of its single-block "
               f"carriers held {human(a.sbcs_allocated)} of the node's {human(f.allocated)}: "
               "one runaway holder (a process heap or binary that grew without bound).")
    else:
        return [OOM.finding(
            "info", "the node ran out of memory", about=name,
            message=f"{what} ({human(size)}); its carriers held {human(f.allocated)}. The "
            "slogan does not say which OS call failed (erlang/otp#3489).",
            evidence=ev, allocator=name,
        )]
    ev["runaway"] = True
    fix = ("Find the holder in the dump (crashdump_viewer: processes by memory; =binary sizes) "
           "and bound it: max_heap_size (erlang:process_flag/2) kills a process whose heap "
           "passes it; a queue or cache needs its own limit. No +M flag helps.")
    return [OOM.finding("info", "the node died of one runaway allocation", about=name,
                        message=f"{why} {fix}", evidence=ev, allocator=name)]


#: Evaluation order is priority order: where two rules set the same flag, the earlier wins.
RULES: tuple[tuple[str, Rule], ...] = tuple((spec.id, fn) for spec, fn in (
    (OOM, oom_runaway),
    (R0, r0_real_usage),
    (R1, r1_outside_erts_alloc),
    (R2, r2_fragmentation),
    (R3, r3_binary_fragmentation),
    (R4, r4_eheap_fragmentation),
    (R5, r5_ets_fragmentation),
    (R9, r9_migration_off),
    (R7, r7_sbcs),
    (R10, r10_pool_bloat),
    (R13, r13_realloc),
    (R17, r17_super_carrier_headroom),
    (R16, r16_pool_unusable),
    (R6, r6_mseg_cache),
    (R11, r11_binary_leak),
))


def evaluate(f: Facts) -> list[Finding]:
    return [finding for _, rule in RULES for finding in rule(f)]
