"""The verdict on real nodes carrying a setting the lint calls wrong (issue 22 items 4 and 5):
the verdict, the lint and the paste say the same, and the remedies fit the strategy in force."""

from __future__ import annotations

import pytest

from beamalloc.advice import wording
from beamalloc.advice.recommend import verdict
from beamalloc.cli.demo import WorkloadNode
from beamalloc.collector.live import snapshot_node
from beamalloc.flags import parse
from beamalloc.reporters.recommend import paste_of

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _snapshot(module: str, *args: str, **env: str):
    with WorkloadNode(module, extra_args=list(args), env=env) as wl:
        wl.wait_ready()
        return snapshot_node(wl.node, wl.cookie, timeout=30.0)


def test_scattered_under_bf_weighs_the_revert() -> None:
    """scatter (survivors kept for good, a few dozen in every carrier) under `+MBas bf`: the
    issue's page said NO FLAG HELPS while its lint said "prefer ageffcbf" and the paste "no
    flags". Now the revert to OTP's default is predicted from the node's own carriers and its
    figure stands beside the lint, in the why lines and in the paste; binary:copy/1 is offered
    only with the strategy reverted (under bf the copies land in the same holes)."""
    rec = verdict(_snapshot("scatter", "+MBas", "bf"))
    v, doc = rec.verdict, rec.to_json()
    (lint,) = [i for i in doc["lint"] if i["check"] == "migration-off"]
    assert lint["allocator"] == "binary_alloc" and lint["where"] == "in force"
    (rv,) = v.reverts
    # typed flags (beamalloc/flags.py), rendered only by the wording and the JSON
    assert rv.flags_in_force == tuple(parse("+MBas bf"))
    assert rv.flags == tuple(parse("+MBas aoffcbf +MBacul de"))
    assert rv.prediction is not None and rv.prediction.seeded_from in ("history", "carriers")
    assert lint["verdict"] == wording.revert(rv)
    if rv.advised:
        assert v.state == "CHANGE FLAGS" and "+MBas aoffcbf" in doc["emulator_flags"]
        return
    # one read of an idle node: kept survivors and turned-over ones may both reproduce it under
    # bf (UNDECIDED, both figures); either way the revert's figure is said, never left out
    assert v.state in ("NO FLAG HELPS", "UNDECIDED") and rv.prediction.unused_saving < 0.20
    said = " ".join(wording.why(v))
    assert wording.revert_short(rv) in said
    block = paste_of(rec, "vm.args")
    assert block.startswith("# beamalloc: no +M flags to set") and wording.revert(rv) in block
    (e,) = [x for x in v.no_flag_helps if x.allocator == "binary_alloc"]
    codes = [r.code for r in e.remedies]
    assert "binary_copy_reverted" in codes and "binary_copy" not in codes
