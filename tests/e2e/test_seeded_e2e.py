"""Issue 17 item 8 on real nodes: the carrier-seeded prediction of a flag set against the
measured effect of restarting the workload with it (tests/e2e/seeded.py measures)."""

from __future__ import annotations

import pytest
from seeded import CASES, Seeded, predict, seeded

from beamalloc.advice.recommend import recommend

pytestmark = [pytest.mark.live, pytest.mark.slow]

_rows: dict[str, Seeded] = {}


def _row(workload: str) -> Seeded:
    if workload not in _rows:
        (case,) = [c for c in CASES if c[0] == workload]
        _rows[workload] = seeded(*case)
    return _rows[workload]


@pytest.mark.parametrize("workload", ["binspike", "heapchurn", "frag", "scatter"])
def test_seeded_prediction_within_10_points(workload: str) -> None:
    r = _row(workload)
    p = r.prediction
    # The node's history where one reproduces it (issue 22), else its present carriers.
    assert p["seeded_from"] in ("history", "carriers") and p["workload"] == "fitted", p["model"]
    assert p["reproduces_symptom"], p["fidelity"]  # the replay holds the node's waste
    if p["seeded_from"] == "history":
        assert p["calibration"]["reproduces"], p["calibration"]
    assert r.before[1] > 64 << 20  # the workload did leave carriers unused
    lo, hi = p["band"]["unused_pct"]
    assert lo <= r.predicted_pct <= hi
    if abs(r.predicted_pct - r.measured_pct) > 10:
        # One more experiment on a fresh node: each run's workload places its blocks by the
        # schedulers' timing, and binspike's predicted and measured cuts have each wandered by
        # a few points between runs (-69 to -95 predicted, -83 to -85 measured on a loaded
        # machine). Two independent misses fail; one is noise.
        first = (r.predicted_pct, r.measured_pct)
        del _rows[workload]
        r = _row(workload)
        assert abs(r.predicted_pct - r.measured_pct) <= 10, (first, (r.predicted_pct,
                                                                     r.measured_pct))


def test_heap_peak_raised_sbct_grows_the_waste() -> None:
    """heappeak's node holds almost nothing unused (0.5-2 MiB), so a percentage says little:
    the prediction and the measurement must both see the raised sbct leave tens of MiB."""
    r = _row("heappeak")
    p = r.prediction
    assert p["seeded_from"] in ("history", "carriers")
    assert p["unused_saving"] < 0
    # Measured: the peak's carriers stay pinned, at least one of +MHlmbcs's 32 MiB around the
    # kept heaps. How many depends on where the schedulers placed the heaps: six runs left
    # 28, 57, 57, 57, 91 and 91 MB unused (one, two or three carriers), against 0.5-1.6 MB before.
    assert r.after[1] > r.before[1] + (16 << 20)
    assert r.after[1] / 3 <= p["after"]["unused"] <= 3 * r.after[1], (p["after"], r.after)


@pytest.mark.parametrize("workload", ["binspike", "heapchurn"])
def test_stragglers_get_the_flags_their_prediction_shows(workload: str) -> None:
    r = _row(workload)
    rec = recommend(r.snapshot)
    assert rec["verdict"]["state"] == "CHANGE FLAGS", rec["verdict"]["headline"]
    assert set(r.flags.split(" +")) <= set(rec["emulator_flags"].split(" +"))
    # binspike's stragglers history (issue 22) where a read fits it, else its carriers
    why = " ".join(rec["verdict"]["why"])
    assert "fitted from the node's carriers" in why or (
        workload == "binspike" and "fitted from an empty VM" in why), why


@pytest.mark.parametrize("workload", ["frag", "scatter"])
def test_scattered_survivors_get_no_flag_and_the_remedy(workload: str) -> None:
    r = _row(workload)
    rec = recommend(r.snapshot)
    v = rec["verdict"]
    assert v["state"] == "NO FLAG HELPS" and rec["emulator_flags"] == "", v["headline"]
    (entry,) = [e for e in v["no_flag_helps"] if e["allocator"] == "binary_alloc"]
    assert "scattered" in entry["why"]
    copy = [x for x in entry["remedies"] if "binary:copy/1" in x["action"]]
    assert copy and copy[0]["releases"] >= 0.9 * r.before[1]


def test_heap_peak_gets_no_heap_flag() -> None:
    rec = recommend(_row("heappeak").snapshot)
    assert "+MH" not in rec["emulator_flags"], rec["verdict"]["headline"]
    assert rec["verdict"]["state"] != "CHANGE FLAGS"


def test_prediction_is_deterministic_and_stable_on_an_idle_node() -> None:
    """The same snapshot gives the same prediction; two snapshots of an unchanged node give
    predictions within 2 points (issue 17 item 5; counters-only fits once gave -15.5, -2.8
    and -14.8 % three seconds apart)."""
    from before_after import run_node_twice

    flags = CASES[0][3]
    misses = []
    for _ in range(2):  # a miss (3.1 points once in a full suite run) reruns on fresh nodes
        a, b = run_node_twice("binspike")
        p1, p2 = predict(a, "binary_alloc", "R3", flags), predict(b, "binary_alloc", "R3", flags)
        assert predict(a, "binary_alloc", "R3", flags)["change_pct"] == p1["change_pct"]
        # its stragglers' history (issue 22), or its carriers where a read misses it
        assert p1["seeded_from"] in ("history", "carriers"), p1.get("history_unfit")
        if abs(p1["change_pct"]["unused"] - p2["change_pct"]["unused"]) <= 2:
            return
        misses.append((p1["change_pct"]["unused"], p2["change_pct"]["unused"]))
    raise AssertionError(f"two snapshots of an idle node, predictions apart: {misses}")
