"""Issue 22 item 6, the two causes of the verdict's instability found on fresh nodes: the fill
bands the calibration compares (analyzer/predict.py FILL_EDGES) and the history's block size
(ALIGN_PAD)."""

from __future__ import annotations

from recommend_fixtures import load

from beamalloc.analyzer import predict as pr
from beamalloc.analyzer.findings import facts

MIB = 1 << 20


#: One scheduler instance of fresh binspike nodes under the defaults (OTP 29.1, tests/e2e/reads.py):
#: (carrier KiB, fill). The base set sits in a 4 MiB spike carrier on one node and in an 8 MiB
#: one on the other (the replayed history's), the rest holds a straggler or two.
SIZES = (64, 2048, 2048, 4096, 4096, 4096, 4096, 8192, 8192)
IN_FOUR = (0.283, 0.0, 0.001, 0.0, 0.0, 0.001, 0.411, 0.0, 0.0)
IN_EIGHT = (0.239, 0.0, 0.001, 0.0, 0.0, 0.001, 0.001, 0.0, 0.206)


def _map(fills: tuple[float, ...]) -> list[tuple[int, int]]:
    return [(k * 1024, int(f * k * 1024)) for k, f in zip(SIZES, fills, strict=True)]


def test_where_the_live_set_lands_among_a_spikes_carriers_is_one_band() -> None:
    """binspike's base set, churned after the drop, fills an 8 MiB spike carrier to 20 % or a
    4 MiB one to 41 %, as the node's address order decides: one band, so the right history
    reproduces both nodes (it came 0.22 off with 5-25 % and 25-75 % apart). Stragglers, sparse,
    partly filled and full carriers stay four bands."""
    a, b = pr._bands(_map(IN_FOUR)), pr._bands(_map(IN_EIGHT))
    assert a is not None and b is not None and len(a) == len(pr.FILL_EDGES) + 1 == 4
    assert pr.calibration_error(pr.Measures(1, 9, a), pr.Measures(1, 9, b)) < pr.TOLERANCE
    fills = [0.002, 0.03, 0.3, 0.9]  # a straggler, sparse, scattered survivors, full
    assert [pr._bands([(MIB, int(f * MIB))]).index(1.0) for f in fills] == [0, 1, 2, 3]


def test_a_replayed_history_peaks_at_the_nodes_block_bytes() -> None:
    """The fit's mean block leaves out the header and the rounding to 8 the replay adds again:
    the history's spike holds the node's peak bytes (churn_bf: 0.1 % under; 0.4 % over
    without ALIGN_PAD, whose spike's last carrier kept survivors a turnover drains)."""
    snap = load("churn_bf")
    fit = pr.fit_history(snap, "binary_alloc")
    assert fit is not None and fit.scale > 0.99
    insts = pr._sched(snap, "binary_alloc")
    node_peak = fit.scale * sum(i.mbcs.block_size.max for i in insts) / len(insts)
    with pr.Predictor(snap, facts(snap)) as p:
        h = p._history("binary_alloc")
        assert h is not None
        kept = next(c for c in h.candidates if c.future == "kept" and not c.history.stragglers)
        r = p._history_replay(kept.path, kept.events, p.base, fit.modelled)
    model = pr._sched(r.snapshot, "binary_alloc")
    model_peak = sum(i.mbcs.block_size.max for i in model) / len(model)
    assert abs(model_peak - node_peak) / node_peak < 0.002, (model_peak, node_peak)
