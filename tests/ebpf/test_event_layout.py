"""The compiled block program lays out `struct event` as ebpf/event.py unpacks it: bcc's ctypes
view of the program's own maps (the per-thread batch and the event inside it) against the layout
Python reads from event.bpf.h, and the batch's event count as the drain reads it."""

from __future__ import annotations

import ctypes

import pytest
from ebpfhelp import Churn, requires_bpf

from beamalloc.ebpf import beam, event, kernel
from beamalloc.ebpf.blocks import BATCH, BlockProbes

pytestmark = [requires_bpf, pytest.mark.live]


def test_the_compiled_event_is_the_one_python_reads(churn: Churn) -> None:
    probes = BlockProbes(kernel.preflight(), beam.inspect(churn.pid), trace=True)
    try:
        batch = probes.bpf["batches"].Leaf
        ev_array = dict(batch._fields_)["ev"]
        assert ev_array._length_ == BATCH
        ev = ev_array._type_
        compiled = [(name, getattr(ev, name).offset, getattr(ev, name).size)
                    for name, _ in ev._fields_ if not name.startswith("__pad")]
        assert compiled == event.layout()
        assert ctypes.sizeof(ev) == event.EVENT.size
        # The drain reads the count and the events through this same view (blocks.drain).
        b = batch()
        b.n = 2
        b.ev[1].tid, b.ev[1].op = 77, event.OP_REALLOC
        raw = bytes(b.ev)[:b.n * event.EVENT.size]
        rows = list(event.EVENT.iter_unpack(raw))
        assert len(rows) == 2
        assert dict(zip(event.FIELDS, rows[1], strict=True))["tid"] == 77
        assert dict(zip(event.FIELDS, rows[1], strict=True))["op"] == event.OP_REALLOC
    finally:
        probes.close()
