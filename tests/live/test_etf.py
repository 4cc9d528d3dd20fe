"""collector/etf.py: the same Python terms as collector/terms.py, and bounded."""

from __future__ import annotations

import base64
import struct
import subprocess
import zlib

import pytest

from beamalloc.collector import etf
from beamalloc.collector.terms import Atom, Opaque, format_term, parse_term


def _b(*parts: bytes | int) -> bytes:
    return bytes([131]) + b"".join(bytes([p]) if isinstance(p, int) else p for p in parts)


def test_scalars() -> None:
    assert etf.decode(_b(97, 200)) == 200
    assert etf.decode(_b(98, struct.pack(">i", -5))) == -5
    # mmmbc (docs/erts/alloc_util.md §6.1)
    assert etf.decode(_b(110, 8, 0, b"\xff" * 8)) == 2**64 - 1
    assert etf.decode(_b(110, 1, 1, 7)) == -7
    assert etf.decode(_b(70, struct.pack(">d", 1.5))) == 1.5
    a = etf.decode(_b(119, 3, b"abc"))
    assert isinstance(a, Atom) and a == "abc"
    assert etf.decode(_b(109, struct.pack(">I", 2), b"hi")) == b"hi"


def test_lists_and_strings_follow_terms_py() -> None:
    assert etf.decode(_b(106)) == []
    assert etf.decode(_b(107, struct.pack(">H", 3), b"0.9")) == "0.9"
    # ~p prints [1,2,3] as a list, so it is not a str here either
    assert etf.decode(_b(107, struct.pack(">H", 3), bytes([1, 2, 3]))) == [1, 2, 3]
    t = etf.decode(_b(104, 2, 119, 1, b"a", 108, struct.pack(">I", 1), 97, 1, 106))
    assert t == (Atom("a"), [1])
    assert parse_term(format_term(t) + ".") == t


def test_compressed() -> None:
    inner = bytes([107]) + struct.pack(">H", 5) + b"hello"
    data = bytes([131, 80]) + struct.pack(">I", len(inner)) + zlib.compress(inner)
    assert etf.decode(data) == "hello"


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", "version"),
        (b"\x83", "truncated"),
        (_b(104, 5, 97, 1), "truncated"),
        (_b(108, struct.pack(">I", 2**31), 106), "truncated"),  # claims 2^31 elements
        (_b(108, struct.pack(">I", 1), 97, 1, 97, 2), "improper"),
        (_b(111, struct.pack(">I", 10**6), 0), "integer of"),
        (_b(97, 1, 97, 2), "after the end"),
        (_b(250), "unknown"),
        (bytes([131, 80]) + struct.pack(">I", 2**31) + zlib.compress(b"x"), "compressed"),
        (bytes([131, 80]) + struct.pack(">I", 5) + zlib.compress(b"\x6a"), "stated size"),
        (_b(*([104, 1] * 300), 106), "nested deeper"),
    ],
)
def test_refuses_bad_input(data: bytes, words: str) -> None:
    with pytest.raises(etf.ETFError, match=words):
        etf.decode(data)


@pytest.mark.live
def test_matches_term_text_of_real_allocator_data() -> None:
    """term_to_binary and ~p of the same terms, from a real node, decode to equal terms."""
    expr = ("[erlang:memory(), erlang:system_info({allocator, binary_alloc}), "
            "erlang:system_info({allocator, mseg_alloc}), "
            "erlang:system_info({allocator, erts_mmap}),"
            " 1 bsl 64 - 1, -(1 bsl 70), 2.5, 'Quoted atom', \"é\\n\", [1000], <<1,2>>, {}]")
    code = (f"T = {expr}, io:format(\"~s~n~s~n~p.~n\", [base64:encode(term_to_binary(T)), "
            "base64:encode(term_to_binary(T, [compressed])), T]), halt().")
    out = subprocess.run(["erl", "-noshell", "-eval", code], capture_output=True,
                         encoding="latin-1", timeout=30, check=True).stdout
    plain, compressed, text = out.split("\n", 2)
    want = parse_term(text)
    assert etf.decode(base64.b64decode(plain)) == want
    assert etf.decode(base64.b64decode(compressed)) == want


@pytest.mark.live
def test_opaque_terms() -> None:
    code = ("io:format(\"~s~n\", [base64:encode(term_to_binary([self(), make_ref(), "
            "fun lists:map/2]))]), halt().")
    out = subprocess.run(["erl", "-noshell", "-eval", code], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    pid, ref, fun = etf.decode(base64.b64decode(out))
    assert all(isinstance(x, Opaque) for x in (pid, ref, fun))
    assert parse_term(format_term([pid, ref, fun]) + ".") == [pid, ref, fun]


def _enc(t: object) -> bytes:
    """A small term_to_binary for the tests (OTP 25 writes atoms as ATOM_EXT)."""
    if isinstance(t, Atom):
        return bytes([100]) + struct.pack(">H", len(t)) + t.encode("latin-1")
    if isinstance(t, int):
        return bytes([97, t]) if 0 <= t < 256 else bytes([98]) + struct.pack(">i", t)
    if isinstance(t, str):
        return bytes([107]) + struct.pack(">H", len(t)) + t.encode("latin-1")
    if isinstance(t, tuple):
        return bytes([104, len(t)]) + b"".join(_enc(x) for x in t)
    assert isinstance(t, list)
    if not t:
        return bytes([106])
    return bytes([108]) + struct.pack(">I", len(t)) + b"".join(_enc(x) for x in t) + bytes([106])


SAMPLE = [(Atom("instance"), 0, [(Atom("versions"), "0.9", "3.0"),
                                 (Atom("mbcs"), [(Atom("carriers"), 1, 70000, -3)]),
                                 (Atom("calls"), [(Atom("binary_alloc"), 0, 12)])])]


@pytest.mark.live
def test_every_truncation_and_corruption_is_an_etf_error() -> None:
    data = bytes([131]) + _enc(SAMPLE)
    assert etf.decode(data) == SAMPLE
    for cut in range(len(data)):
        with pytest.raises(etf.ETFError):
            etf.decode(data[:cut])
    # A changed byte can still make a valid term: the VM's binary_to_term is the reference.
    # It accepts what ours refuses in one way only: bytes after the term (`used` tells).
    changed = [data[:i] + bytes([v]) + data[i + 1 :]
               for i in range(1, len(data)) for v in (0, 1, 106, 255)]
    vm = _vm_verdicts(changed)
    assert len(vm) == len(changed) and {"ok", "bad"} <= set(vm)
    for b, verdict in zip(changed, vm, strict=True):
        try:
            etf.decode(b)
            ours = "ok"
        except etf.ETFError:
            ours = "bad"
        assert ours == ("bad" if verdict == "trailing" else verdict), b.hex()


def _vm_verdicts(binaries: list[bytes]) -> list[str]:
    """binary_to_term(B, [used]) in a real VM: "ok", "trailing" (a term, then more bytes) or
    "bad" (badarg)."""
    code = ("[io:format(\"~s~n\", [try X = binary:decode_hex(list_to_binary(L)), "
            "{_, U} = binary_to_term(X, [used]), "
            "case U =:= byte_size(X) of true -> ok; false -> trailing end "
            "catch error:badarg -> bad end]) "
            "|| L <- string:lexemes(io:get_chars('', 100000000), \"\\n\")], halt().")
    r = subprocess.run(["erl", "-noshell", "-eval", code],
                       input="\n".join(b.hex() for b in binaries) + "\n",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-500:]
    return r.stdout.split()
