"""Lint (issue 3, must-hold 3): on flag strings and on the flags in force of real snapshots;
our own recommendations never trip it."""

from __future__ import annotations

import pytest
from recommend_fixtures import WORKLOADS, load

from beamalloc.advice.findings import Advice, facts
from beamalloc.advice.lint import lint_flags, lint_in_force
from beamalloc.advice.recommend import _lint_proposal, in_force, recommend
from beamalloc.advice.rules import evaluate
from beamalloc.flags import Flag, FlagSet, effective_globals
from beamalloc.snapshot import Snapshot

OTP25 = (13, 1, 5)


def checks(flags: str, erts: tuple[int, ...] | None = OTP25) -> list[str]:
    return [i.check for i in lint_flags(flags, erts=erts, schedulers=4)]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("+MBlmbcs 512", ["lmbcs-sbct"]),  # otp#9521's folklore flag alone
        ("+MElmbcs 512 +MEsbct 256", []),
        ("+MHlmbcs 1024", []),  # exactly 2 x sbct is fine
        ("+MBas bf", ["migration-off"]),
        ("+MBas aobf", ["migration-off"]),
        ("+MHas gf", ["migration-off"]),
        ("+MBas ageffcbf", []),
        ("+MBt false", ["migration-off"]),
        ("+MBacul 50 +MBas aobf", ["order", "migration-off"]),  # acul lost
        ("+MBas aobf +MBacul 50", ["order"]),  # aobf replaced by aoffcbf
        ("+MMmcs 40", ["range"]),
        ("+MBacul 50 +MBacful 70", ["range"]),
        ("+MBrsbcst 150", ["range"]),
        ("+MBsbct 1", ["range"]),
        ("+MBacful de", []),
        ("+MMlp on", ["release"]),  # OTP 27 only
        ("+MBfoo 512 +MBas ageffcbf", ["invalid"]),
        ("+MBas nosuch", ["invalid"]),
    ],
)
def test_flag_strings(flags: str, expected: list[str]) -> None:
    assert checks(flags) == expected


def test_release_unknown_flags() -> None:
    assert checks("+MBacful de", erts=(13, 0)) == ["release"]  # OTP 25.0 < 25.1.2
    assert checks("+MBas ageffcbf", erts=(9, 0)) == ["release"]  # OTP 20.0
    assert checks("+Mdai max", erts=(12, 1)) == ["release"]
    assert checks("+Mdai max", erts=(12, 2)) == []


OTP27, OTP29 = (15, 2, 7), (17, 1)


@pytest.mark.parametrize(
    ("flags", "erts", "expected"),
    [
        # +Mumadtn: erts 16.1 (OTP 28.1, OTP-19739); it only changes acful's discards
        ("+Mumadtn true +MBacful de", OTP29, []),
        ("+Mumadtn true +MBacful de", OTP27, ["release"]),
        ("+Mumadtn true +MBacful de", (16, 0, 3), ["release"]),  # OTP 28.0.x
        ("+Mumadtn true +MBacful de", (16, 1), []),
        ("+Mumadtn true", OTP29, ["no-effect"]),
        ("+Mumadtn false", OTP29, []),
        # bf zeroes acul and acful (docs/erts/tuning.md §0.2 item 2): nothing left to discard
        ("+MBacful de +MBas bf +Mumadtn true", OTP29, ["migration-off", "no-effect"]),
        # +MMlp: erts 15.0 (OTP 27.0, OTP-18984), super-carrier segments only
        ("+MMlp on +MMscs 2048", OTP27, []),
        ("+MMlp on", OTP27, ["no-effect"]),
        ("+MMlp off", OTP27, []),
        ("+MMlp on +MMscs 2048", OTP25, ["release"]),
        # +hmaxib: erts 14.0 (OTP 26.0, OTP-18410); OTP 25 takes it and ignores it
        ("+hmax 25000000 +hmaxib true", OTP27, []),
        ("+hmax 25000000 +hmaxib true", OTP25, ["release"]),
        ("+hmaxib true", OTP27, ["no-effect"]),
        ("+hmaxibtrue +hmax 1000", OTP27, []),  # erl takes a value glued on
        ("+hmaxib yes", OTP27, ["invalid"]),
        ("+hmax lots", OTP27, ["invalid"]),
        ("+hmaxib", OTP27, ["invalid"]),
        ("+hmaxk false +hmaxel true +hmax 100", OTP25, []),
    ],
)
def test_otp26_to_29_knobs(flags: str, erts: tuple[int, ...], expected: list[str]) -> None:
    assert checks(flags, erts) == expected


def test_release_messages_name_erts_and_otp() -> None:
    (i,) = lint_flags("+Mumadtn true +MBacful de", erts=OTP27)
    assert i.flag == "+Mumadtn" and "erts 15.2.7" in i.message
    assert "needs erts 16.1, OTP 28.1" in i.message
    (i,) = lint_flags("+hmax 100 +hmaxib true", erts=OTP25)
    assert "accepts it and ignores it" in i.message and "OTP 26.0" in i.message


