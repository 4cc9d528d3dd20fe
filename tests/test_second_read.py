"""What `recommend NODE` reads a second time (advice/reading.py): the full second read (the
allocators again and the processes) only where the idle processes' judgement over two reads
could change a finding or the verdict, else binary_alloc's counters alone for the turnover; and
the prediction says whether its turnover decides anything (advice/predict.py
`Predictor.turnover_decides`). No node: tables built by hand and committed snapshots."""

from __future__ import annotations

import dataclasses

import pytest
from recommend_fixtures import load

from beamalloc.advice import holders as h
from beamalloc.advice import predict as pr
from beamalloc.advice.findings import facts
from beamalloc.advice.reading import idleness_matters
from beamalloc.collector.processes import MFA, Proc, ProcessTable
from beamalloc.flags import parse

MF0 = MFA("m", "f", 0)
KB = 1 << 10


def proc(pid: str, heap: int = 20 * KB, excl: int | None = 0, bins: int | None = 0) -> Proc:
    return Proc(pid=pid, name=None, initial_call=MF0, spawned_as=MF0,
                current_function="m:loop/1", status="waiting", reductions=1, memory=heap + 800,
                heap_bytes=heap, total_heap_bytes=heap, message_queue_len=0, binary_bytes=bins,
                binary_count=0, binary_exclusive_bytes=excl)  # fmt: skip


def table(*procs: Proc, total: int | None = None, complete: bool = True) -> ProcessTable:
    ps = list(procs)
    return ProcessTable(node="n@h", source="live", count=len(ps), scanned=len(ps),
                        complete=complete, procs=ps, groups=[],
                        total_heap_bytes=sum(p.total_heap_bytes for p in ps) if total is None
                        else total)  # fmt: skip


def test_a_small_node_is_judged_at_one_instant() -> None:
    """48 processes of 20 KiB (the bench's churn node holds 0.5 MiB of heaps): no idleness
    could reach a finding, so the second process scan is not taken."""
    small = table(*(proc(f"<0.{i}.0>") for i in range(48)))
    assert not idleness_matters(small)
    assert not idleness_matters(None)  # no process scan at all (--no-processes)


@pytest.mark.parametrize("why", ["heap", "total", "pinned", "dump_pinned", "incomplete",
                                 "unknown_total", "probe"])  # fmt: skip
def test_what_makes_the_idle_judgement_matter(why: str) -> None:
    ps = [proc(f"<0.{i}.0>") for i in range(10)]
    t = table(*ps)
    probe = 0
    if why == "heap":  # one idle heap worth an H2 finding
        t = table(*ps, proc("<0.99.0>", heap=h.MIN_IDLE_HEAP))
    elif why == "total":  # heaps that together could release a finding's worth
        t = table(*ps, total=h.MIN_IDLE_HEAP_TOTAL)
    elif why == "pinned":  # binaries one process alone holds (H1)
        t = table(*ps, proc("<0.99.0>", excl=h.MIN_PINNED))
    elif why == "dump_pinned":  # no exclusive figure: all it references counts
        t = table(*ps, proc("<0.99.0>", excl=None, bins=h.MIN_PINNED))
    elif why == "incomplete":  # the scan's budget cut it: the rest is unknown
        t = table(*ps, complete=False)
    elif why == "unknown_total":
        t = dataclasses.replace(t, total_heap_bytes=None)
    else:  # the GC probe picks the processes idle between the reads
        probe = 3
    assert idleness_matters(t, probe)
    assert not idleness_matters(table(*ps))


R3 = "+MBas ageffcbf +MBsbct 256 +MBlmbcs 512 +MBacul de"


@pytest.mark.parametrize(("name", "decides"), [("churn_bf", True), ("churn_defaults", False)])
def test_the_prediction_says_whether_the_turnover_decides(name: str, decides: bool) -> None:
    """churn_bf: both futures reproduce the node, 90 points apart, so the turnover decides;
    churn_defaults: the carrier map leaves one future, whatever the turnover."""
    snap = load(name)
    with pr.Predictor(snap, facts(snap)) as p:
        out = p.predict("binary_alloc", "R3", parse(R3, otp=p.base.otp))
        assert p.turnover_decides is decides
    assert (out["futures"] is not None) is decides


def test_a_short_interval_is_said_in_tenths() -> None:
    """The counters stop as soon as they show the turnover: a read 0.2 s later says so."""
    t = pr.Turnover("binary_alloc", 0.24, 2000, 20_000)
    assert t.line.startswith("sampled 0.2 s apart") and not t.idle
    assert pr.Turnover("binary_alloc", 2.03, 12, 20_000).line.startswith(
        "idle between two reads 2 s apart")
