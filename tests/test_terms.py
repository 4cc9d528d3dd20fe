"""The Erlang term text parser and printer (collector/terms.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beamalloc.collector.terms import (
    MAX_DEPTH,
    Atom,
    Opaque,
    TermError,
    format_term,
    parse_term,
    parse_terms,
)

atoms = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=12).map(Atom)
strings = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=255), min_size=1, max_size=12
)
scalars = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    atoms,
    strings,
    st.floats(allow_nan=False, allow_infinity=False),
    st.binary(max_size=8),
)
terms = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.lists(inner, max_size=5).map(tuple)),
    max_leaves=40,
)


@given(terms)
@settings(max_examples=300, deadline=None)  # no time limit: tests assert no wall-clock times
def test_format_then_parse_gives_the_same_term(term):
    back = parse_term(format_term(term) + ".")
    assert back == term
    assert type(back) is type(term)


def test_atoms_strings_and_big_integers():
    t = parse_term("{cp,'B', \"all memory\", 18446744073709551615, 'it\\'s'}.")
    assert t == ("cp", "B", "all memory", 18446744073709551615, "it's")
    assert isinstance(t[1], Atom) and not isinstance(t[2], Atom)


def test_comments_and_several_terms():
    assert parse_terms("%% a comment\n{a,1}.\n% another\n[].\n") == [("a", 1), []]


def test_missing_final_dot_is_accepted_only_when_asked():
    with pytest.raises(TermError):
        parse_term("{a,1}")
    assert parse_term("{a,1}", final_dot=False) == ("a", 1)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{a,b", "ends before"),
        ("{a b}.", "missing ','"),
        ("{a,}.", "unexpected '}'"),
        ("[1|2].", "improper list"),
        ("{a}}.", "unexpected '}'"),
        ("\x00\x01.", "unexpected input"),
        ("9" * 100 + ".", "integer literal of 100"),
    ],
)
def test_malformed_input_names_the_problem(text, message):
    with pytest.raises(TermError, match=message):
        parse_term(text)


def test_nesting_100000_deep_is_an_error_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000 + "."
    with pytest.raises(TermError, match=f"deeper than {MAX_DEPTH}"):
        parse_term(deep)
    # and the printer is iterative too
    t: list = []
    for _ in range(10_000):
        t = [t]
    assert format_term(t).count("[") == 10_001


@pytest.mark.parametrize("term, text", [
    ([Atom("a"), Atom(""), Atom("Abc"), Atom("end"), Atom("ok@host_1"), Atom("a b")],
     "[a,'','Abc','end',ok@host_1,'a b']"),
    (Atom("it's \\ \n\x7f\xa0\xad\xa1é\u2028😀"), "'it\\'s \\\\ \\012\\177\\240\\255¡é\\20050😀'"),
    (["", "x\"y", "\ud800"], '[[],"x\\"y","\\154000"]'),
    ([True, False, None, Opaque("<0.1.2>")], "[true,false,undefined,<0.1.2>]"),
    ([0, -1, 2**64 - 1, -(2**100)], f"[0,-1,{2**64 - 1},{-(2**100)}]"),
    ([1.0, -0.0, 5e-324, 1e300, 1.5e-07, 1e16, float("inf")],
     "[1.0,-0.0,5.0e-324,1.0e+300,1.5e-07,1.0e+16,inf.0]"),
    ((b"", b"\x00\xff", (), [[]]), "{<<>>,<<0,255>>,{},[[]]}"),
])
def test_format_term_writes(term: object, text: str) -> None:
    """The writer's text for the cases its quoting and number forms must get right."""
    assert format_term(term) == text


@pytest.mark.parametrize("term, kind", [({"a": 1}, "dict"), ([1, {2}], "set"), (1j, "complex")])
def test_format_term_refuses_what_is_no_term(term: object, kind: str) -> None:
    with pytest.raises(TypeError, match=f"cannot format {kind} as an Erlang term"):
        format_term(term)


def test_format_term_writes_any_depth() -> None:
    t: list = []
    for _ in range(100_000):
        t = [t]
    assert format_term(t) == "[" * 100_001 + "]" * 100_001
