"""Erlang terms in Python, and their text form (what `io_lib:format("~p.~n", [T])` writes).

The mapping, shared with the external-term-format decoder (etf.py):

    atom            -> Atom (a str subclass, so `Atom("cp") == "cp"`)
    integer, float  -> int, float
    tuple, list     -> tuple, list
    "a string"      -> str (a printable char list; `[]` stays `[]`)
    <<"bin">>       -> bytes
    pid, port, ref, fun -> Opaque (kept as text; allocator data never holds them)

The parser is iterative, so a term nested 100,000 deep is an error message, not a
RecursionError, and it refuses absurd integer literals instead of spending minutes on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from beamalloc._refalloc import term_text
from beamalloc.errors import InputError

#: Longest integer literal accepted. The largest in real allocator data is mmmbc,
#: 18446744073709551615 (20 digits, docs/erts/alloc_util.md §6.1); anything near this bound is
#: garbage.
MAX_INT_DIGITS = 64
#: Deepest nesting accepted. Allocator data nests about 8 deep (docs/erts/recon-formulas.md §3.1).
MAX_DEPTH = 256


class TermError(InputError):
    """The text is not a well-formed Erlang term of the kind beamalloc reads."""


class Atom(str):
    """An Erlang atom. Compares equal to its name; `repr` shows it as Erlang would."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Atom({str(self)!r})"


class Opaque(str):
    """A pid, port, reference or fun, kept as its printed text."""

    __slots__ = ()


Term = Atom | int | float | str | bytes | tuple | list | Opaque

_TOKEN = re.compile(
    r"""
    (?P<ws>(?:\s+|%[^\n]*)+)
  | (?P<float>[-+]?\d+\.\d+(?:[eE][-+]?\d+)?)
  | (?P<int>[-+]?\d+(?:\#[0-9a-zA-Z]+)?)
  | (?P<char>\$(?:\\.|.))
  | (?P<atom>[a-z][A-Za-z0-9_@]*)
  | (?P<qatom>'(?:[^'\\]|\\.)*')
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<opaque>\#(?:Ref|Port|Fun)<[^>]*>|<\d+\.\d+\.\d+>)
  | (?P<punct><<|>>|[{}\[\],|.])
    """,
    re.VERBOSE | re.DOTALL,
)

_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "s": " ",
    "e": "\x1b",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "d": "\x7f",
    "\\": "\\",
    "'": "'",
    '"': '"',
}


def _unescape(body: str) -> str:
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                j = i + 1
                while j < len(body) and j < i + 4 and body[j] in "01234567":
                    j += 1
                out.append(chr(int(body[i + 1 : j], 8)))
                i = j
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


def _int_literal(text: str, tok: str, pos: int) -> int:
    digits = tok.lstrip("+-")
    if len(digits) > MAX_INT_DIGITS:
        raise TermError(
            f"integer literal of {len(digits)} characters at {_where(text, pos)} "
            f"(allocator statistics never exceed {MAX_INT_DIGITS})"
        )
    if "#" in tok:
        base, _, value = digits.partition("#")
        try:
            n = int(value, int(base))
        except ValueError as e:
            raise TermError(f"bad based integer at {_where(text, pos)}") from e
        return -n if tok.startswith("-") else n
    return int(tok)


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    pos, end = 0, len(text)
    match = _TOKEN.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            # What is there is not shown: the file may be a secret given by mistake.
            raise TermError(f"unexpected input at {_where(text, pos)}: not an Erlang term")
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            yield kind, m.group(), pos
        pos = m.end()


