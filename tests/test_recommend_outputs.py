"""`beamalloc recommend`: the JSON contract, the paste formats, the human output, exit codes."""

from __future__ import annotations

import json

import pytest
from recommend_fixtures import SNAPS
from support import SAMPLES

from beamalloc.analyzer.outputs import FORMATS, paste_block

FLAGS = "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512"
PREDICTED_KEYS = {"allocator", "flags", "flags_before", "flags_after", "model", "before", "after",
                  "change_pct", "unused_saving", "node_unused", "fidelity", "reproduces_symptom",
                  "best_case", "not_modelled", "summary"}  # fmt: skip
FIGURES = {"carriers_size", "peak_carriers_size", "unused", "mseg_alloc_calls", "sys_alloc_calls",
           "carrier_calls"}  # fmt: skip


def test_json_contract(cli) -> None:
    r = cli("recommend", str(SNAPS / "binspike_bf.json"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["healthy"] is False
    assert doc["emulator_flags"] == FLAGS + " +MBacul de"
    for rec in doc["recommendations"]:
        assert set(rec) >= {"allocator", "flag", "value", "rule", "reason", "evidence", "cost",
                            "predicted", "not_predicted"}  # fmt: skip
        assert rec["rule"] == "R3" and rec["evidence"]["unused"] > 64 << 20
        p = rec["predicted"]  # docs/recommend.md, "predicted"
        assert rec["not_predicted"] is None and set(p) >= PREDICTED_KEYS
        assert p["flags"] == FLAGS + " +MBacul de" and p["flags_before"] == "+MBas bf"
        # bf, then the proposal: ageffcbf and acul win; bf's acful 0 stays (flags.py §2.1)
        assert p["flags_after"] == doc["emulator_flags"] + " +MBacful 0"
        assert set(p["before"]) == set(p["after"]) == FIGURES
    assert doc["prediction"]["runs"][0]["allocator"] == "binary_alloc"
    assert doc["not_predicted"] is None and doc["demoted"] == []
    assert " ".join(f"{x['flag']} {x['value']}" for x in doc["recommendations"]) == (
        doc["emulator_flags"])
    assert [x["check"] for x in doc["lint"]] == ["migration-off"]
    assert {x["rule"] for x in doc["findings"]} == {"R2", "R3"}


@pytest.mark.parametrize("sample", ["erl_crash.dump", "recon_snapshot.txt"])
def test_healthy_samples(cli, sample: str) -> None:
    r = cli("recommend", str(SAMPLES / sample), "--json")
    doc = json.loads(r.stdout)
    assert (doc["healthy"], doc["emulator_flags"], doc["recommendations"]) == (True, "", [])


def test_trade_off_shows_its_numbers(cli) -> None:
    """Must-hold 6: sbcs -> mbcs costs footprint, saves mmap calls; says so with the numbers."""
    doc = json.loads(cli("recommend", str(SNAPS / "bigbin.json"), "--json").stdout)
    recs = {x["flag"]: x for x in doc["recommendations"]}
    assert set(recs) == {"+MBsbct", "+MBlmbcs"} and all(x["trade_off"] for x in recs.values())
    ev = recs["+MBsbct"]["evidence"]
    assert ev["mseg_alloc_calls"] > 1000 and 0 < ev["carrier_calls_per_alloc"] < 1
    assert ev["sbcs_average_block"] > 1 << 20
    assert int(recs["+MBsbct"]["value"]) * 1024 > 2 * ev["sbcs_average_block"] - 1
    assert "memory for speed" in recs["+MBsbct"]["cost"]
    p = recs["+MBsbct"]["predicted"]  # and the replay puts numbers on both sides of the trade
    assert p["model"]["generator"] == "large_binaries"
    assert p["after"]["carrier_calls"] < p["before"]["carrier_calls"] / 2  # far fewer mmaps
    assert p["after"]["carriers_size"] > p["before"]["carriers_size"]  # for more carrier bytes
    human = cli("recommend", str(SNAPS / "bigbin.json")).stdout
    assert "predicted (these flags together): replay of large_binaries" in human


def test_formats() -> None:
    assert paste_block(FLAGS, "flags") == FLAGS
    assert paste_block(FLAGS, "vm.args").splitlines()[1:] == [
        "+MBas ageffcbf", "+MBsbct 256", "+MBlmbcs 512"]
    assert "rel/vm.args.eex" in paste_block(FLAGS, "mix").splitlines()[0]
    assert paste_block(FLAGS, "erl_flags") == f'export ERL_FLAGS="$ERL_FLAGS {FLAGS}"'
    assert paste_block(FLAGS, "rabbitmq").splitlines()[1].startswith(
        'export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="')
    assert all(paste_block("", f).startswith("#") or f == "flags" for f in FORMATS)
    with pytest.raises(ValueError):
        paste_block(FLAGS, "yaml")


def test_human_output_teaches(cli) -> None:
    out = cli("recommend", str(SNAPS / "binspike_bf.json"), "--format", "flags").stdout
    lines = out.splitlines()
    assert lines[1].startswith("CHANGE FLAGS: 4 flags")
    order = [out.index(s) for s in ("[R3]", "evidence:", "cost:", "Lint", "Paste (flags):")]
    assert order == sorted(order)  # verdict, advice with numbers and cost, lint, paste
    assert lines[-1] == FLAGS + " +MBacul de"
    assert "warning [migration-off] (in force)" in out
    assert "predicted (these flags together): replay of spike_and_drop" in out
    assert "Predicted for all the flags together (node's flags in force: `+MBas bf`)" in out


def test_flags_in_use_are_linted(cli) -> None:
    doc = json.loads(cli("recommend", str(SNAPS / "healthy.json"), "--json",
                         "--flags-in-use", "+MBacul 50 +MBas aobf").stdout)  # fmt: skip
    assert [(x["check"], x["where"]) for x in doc["lint"]] == [
        ("order", "given"), ("migration-off", "given")]


def test_bad_input_exit_codes(cli) -> None:
    r = cli("recommend", "no-such-file.txt")
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = cli("recommend", str(SNAPS / "healthy.json"), "--format", "yaml")
    assert r.returncode == 2
