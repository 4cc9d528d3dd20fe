"""R16 (pooled carriers no instance reuses) and R17 (super carrier headroom) on real snapshots:
the OTP 25 samples, the fixtures of real workloads, and the real crash dumps of ../shared/samples
(skipped where ../shared is absent). Real nodes: tests/live/test_pool_headroom_live.py."""

from __future__ import annotations

import csv
import dataclasses

import pytest
from recommend_fixtures import load
from support import ROOT

from beamalloc.advice import rules
from beamalloc.advice.findings import facts, super_carriers
from beamalloc.collector.sources import read_file
from beamalloc.flags import Flag

SHARED = ROOT.parent / "shared" / "samples"
OTP25 = SHARED / "otp25"
DUMPS = SHARED / "real-dumps"
GIB = 1 << 30
MIB = 1 << 20
no_shared = pytest.mark.skipif(not OTP25.exists(),
                               reason=f"the samples are not here ({SHARED}: ../shared is absent)")


@no_shared
def test_both_shapes_of_erts_mmap_read_alike() -> None:
    """The live term (recon snapshot) and a crash dump's lines of the same release give the literal
    super carrier: 1 GiB (erl_mmap.h), sco true, a few MiB used; no default_mmap super carrier."""
    for name in ("recon_snapshot.txt", "erl_crash.dump"):
        sc = facts(read_file(str(OTP25 / name))).super_carriers
        assert set(sc) == {"literal_mmap"}, name
        lit = sc["literal_mmap"]
        assert lit.size == GIB and lit.only and 0 < lit.used < 8 * MIB, (name, lit)
        assert rules.r17_super_carrier_headroom(facts(read_file(str(OTP25 / name)))) == []


def test_unreadable_erts_mmap_gives_nothing() -> None:
    for text in (None, "", "[{literal_mmap,", "literal_mmap: supercarrier total size: x\n",
                 "[{literal_mmap,[{supercarrier,[{sizes,[{total,0},{used,0}]}]}]}]"):
        assert super_carriers(text) == {}


def _literal(used: int, sco: str = "true"):
    s = load("binspike")
    s.extra["erts_mmap"] = (s.extra["erts_mmap"].replace("{used,2162688}", f"{{used,{used}}}", 1)
                            .replace("{sco,true}", f"{{sco,{sco}}}", 1))
    return facts(s)


def test_r17_threshold_and_value() -> None:
    assert rules.r17_super_carrier_headroom(_literal(int(0.79 * GIB))) == []
    [f] = rules.r17_super_carrier_headroom(_literal(900 * MIB))
    assert f.level == "action" and f.allocator == "literal_alloc"
    assert f.evidence["free"] == GIB - 900 * MIB and f.evidence["used_share"] == 0.8789
    [adv] = f.advice
    # 900 MiB at <= 50 %: 1800 MB, rounded up to a power of two.
    assert adv.flag == Flag("I", "scs", 2048 * MIB) and adv.flag.render() == "+MIscs 2048"
    assert "Cannot allocate" in f.message


def test_r17_without_sco_is_information() -> None:
    [f] = rules.r17_super_carrier_headroom(_literal(1000 * MIB, sco="false"))
    assert f.level == "info" and not f.advice and "falls back to the OS" in f.message


def _pool(**counters: int):
    s = load("binspike")
    for inst in s.instances("binary_alloc"):
        if inst.mbcs_pool is not None:
            inst.mbcs_pool.counters = {k: 0 for k in inst.mbcs_pool.counters}
    pool = s.instances("binary_alloc")[1].mbcs_pool
    assert pool is not None
    pool.counters.update(counters)
    return facts(s)


def test_r16_numbers_and_remedy() -> None:
    f = _pool(fetch=12, fail=9000, fail_shared=120, skip_size=40_000, skip_race=41_000,
              skip_busy=500)
    a = f.allocators["binary_alloc"]
    assert a.pool_carriers == 23 and a.fetch_failures() == 9120
    [x] = rules.r16_pool_unusable(f)
    assert x.level == "info" and not x.advice
    assert "23 pooled carriers (128.0 MiB" in x.message
    assert "fetches failed 9,120 times against 12 taken" in x.message
    assert "+MBacfml 524288" in x.message and "+MBacful de" in x.message
    assert x.evidence["skip_size_share"] == round(40_000 / 41_500, 4)


def test_r16_busy_pool_names_no_flag() -> None:
    """Carriers passed over because other threads held them: contention, not fullness."""
    [x] = rules.r16_pool_unusable(_pool(fetch=10, fail_shared=5000, skip_busy=90_000,
                                        skip_race=10_000, skip_size=1_000))
    assert "busy" in x.message and "acfml" not in x.message