def parse_terms(text: str, final_dot: bool = True) -> list[Term]:
    """Parse every dot-terminated term in `text` (what `file:consult/1` reads).

    With `final_dot=False` the last term may lack its '.', as a term pasted from a shell does.
    """
    terms: list[Term] = []
    stack: list[tuple[str, list]] = []  # open containers: (closing token, items so far)
    # "value": a term may start here; "open": just after an opening bracket;
    # "after": a term just ended, so a separator, a closing bracket or '.' comes next.
    state = "value"

    def emit(v: Term) -> None:
        nonlocal state
        (stack[-1][1] if stack else terms).append(v)
        state = "after"

    for kind, tok, pos in _tokens(text):
        if kind != "punct" or tok in _OPENERS:
            if state == "after":
                raise TermError(f"missing ',' before the {_KINDS[kind]} at {_where(text, pos)}")
            if kind == "punct":
                if len(stack) >= MAX_DEPTH:
                    raise TermError(f"terms nested deeper than {MAX_DEPTH} at {_where(text, pos)}")
                stack.append((_OPENERS[tok], []))
                state = "open"
            else:
                emit(_scalar(kind, tok, text, pos))
        elif (tok == "." and state == "after" and not stack) or (
            tok == "," and state == "after" and stack
        ):
            state = "value"
        elif stack and tok == stack[-1][0] and state in ("open", "after"):
            closer, items = stack.pop()
            if closer == "}":
                emit(tuple(items))
            elif closer == "]":
                emit(items)
            else:
                emit(_binary(items, text, pos))
        elif tok == "|":
            raise TermError(f"improper list at {_where(text, pos)}")
        else:
            raise TermError(f"unexpected {_PUNCT.get(tok, 'punctuation')} at {_where(text, pos)}")
    if stack or (state != "value" and (final_dot or not terms)):
        raise TermError("the input ends before the term does (missing '.' or a closing bracket)")
    return terms


_OPENERS = {"{": "}", "[": "]", "<<": ">>"}
#: Tokens by what they are, for messages that show no input.
_KINDS = {"float": "number", "int": "number", "char": "character literal", "atom": "atom",
          "qatom": "atom", "string": "string", "opaque": "pid, port or reference",
          "punct": "opening bracket"}
_PUNCT = {"}": "'}'", "]": "']'", ">>": "'>>'", ",": "','", ".": "'.'", "|": "'|'",
          "{": "'{'", "[": "'['", "<<": "'<<'"}


def _scalar(kind: str, tok: str, text: str, pos: int) -> Term:
    if kind == "int":
        return _int_literal(text, tok, pos)
    if kind == "float":
        x = float(tok)
        if x in (float("inf"), float("-inf")):  # 1.0e999: no Erlang float, and no JSON number
            raise TermError(f"float out of range at {_where(text, pos)}")
        return x
    if kind == "atom":
        return Atom(tok)
    if kind == "qatom":
        return Atom(_unescape(tok[1:-1]))
    if kind == "string":  # "" is [] in Erlang, and format_term prints it so
        return _unescape(tok[1:-1]) or []
    if kind == "char":
        return ord(_unescape(tok[1:]))
    return Opaque(tok)


def _binary(items: list, text: str, pos: int) -> bytes:
    out = bytearray()
    for it in items:
        if isinstance(it, int) and 0 <= it < 256:
            out.append(it)
        elif isinstance(it, str) and not isinstance(it, Atom):
            out.extend(it.encode("latin-1", "replace"))
        else:
            raise TermError(f"unsupported binary segment at {_where(text, pos)}")
    return bytes(out)


def parse_term(text: str, final_dot: bool = True) -> Term:
    """Parse exactly one dot-terminated term."""
    terms = parse_terms(text, final_dot)
    if len(terms) != 1:
        raise TermError(f"expected one term, found {len(terms)}")
    return terms[0]


# ---- printing ---------------------------------------------------------------------------

def format_term(term: Term) -> str:
    """Render a term as compact Erlang text that parse_term reads back to an equal term.

    The one writer of term text is Rust (collector/native/src/term_text.rs, which states the
    mapping): snapshots of +S 64 nodes keep megabytes of it in `.raw`. TypeError for a Python
    object that is no term."""
    return term_text(term, Atom, Opaque)


def proplist(items: object) -> dict:
    """`[{K, V}, ...]` as a dict of K -> V; longer tuples map K -> the rest as a tuple.

    Non-tuple items are ignored, like proplists:get_value/2 ignores them.
    """
    out: dict = {}
    if not isinstance(items, list):
        return out
    # A live snapshot of a +S 64 node calls this ~5,000 times: the loop stays lean (one
    # isinstance per item on the common path; the first of equal keys wins, as setdefault).
    for it in items:
        if type(it) is tuple and len(it) >= 2:
            k = it[0]
            if isinstance(k, str):
                k = str(k)  # an Atom's name, a plain str
                if k not in out:
                    out[k] = it[1] if len(it) == 2 else it[1:]
        elif isinstance(it, tuple) and it and isinstance(it[0], str):  # a 1-tuple, a subclass
            out.setdefault(str(it[0]), it[1] if len(it) == 2 else it[1:])
    return out
