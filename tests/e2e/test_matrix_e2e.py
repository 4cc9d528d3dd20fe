"""Issue 22 item 8 in `make test`: the subset of the verdict's matrix (tests/e2e/matrix.py,
`make matrix` runs all of it) that reaches every verdict state on each release. Each cell starts
a workload node, recommends it as an operator would, restarts it with the flags the verdict is
about and measures; the state must be the one the workload calls for and the cell right by the
measurement, its figure within 15 points."""

from __future__ import annotations

import pytest
from matrix import FLOOR, TOLERANCE, row, run_cell
from otp import release_params

pytestmark = [pytest.mark.live, pytest.mark.slow]

#: (workload, setting, the state it calls for): one cell per verdict state.
CELLS = [
    ("churn-load", "bf", "CHANGE FLAGS"),  # migration off under churn: the flags are the cure
    ("kept", "defaults", "NO FLAG HELPS"),  # survivors kept for good pin every carrier
    ("kept", "bf", "UNDECIDED"),  # idle under bf: turnover and kept leave the same map
    ("healthy", "defaults", "HEALTHY"),
]


@pytest.mark.parametrize("release", release_params())
@pytest.mark.parametrize(("workload", "setting", "state"), CELLS,
                         ids=[f"{w}-{s}" for w, s, _ in CELLS])  # fmt: skip
def test_a_cell_gets_its_state_and_the_restart_bears_it_out(
    release: str, workload: str, setting: str, state: str
) -> None:
    c = run_cell(release, workload, setting)
    ok, why = c.judge()
    assert c.error is None, c.error
    assert c.verdict == state, row(c)
    assert ok, (why, row(c))
    if state == "CHANGE FLAGS":
        assert c.measured_pct is not None and c.measured_pct <= FLOOR, row(c)
        assert c.prediction is not None and c.prediction["known"] == "turnover", row(c)
    if state in ("NO FLAG HELPS", "UNDECIDED"):  # what it held back, measured: no gain
        assert c.measured_pct is not None and c.measured_pct > FLOOR, row(c)
        assert c.predicted_pct is not None
        assert abs(c.predicted_pct - c.measured_pct) <= TOLERANCE, row(c)
    if state == "UNDECIDED":  # both futures given, one of them the restart's
        assert c.future("turnover") is not None and c.future("kept") is not None, row(c)
        assert c.future("turnover") <= FLOOR < c.future("kept"), row(c)
    if state == "HEALTHY":
        assert c.healthy_measured and not c.tested, row(c)
