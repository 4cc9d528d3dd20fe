"""Initial calls carried typed from every source (issue 27 item 1): the live scan's terms, a crash
dump's `Spawned as`, a stored scan's JSON all give collector/processes.py MFA (module, function,
arity), rendered as the text the JSON always had, so nothing downstream splits the text."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

from beamalloc.advice import holders as h
from beamalloc.collector.procdump import read_procdump
from beamalloc.collector.processes import MFA, mfa
from beamalloc.collector.terms import Atom
from beamalloc.timeseries import scans

DUMP = Path(__file__).resolve().parents[1] / "samples" / "otp25" / "erl_crash.dump"


def test_a_term_is_read_typed_and_rendered_as_before() -> None:
    m = mfa((Atom("proc_lib"), Atom("init_p"), [1, 2, 3, 4, 5]))  # arguments: their count
    assert m is not None and (m.module, m.function, m.arity) == ("proc_lib", "init_p", 5)
    assert m == "proc_lib:init_p/5" and json.dumps([m]) == '["proc_lib:init_p/5"]'
    assert mfa((Atom("m"), Atom("f"), Atom("x"))) is None and mfa(Atom("undefined")) is None
    for back in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert isinstance(back, MFA) and back.arity == 5 and back == m


def test_text_is_read_once_as_the_dump_reader_accepts_it() -> None:
    m = MFA.read("erts_code_purger:start/0")
    assert m is not None and m.module == "erts_code_purger" and m.arity == 0
    assert MFA.read("a:b:c/3") == MFA("a", "b:c", 3)  # no ':' in a module (procdump._MFA)
    assert [MFA.read(t) for t in ("?", "m:f", "m:f/x", ":f/1", "", None)] == [None] * 6


def test_every_source_carries_the_calls_typed() -> None:
    dump = read_procdump(DUMP)
    assert dump.procs and dump.groups
    assert all(isinstance(p.initial_call, MFA) for p in dump.procs if p.initial_call)
    assert all(isinstance(g.initial_call, MFA) for g in dump.groups if g.initial_call != "?")
    stored = scans.decode(scans.encode(dump))  # a watch's stored scan, read back
    assert [p.initial_call for p in stored.procs] == [p.initial_call for p in dump.procs]
    assert all(isinstance(p.initial_call, MFA) for p in stored.procs if p.initial_call)
    assert all(isinstance(g.initial_call, MFA) for g in stored.groups if g.initial_call != "?")
    # the JSON is the text it was: encode(decode(x)) == x
    assert scans.encode(stored) == scans.encode(dump)


def test_system_by_the_typed_module() -> None:
    assert h.is_system(None, MFA("erts_literal_area_collector", "start", 0))
    assert h.is_system(None, MFA("application_master", "init", 4))
    assert not h.is_system(None, MFA("my_app", "init", 1)) and not h.is_system(None, "?")
