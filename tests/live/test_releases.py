"""The verdict's workload matrix on every test release (tests/otp.py): each workload of
samples/workloads/ run live on OTP 25, 27 and 29 with 2 schedulers, as the stored OTP 25
snapshots were taken (docs/recommend.md, "Checked on real workloads"), proposes the flags of the
same rules as those snapshots do (tests/test_rules.py, test_workload_candidates)."""

from __future__ import annotations

import pytest
from otp import start_workload

from beamalloc.advice.recommend import recommend
from beamalloc.collector.live import snapshot_node

pytestmark = [pytest.mark.live, pytest.mark.slow]

#: name -> (workload module, its emulator flags, its environment, the rules that propose flags)
MATRIX = {
    "binspike": ("binspike", "", {}, {"R3", "R10"}),
    "binspike_bf": ("binspike", "+MBas bf", {}, {"R3"}),
    # 700 replacements per worker instead of 2,000: still over R7's 1,000 carrier calls, in a
    # third of the time (the stored snapshot ran the default)
    "bigbin": ("bigbin", "", {"CHURN": "700"}, {"R7"}),
    "etschurn": ("etschurn", "", {}, {"R5", "R10"}),
    "heapchurn": ("heapchurn", "", {}, {"R4", "R10"}),
    "healthy": ("healthy", "", {}, set()),
}


@pytest.mark.parametrize("name", list(MATRIX))
def test_workload_candidates_on_each_release(otp_release: str, name: str) -> None:
    module, flags, env, rules = MATRIX[name]
    with start_workload(otp_release, module, flags=["+S", "2", *flags.split()], env=env) as wl:
        wl.wait_ready()
        snap = snapshot_node(wl.node, wl.cookie, timeout=60.0)
    assert snap.otp_release == otp_release and snap.schedulers == 2
    r = recommend(snap, predict=False)
    got = {x["rule"] for x in r["findings"] if x["candidate_flags"]}
    assert got == rules, (name, otp_release, [(x["rule"], x.get("why") or x.get("title"))
                                              for x in r["findings"]])
    assert r["healthy"] is (name in ("healthy", "bigbin"))
