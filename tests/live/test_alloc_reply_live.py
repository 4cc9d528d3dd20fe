"""The native allocator-reply reader (collector/native/src/alloc_reply.rs) on what each test
release's node sends today: every alloc_util allocator's reply is read natively (a release
whose shape it declined would fall back to the slower Python path unseen), and reads as the
decoder and system_info.py read it (tests/fuzz/alloc_props.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from beamalloc.collector import etf, session, system_info
from beamalloc.collector.access import Access
from beamalloc.collector.terms import Atom

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))
import alloc_props

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not shutil.which("erl"), reason="Erlang/OTP not installed")]


def test_every_allocator_is_read_natively(any_target) -> None:
    t = any_target
    got: dict[str, bytes] = {}

    def work(conn, deadline: float) -> None:
        for a in conn.call("erlang", "system_info", [Atom("alloc_util_allocators")], deadline):
            r = conn.receive(conn.send_raw("erlang", "system_info", [(Atom("allocator"), a)]),
                             deadline)
            got[str(a)] = bytes(r.data[r.pos:])

    with session.Session(t.cookie, access=Access()) as s:
        s.run(t.node, 30.0, work)
    assert {"binary_alloc", "eheap_alloc", "ets_alloc"} <= set(got)
    for alloc, data in got.items():
        native = system_info.native_info(alloc, data, 0, etf.MAX_WORDS)
        assert native is not None, f"{alloc} declined"
        assert len(native.instances) == 5 or alloc == "literal_alloc"  # +S 4: 0..4
        assert alloc_props.check(data, alloc)
