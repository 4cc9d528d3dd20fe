"""End to end with refalloc (issue 5, item 5): a real workload traced from a quiescent node,
replayed under the node's own flags, against the node's own binary_alloc statistics at the end
of the trace. The table: `python tests/ebpf/e2e_replay.py` (docs/ebpf.md, "End to end")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_replay import ALLOCATOR, compile_workload, run_e2e
from ebpfhelp import requires_bpf

pytestmark = [requires_bpf, pytest.mark.live]

TOLERANCE = 0.10  # the goal


@pytest.fixture(scope="module")
def binlife_ebin(tmp_path_factory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("binlife")
    compile_workload(str(d))
    yield str(d)


# Defaults (aoffcbf, carrier pool on) and a set that changes strategy, carrier sizes and turns
# the pool off: the header must carry the node's flags, and the replay must follow them.
@pytest.mark.parametrize("flags", ["", "+MBas aobf +MBlmbcs 2048 +MBacul 0"])
def test_replay_of_a_traced_workload_matches_the_node(binlife_ebin: str, tmp_path,
                                                      flags: str) -> None:
    r = run_e2e(binlife_ebin, tmp_path, workers=4, per_worker=1500, seed=1, flags=flags)
    print("\n" + r.table())
    assert r.flags == flags  # read from the emulator's command line (erlexec's -MBas form)
    assert r.schedulers >= 1
    c = r.counts
    # The workload's life is inside the trace: 4 x 1500 + 4 x 750 allocations, all but the
    # kept 600 freed; what the trace could not see is counted, not hidden.
    assert c.allocs[ALLOCATOR] >= 9000
    assert c.live_at_end[ALLOCATOR] >= 600
    assert c.unknown_frees[ALLOCATOR] <= 10, c.unknown_frees
    assert r.anomalies["unknown_free"] == sum(c.unknown_frees.values())
    # A uretprobe can miss under load (an entry record overwritten before its return); such
    # events are counted and reported, and must stay rare enough not to move the comparison.
    events = sum(c.allocs.values()) + sum(c.frees.values()) + sum(c.reallocs.values())
    assert r.tracer["lost_events"] <= max(2, events // 1000), r.tracer["lost"]
    # The workload drives binary_alloc far beyond its boot state (three main carriers).
    assert r.measured["mbcs carriers_size"][1] > 20 * r.before["mbcs carriers_size"][0]
    assert r.measured["sbcs carriers_size"][1] > 10 << 20
    for when, key, pred, meas, err in r.rows():
        assert err <= TOLERANCE, (when, key, pred, meas)
