"""build.raw_text is format_term, only faster: same text for every term."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from beamalloc.collector.build import raw_text
from beamalloc.collector.terms import Atom, Opaque, format_term

_leaf = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6).map(Atom),
    st.text(max_size=6),
    st.binary(max_size=4),
    st.sampled_from([Opaque("<0.1.2>"), None]),
)
_terms = st.recursive(_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.lists(inner, max_size=4).map(tuple)),
                      max_leaves=30)


def test_tricky_cases() -> None:
    t = [Atom("a"), "a", Atom("a"), "", [], (), Atom("end"), Atom("Quoted"), True, 1.0,
         b"\x00", ("x\n", [Atom("a")], "a")]
    assert raw_text(t) == format_term(t)


@settings(max_examples=300, deadline=None)
@given(_terms)
def test_same_as_format_term(term: object) -> None:
    assert raw_text(term) == format_term(term)