@pytest.mark.parametrize("counters", [
    {"fetch": 5000, "fail": 4000, "skip_size": 9000, "skip_race": 9000},  # most fetches work
    {"fetch": 0, "fail": 999, "skip_size": 9000, "skip_race": 9000},  # too few attempts
    {},  # no attempts
])
def test_r16_silent(counters: dict[str, int]) -> None:
    assert rules.r16_pool_unusable(_pool(**counters)) == []


def test_r16_needs_a_pool_worth_it() -> None:
    f = _pool(fetch=1, fail=9000, skip_size=9000, skip_race=9000)
    a = f.allocators["binary_alloc"]
    f.allocators["binary_alloc"] = dataclasses.replace(a, pool_allocated=rules.MIN_UNUSED - 1)
    assert rules.r16_pool_unusable(f) == []


@no_shared
def test_a_crash_dump_has_no_fetch_counters() -> None:
    """info_cpool() prints no counter to a dump: R16 stays silent however full the pool."""
    f = facts(read_file(str(OTP25 / "erl_crash.dump")))
    assert all(not a.pool_counters and a.fetch_failures() == 0 for a in f.allocators.values())
    assert rules.r16_pool_unusable(f) == []


def _dumps() -> list[str]:
    if not (DUMPS / "INDEX.tsv").exists():
        return []
    with open(DUMPS / "INDEX.tsv", newline="") as fh:
        return [r["file"] for r in csv.DictReader(fh, delimiter="\t")]


@pytest.mark.slow
@pytest.mark.skipif(not (DUMPS / "INDEX.tsv").exists(),
                    reason=f"the real crash dumps are not here ({DUMPS}: ../shared is absent)")
def test_real_dumps() -> None:
    """Every real dump with an erts_mmap section (OTP 19-28) shows the 1 GiB literal area, far
    from full: R17 silent; none carries fetch counters: R16 silent."""
    seen = expected = 0
    for name in _dumps():
        expected += b"\n=allocator:erts_mmap.literal_mmap" in (DUMPS / name).read_bytes()
        try:
            f = facts(read_file(str(DUMPS / name)))
        except Exception as e:  # a dump this reader refuses fails here, with its name
            pytest.fail(f"{name}: {e}")
        assert all(not a.pool_counters for a in f.allocators.values()), name
        assert rules.r16_pool_unusable(f) == []
        lit = f.super_carriers.get("literal_mmap")
        if lit is None:
            continue
        seen += 1
        assert lit.size == GIB and lit.only and 0 < lit.used < 0.01 * lit.size, (name, lit)
        assert rules.r17_super_carrier_headroom(f) == []
    assert seen == expected > 0


@pytest.mark.slow
def test_recommend_advises_the_headroom_flag() -> None:
    """R17's flag is advised on the use it measured, though the replay shows no carrier byte
    saved: no replay can show headroom (recommend.HEADROOM_RULES). Without a prediction it is a
    candidate, like every flag (issue 17)."""
    from beamalloc.advice.recommend import recommend

    s = load("healthy")
    s.extra["erts_mmap"] = s.extra["erts_mmap"].replace("{used,2162688}", "{used,943718400}", 1)
    r = recommend(s)
    assert r["emulator_flags"] == "+MIscs 2048" and not r["held_back"]
    [rec] = r["recommendations"]
    assert rec["rule"] == "R17" and rec["allocator"] == "literal_alloc"
    assert recommend(load("healthy"), predict=False)["emulator_flags"] == ""
    assert recommend(s, predict=False)["held_back"][0]["rule"] == "R17"


#: An OTP 25 node's answer under `+MMscs 128` (scs 0, no super carrier, by default).
DEFAULT_MMAP = (
    "[{default_mmap,[{options,[{scs,130023424},{sco,true},{scrpm,true},{scrfsd,65536}]},"
    "{supercarrier,[{sizes,[{total,134217728},{total_sa,14155776},{total_sua,659456},"
    "{used,USED},{used_sa,14155776},{used_sua,659456}]},{free_segs,[{used,0},{max,0},"
    "{allocated,0},{reserved,65536},{used_sa,0},{used_sua,0}]}]}]}]")


def test_r17_default_mapper_super_carrier() -> None:
    """Under +MMscs the default mapper has a super carrier too: mseg's flag, when it fills."""
    s = load("binspike")
    s.extra["erts_mmap"] = DEFAULT_MMAP.replace("USED", "19009536")
    assert rules.r17_super_carrier_headroom(facts(s)) == []
    s.extra["erts_mmap"] = DEFAULT_MMAP.replace("USED", str(110 * MIB))
    [x] = rules.r17_super_carrier_headroom(facts(s))
    assert x.allocator == "mseg_alloc" and x.evidence["mapper"] == "default_mmap"
    assert [a.flag.render() for a in x.advice] == ["+MMscs 256"]
