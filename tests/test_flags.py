"""Tests of beamalloc.flags against docs/erts/alloc_util.md §2."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beamalloc.flags import (
    AOFF_FAMILY,
    KB,
    MB,
    STRATEGIES,
    U_LETTERS,
    UINT_MAX,
    Flag,
    FlagError,
    FlagSet,
    effective_config,
    effective_globals,
    parse,
    replay_config,
)

THREAD_PREF = ("sl_alloc", "std_alloc", "binary_alloc", "ets_alloc", "driver_alloc", "fix_alloc")


# --- parsing ---------------------------------------------------------------------------------


def test_parse_example_gives_typed_values_in_bytes():
    fs = parse("+MBas aoffcbf +MBlmbcs 512 +MMmcs 20 +Mea max")
    assert fs.flags == (
        Flag("B", "as", "aoffcbf"),
        Flag("B", "lmbcs", 512 * KB),
        Flag("M", "mcs", 20),
        Flag("", "ea", "max"),
    )


def test_parse_accepts_token_lists_and_glued_values():
    assert parse(["+MBsbct", "1024"]) == parse("+MBsbct1024") == parse("+MBsbct 1024")
    # `as` is a prefix of `asbcst`: the longest parameter name wins, as in erts.
    assert parse("+MBasbcst 100").flags == (Flag("B", "asbcst", 100 * KB),)
    assert parse("+MBasaobf").flags == (Flag("B", "as", "aobf"),)


def test_parse_units():
    fs = parse("+MMscs 2048 +MIscs 512 +Muycs 2048 +MYtt 256 +MBacfml 4096 +MBacul de")
    assert [f.value for f in fs] == [2048 * MB, 512 * MB, 2048 * KB, 256 * KB, 4096, "de"]


def test_u_expands_to_eight_allocators_only():
    fs = parse("+Musbct 256")
    for letter in U_LETTERS:
        assert fs.for_allocator(letter) == [Flag(letter, "sbct", 256 * KB)]
    for letter in ("T", "I", "Z"):
        assert fs.for_allocator(letter) == []
    cfg = effective_config(fs, 2)
    assert cfg["binary_alloc"].sbct == 256 * KB
    assert cfg["temp_alloc"].sbct == 512 * KB
    assert cfg["literal_alloc"].sbct == UINT_MAX


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("+MXas bf", "unknown allocator letter 'X'"),
        ("+MBfoo 1", "unknown parameter 'foo'"),
        ("+MBsbct", "+MBsbct expects a value"),
        ("+MBsbct +MBas bf", "+MBsbct expects a value"),
        ("+MBas best", "bad value 'best' for +MBas"),
        ("+MBas af", "temp_alloc only"),
        ("+MBacul 101", "expected 0..100"),
        ("+MBsbct -1", "non-negative integer"),
        ("+MBsbct 1k", "non-negative integer"),
        ("+MBramv yes", "expected true or false"),
        ("+MBcp X", "bad value 'X' for +MBcp"),
        ("+MTacul 50", "carrier migration is not allowed for temp_alloc"),
        ("+MIcp B", "carrier migration is not allowed for literal_alloc"),
        ("+MTe false", "temp_alloc cannot be disabled"),
        ("+MYe false", "sys_alloc cannot be disabled"),
        ("+MMlp on", "needs OTP 27"),
        ("+P 100", "unexpected '+P'"),
        ("aoffcbf", "unexpected 'aoffcbf'"),
        ("+Mea sometimes", "expected min|max"),
        ("+Mfoo 1", "unknown parameter 'foo'"),
    ],
)
def test_errors_are_flagerrors_with_one_clear_line(text, message):
    with pytest.raises(FlagError) as info:
        parse(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)
    # the lint sorts by the kind, never by the words (issue 27 item 1)
    assert info.value.kind == ("release" if "needs OTP" in message else "invalid")


def test_version_gates():
    assert parse("+MMlp on", otp=27).flags == (Flag("M", "lp", "on"),)
    parse("+Mea config", otp=25)
    with pytest.raises(FlagError, match="removed in OTP 26") as info:
        parse("+Mea config", otp=26)
    assert info.value.kind == "release"
    with pytest.raises(FlagError, match="OTP 22 is not modelled"):
        parse("", otp=22)


# --- rendering -------------------------------------------------------------------------------


def test_render_is_canonical():
    assert parse("+MMmcs 20 +MBlmbcs 512 +MBas aoffcbf").render() == (
        "+MBas aoffcbf +MBlmbcs 512 +MMmcs 20"
    )
    # last value wins; `u` is used where all eight allocators agree
    assert parse("+MBsbct 1 +MBsbct 2").render() == "+MBsbct 2"
    assert parse("+Musbct 256").render() == "+Musbct 256"
    assert parse("+Musbct 256 +MBsbct 128").render() == (
        "+MBsbct 128 +MDsbct 256 +MEsbct 256 +MFsbct 256 +MHsbct 256 +MLsbct 256 "
        "+MRsbct 256 +MSsbct 256"
    )


def test_render_keeps_order_dependent_meaning():
    # acul then as: the strategy zeroes acul (§2.1), so the acul is dropped.
    assert parse("+MBacul 50 +MBas aobf").render() == "+MBas aobf"
    # a zero left by an earlier strategy survives a later aoff-family strategy.
    assert parse("+MBas bf +MBas aoffcbf").render() == "+MBas aoffcbf +MBacul 0 +MBacful 0"
    assert parse("+MBt false +MBt true").render() == "+MBt true +MBacul 0 +MBacful 0"
    # as then acul: acul wins later and forces aoffcbf; canonical order keeps that.
    assert parse("+MBas aobf +MBacul 50").render() == "+MBas aobf +MBacul 50"
    # ea clears earlier per-allocator `e`.
    assert parse("+MBe false +Mea max").render() == "+Mea max"
    assert parse("+Mea min +MBe true").render() == "+Mea min +MBe true"


_VALUES = {
    "as": st.sampled_from([s for s in STRATEGIES if s != "af"]),
    "acul": st.one_of(st.integers(0, 100).map(str), st.just("de")),
    "acful": st.one_of(st.integers(0, 100).map(str), st.just("de")),
    "sbct": st.integers(0, 4096).map(str),
    "lmbcs": st.integers(16, 20480).map(str),
    "smbcs": st.integers(16, 4096).map(str),
    "mmbcs": st.integers(0, 4096).map(str),
    "mbcgs": st.integers(0, 20).map(str),
    "rmbcmt": st.integers(0, 150).map(str),
    "t": st.sampled_from(["true", "false"]),
    "e": st.sampled_from(["true", "false"]),
    "cp": st.sampled_from(list("BDEFHLRS@:")),
}
_flag_tokens = st.one_of(
    st.tuples(st.sampled_from([*U_LETTERS, "u"]), st.sampled_from(sorted(_VALUES))).flatmap(
        lambda tp: _VALUES[tp[1]].map(lambda v: [f"+M{tp[0]}{tp[1]}", v])
    ),
    st.sampled_from([["+Mea", "min"], ["+Mea", "max"], ["+MMmcs", "5"], ["+MTas", "gf"]]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_flag_tokens, max_size=12), st.sampled_from([1, 2, 3, 4, 8]))
def test_render_round_trips_to_the_same_effect(tokens, schedulers):
    fs = parse([tok for pair in tokens for tok in pair])
    again = parse(fs.render())
    assert again.render() == fs.render()
    assert effective_config(again, schedulers) == effective_config(fs, schedulers)
    assert effective_globals(again, schedulers) == effective_globals(fs, schedulers)


# --- effective configuration ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedulers", "mmbcs", "mmbcs_eheap", "mmbcs_ll", "smbcs", "lmbcs"),
    [  # §2.3 "Effective values after scaling" [verified]
        (1, 128 * KB, 512 * KB, 2 * MB, 1 * MB, 10 * MB),
        (2, 64 * KB, 256 * KB, 1 * MB, 512 * KB, 5 * MB),
        (4, 32 * KB, 128 * KB, 512 * KB, 256 * KB, 5 * MB),
        (8, 32 * KB, 128 * KB, 512 * KB, 256 * KB, 5 * MB),
    ],
)
def test_default_scaling_matches_spec_table(schedulers, mmbcs, mmbcs_eheap, mmbcs_ll, smbcs, lmbcs):
    cfg = effective_config(None, schedulers)
    for name in THREAD_PREF:
        assert (cfg[name].mmbcs, cfg[name].smbcs, cfg[name].lmbcs) == (mmbcs, smbcs, lmbcs), name
    assert cfg["eheap_alloc"].mmbcs == mmbcs_eheap
    assert cfg["ll_alloc"].mmbcs == mmbcs_ll
    for name in ("eheap_alloc", "ll_alloc"):
        assert (cfg[name].smbcs, cfg[name].lmbcs) == (smbcs, lmbcs)
    # temp_alloc and literal_alloc are never scaled
    assert (cfg["temp_alloc"].mmbcs, cfg["temp_alloc"].smbcs) == (128 * KB, 1 * MB)
    assert (cfg["literal_alloc"].mmbcs, cfg["literal_alloc"].lmbcs) == (1 * MB, 10 * MB)


def test_scaling_uses_integer_division():
    assert effective_config(None, 3)["binary_alloc"].smbcs == 349_525  # §2.1


def test_explicit_sizes_are_not_scaled():
    cfg = effective_config("+MBlmbcs 512 +MBsmbcs 128", 4)["binary_alloc"]
    assert (cfg.lmbcs, cfg.smbcs, cfg.mmbcs) == (512 * KB, 128 * KB, 32 * KB)


def test_default_table_per_allocator():
    cfg = effective_config(None, 2)
    for name, c in cfg.items():
        expected = {"temp_alloc": "af", "literal_alloc": "aobf"}.get(name, "aoffcbf")
        assert c.strategy == expected, name
    assert {n: c.acul for n, c in cfg.items() if c.e} == {
        "temp_alloc": 0, "sl_alloc": 60, "std_alloc": 60, "ll_alloc": 85, "eheap_alloc": 45,
        "ets_alloc": 60, "fix_alloc": 60, "literal_alloc": 0, "binary_alloc": 60,
        "driver_alloc": 60,
    }  # fmt: skip
    assert [n for n, c in cfg.items() if c.atags] == ["binary_alloc", "driver_alloc", "test_alloc"]
    assert cfg["ll_alloc"].sbct == UINT_MAX and cfg["ll_alloc"].mmsbc == 0
    assert cfg["ll_alloc"].asbcst == 0 and cfg["ll_alloc"].rmbcmt == 0
    assert cfg["temp_alloc"].rsbcst == 90 and cfg["temp_alloc"].rmbcmt == 100
    assert cfg["sl_alloc"].rsbcst == 80 and cfg["eheap_alloc"].rsbcst == 50
    assert cfg["binary_alloc"].asbcst == 4_145_152
    assert cfg["binary_alloc"].mmmbc == UINT_MAX
    assert cfg["binary_alloc"].cp == "B" and cfg["temp_alloc"].cp is None
    assert not cfg["test_alloc"].e and cfg["test_alloc"].instances == 0
    assert cfg["binary_alloc"].instances == 3 and cfg["temp_alloc"].instances == 3
    assert cfg["literal_alloc"].instances == 1


def test_instance_zero_options_match_the_real_sample():
    # §6.4: binary_alloc instance 0 on a 2-scheduler OTP 25.2.3 node.
    opts = effective_config(None, 2)["binary_alloc"].for_instance(0).options()
    assert opts == [
        ("e", True), ("t", True), ("atags", True), ("ramv", False), ("sbct", 524288),
        ("asbcst", 4145152), ("rsbcst", 20), ("rsbcmt", 80), ("rmbcmt", 50), ("mmbcs", 65536),
        ("mmmbc", 18446744073709551615), ("mmsbc", 256), ("lmbcs", 5242880), ("smbcs", 524288),
        ("mbcgs", 10), ("acful", 0), ("acul", 0), ("acnl", 0), ("acfml", 0), ("cp", "undefined"),
        ("as", "aoffcbf"),
    ]  # fmt: skip
    inst1 = dict(effective_config(None, 2)["binary_alloc"].for_instance(1).options())
    assert (inst1["acul"], inst1["acnl"], inst1["cp"]) == (60, 1000, "B")


def test_instance_zero_specials():
    cfg = effective_config(None, 2)
    assert cfg["temp_alloc"].for_instance(0).strategy == "gf"  # §4.5
    assert cfg["temp_alloc"].for_instance(1).strategy == "af"
    assert not cfg["ets_alloc"].for_instance(0).main_carrier  # mmbc0 = 0
    assert cfg["ets_alloc"].for_instance(1).main_carrier
    assert not cfg["binary_alloc"].for_instance(0).pool_enabled
    assert cfg["binary_alloc"].for_instance(1).pool_enabled


def test_non_aoff_strategy_turns_migration_off():
    cfg = effective_config("+MBas bf", 2)["binary_alloc"]
    assert (cfg.strategy, cfg.acul, cfg.cp, cfg.pool_enabled) == ("bf", 0, None, False)


def test_later_acul_forces_aoffcbf():
    assert effective_config("+MBas aobf +MBacul 50", 2)["binary_alloc"].strategy == "aoffcbf"
    assert effective_config("+MBacul 50 +MBas aobf", 2)["binary_alloc"].strategy == "aobf"
    assert effective_config("+MBacul 0 +MBas aobf", 2)["binary_alloc"].strategy == "aobf"
    # aoff-family strategies keep acul
    cfg = effective_config("+MBas ageffcbf", 2)["binary_alloc"]
    assert (cfg.strategy, cfg.acul) == ("ageffcbf", 60)


def test_t_false_and_acul():
    cfg = effective_config("+MBt false", 2)["binary_alloc"]
    assert (cfg.t, cfg.acul, cfg.instances, cfg.mmbcs) == (False, 0, 1, 128 * KB)
    cfg = effective_config("+MBt false +MBacul 30", 2)["binary_alloc"]
    assert (cfg.t, cfg.acul, cfg.instances) == (True, 30, 3)
    # ll_alloc is thread-preferred only because of its default acul
    ll = effective_config("+MLacul 0", 2)["ll_alloc"]
    assert (ll.t, ll.instances, ll.strategy, ll.mmbcs) == (False, 1, "aobf", 2 * MB)


def test_acul_de_and_acful_rules():
    assert effective_config("+MHacul de", 1)["eheap_alloc"].acul == 45
    cfg = effective_config("+MBacful de", 1)["binary_alloc"]
    assert cfg.acful == 40  # acul - 20
    assert effective_config("+MBacul 30 +MBacful 50", 1)["binary_alloc"].acful == 30


def test_clamps():
    cfg = effective_config("+MBrmbcmt 150 +MBmbcgs 0", 1)["binary_alloc"]
    assert (cfg.rmbcmt, cfg.mbcgs) == (100, 1)
    assert effective_globals("+MMmcs 99").mcs == 30


def test_ea_min_disables_u_allocators():
    cfg = effective_config("+Mea min", 2)
    assert [n for n, c in cfg.items() if c.e] == ["temp_alloc", "literal_alloc"]
    assert effective_config("+Mea min +MBe true", 2)["binary_alloc"].e
    with pytest.raises(FlagError, match="legacy"):
        effective_config("+Mea r11b", 2)


def test_globals_and_dai():
    g = effective_globals("+MMmcs 20 +Muycs 1000 +MMscs 1024 +Mdai max", 4)
    assert (g.mcs, g.ycs, g.scs, g.dai) == (20, 1008 * KB, 1024 * MB, 4)
    assert effective_config("+Mdai 2", 4)["binary_alloc"].instances == 7
    assert effective_globals().ycs == 1 * MB


def test_replay_config_is_json_ready():
    import json

    rc = replay_config("+MBas bf", 2)
    json.dumps(rc)
    assert rc["flags"] == "+MBas bf"
    assert len(rc["allocators"]["binary_alloc"]) == 3
    assert rc["allocators"]["binary_alloc"][0]["instance"] == 0
    assert rc["allocators"]["test_alloc"] == []


def test_flagset_is_iterable_and_addable():
    fs = parse("+MBas bf") + parse("+MBacul 10")
    assert isinstance(fs, FlagSet) and len(fs) == 2
    assert effective_config(fs, 2)["binary_alloc"].strategy in AOFF_FAMILY