def test_madtn_with_acful_in_force() -> None:
    """An acful the node runs with (its options), not only one in the flags, is what +Mumadtn
    acts on."""
    base = {"binary_alloc": {"acful": 40, "acul": 60}}
    assert lint_flags("+Mumadtn true", base=base, erts=OTP29) == []
    assert [i.check for i in lint_flags("+Mumadtn true", base={"binary_alloc": {"acful": 0}},
                                        erts=OTP29)] == ["no-effect"]


def test_madtn_parses_and_renders() -> None:
    fs = FlagSet.parse("+MBacful de +Mumadtn true")
    assert fs.render() == "+Mumadtn true +MBacful de"
    assert effective_globals(fs).madtn is True and effective_globals(None).madtn is False


def test_lmbcs_against_the_flags_in_force() -> None:
    """A proposal is checked on top of the node's own options, not on the defaults."""
    base = {"binary_alloc": {"sbct": 4 << 20, "lmbcs": 5 << 20, "smbcs": 256 << 10}}
    assert [i.check for i in lint_flags("+MBlmbcs 6144", base=base)] == ["lmbcs-sbct"]
    assert [i.check for i in lint_flags("+MBlmbcs 8192", base=base)] == []


def test_in_force() -> None:
    issues = lint_in_force(load("binspike_bf"))
    assert [(i.check, i.allocator, i.where) for i in issues] == [
        ("migration-off", "binary_alloc", "in force")]
    assert lint_in_force(load("binspike")) == []
    s = load("healthy")
    for inst in s.instances("ets_alloc"):
        inst.options["lmbcs"] = inst.options["smbcs"] = 512 << 10
    assert [(i.check, i.allocator) for i in lint_in_force(s)] == [("lmbcs-sbct", "ets_alloc")]


@pytest.mark.parametrize("name", WORKLOADS)
def test_our_advice_is_lint_clean(name: str) -> None:
    snap: Snapshot = load(name)
    r = recommend(snap, predict=False)  # every rule's flags, before any prediction judges them
    assert r["withheld"] == []
    proposal = " ".join(x for f in r["findings"] for x in f["candidate_flags"])
    issues = lint_flags(proposal, where="proposed", base=in_force(snap),
                        schedulers=snap.schedulers, erts=OTP25)  # fmt: skip
    assert issues == []
    # appended after the node's own flags, the combination is still clean of order traps
    if name == "binspike_bf":
        assert "order" not in [i.check for i in lint_flags("+MBas bf " + proposal)]


def test_lint_holds_back_only_the_flags_it_concerns() -> None:
    """Issue 17's broker: under a stale `+MBas bf` with a large sbct in force, a proposed lmbcs
    trips lmbcs-sbct; the strategy change of the same allocator is not withheld with it."""
    snap = load("binspike_bf")
    for inst in snap.instances("binary_alloc"):
        inst.options["sbct"] = 1 << 20  # 1 MiB: lmbcs 512 KiB < 2 x sbct
    rule = "R3"
    advice = [Advice(rule, "binary_alloc", Flag("B", "as", "ageffcbf"), "", "", {}, ()),
              Advice(rule, "binary_alloc", Flag("B", "lmbcs", 512), "", "", {}, ())]
    kept, withheld = _lint_proposal(advice, snap, facts(snap))
    assert [a.flag.render() for a in kept] == ["+MBas ageffcbf"]
    assert [(i.check, i.flag) for i in withheld] == [("lmbcs-sbct", "+MBlmbcs")]


def _lazy(erts: str, lazyfree: int, acful: int = 40) -> list:
    """binspike's snapshot with acful in force on binary_alloc and 400 MB of RSS."""
    s = load("binspike")
    s.erts_version, s.rss, s.rss_lazyfree = erts, 400 << 20, lazyfree
    for inst in s.instances("binary_alloc"):
        inst.options["acful"] = acful
    return [f for f in evaluate(facts(s)) if f.evidence.get("rss_lazyfree") is not None]


def test_lazyfree_under_acful_names_madtn_by_release() -> None:
    """The advice where +Mumadtn helps: acful in force and a large LazyFree (R10, info: the
    replay counts carrier bytes, which it does not change; test_otp_runtimes measures it)."""
    (f,) = _lazy("17.1", 100 << 20)
    assert (f.rule, f.level, f.advice) == ("R10", "info", [])
    assert "100.0 MiB of RSS" in f.message and "binary_alloc" in f.message
    assert "+Mumadtn true gives them back at once" in f.message
    (f,) = _lazy("15.2.7", 100 << 20)
    assert "From OTP 28.1, +Mumadtn true" in f.message
    assert _lazy("17.1", 8 << 20) == []  # small: nothing to say
    assert _lazy("17.1", 100 << 20, acful=0) == []  # not acful's pages


def test_binary_holders_get_the_hmaxib_guard_from_otp_26() -> None:
    s = load("healthy")
    s.memory.update(total=600 << 20, binary=500 << 20)
    for erts, said in (("13.1.5", False), ("14.0", True), ("17.1", True)):
        s.erts_version = erts
        (f,) = [f for f in evaluate(facts(s)) if f.rule == "R11"]
        assert ("+hmaxib true (OTP 26+)" in f.message) is said, erts
