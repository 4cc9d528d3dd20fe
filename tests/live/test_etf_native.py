"""The Rust fast path of collector/etf.py (refalloc/src/python_etf.rs) builds exactly what the
Python decoder builds, and declines, never differs, on anything else: each input below is decoded
by both, and the two results must be equal with the same Python type at every position."""

from __future__ import annotations

import base64
import random
import struct
import subprocess

import pytest

from beamalloc.collector import build, etf
from beamalloc.collector.terms import Atom, Opaque, format_term

pytestmark = pytest.mark.skipif(etf._native is None, reason="the Rust extension is not built")


def _shape(x: object) -> object:
    """The value with its exact type at every position (Atom("a") == "a" is not enough)."""
    if isinstance(x, tuple | list):
        return (type(x), [_shape(y) for y in x])
    if isinstance(x, dict):
        return (dict, sorted((repr(_shape(k)), repr(_shape(v))) for k, v in x.items()))
    return (type(x), x)


def _python(data: bytes, pos: int) -> tuple[object, int]:
    return etf._Decoder(data).term(pos, 0)


def _both(data: bytes) -> None:
    """Native and Python on the same bytes: equal, or the native one declined."""
    try:
        py = _python(data, 1)
    except (etf.ETFError, IndexError, ValueError, struct.error):
        py = None
    try:
        nat = etf._native(data, 1, Atom, Opaque)
    except ValueError:
        return  # declined: etf.decode then uses the Python decoder, the reference
    assert py is not None, f"native accepted what Python refuses: {data.hex()}"
    assert nat[1] == py[1]
    assert _shape(nat[0]) == _shape(py[0])


@pytest.fixture(scope="module")
def real() -> list[bytes]:
    """term_to_binary, uncompressed, of what beamalloc reads from a node, and of every kind of
    term the native decoder handles or declines, from a real VM."""
    exprs = [
        "erlang:memory()",
        "[erlang:system_info({allocator, A}) || A <- [sys_alloc, mseg_alloc, erts_mmap, "
        "alloc_util | erlang:system_info(alloc_util_allocators)]]",
        "instrument:carriers()",
        "[1 bsl 64 - 1, -(1 bsl 70), 1 bsl 200, -5, 256, -(1 bsl 31), 2.5, -0.0, 'Quoted atom', "
        "'\\x{1F600}', \"é\\n\", \"\", [1000], [1,2,3], <<1,2>>, <<>>, <<1:3>>, {}, "
        "#{a => 1, \"k\" => [x]}, self(), make_ref(), fun lists:map/2, fun() -> ok end, "
        "hd(erlang:ports())]",
        "[{N, erlang:process_info(P, [memory, current_function, initial_call, status])} "
        "|| {N, P} <- lists:zip(lists:seq(1, length(processes())), processes())]",
    ]
    code = ("[io:format(\"~s~n\", [base64:encode(term_to_binary(E))]) || E <- [" +
            ", ".join(exprs) + "]], halt().")
    out = subprocess.run(["erl", "-noshell", "+S", "8", "-eval", code], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [base64.b64decode(line) for line in out.split()]


def test_real_terms_decode_alike(real: list[bytes]) -> None:
    for i, data in enumerate(real):
        if i == 3:  # funs, ports, an improper list: see the next test
            continue
        nat, end = etf._native(data, 1, Atom, Opaque)
        assert end == len(data)
        assert _shape(nat) == _shape(_python(data, 1)[0])


def test_declines_what_it_does_not_build(real: list[bytes]) -> None:
    """Funs and ports are declined, and etf.decode still answers them (through the Python
    decoder) exactly as before; an improper list is declined, and refused by both."""
    mixed = real[3]
    with pytest.raises(ValueError, match="decline"):
        etf._native(mixed, 1, Atom, Opaque)
    t = etf.decode(mixed)
    assert isinstance(t[19], Opaque) and t[19].startswith("<0.")  # a pid, native or not
    assert format_term(t[0]) == str(2**64 - 1)
    improper = bytes([131, 108, 0, 0, 0, 1, 97, 1, 97, 2])
    with pytest.raises(ValueError, match="decline"):
        etf._native(improper, 1, Atom, Opaque)
    with pytest.raises(etf.ETFError, match="improper"):
        etf.decode(improper)


def test_corrupted_inputs_never_differ(real: list[bytes]) -> None:
    rng = random.Random(13)
    base = real[1][:4000] + b""  # a prefix: truncated, so it ends mid-term
    inputs = [base, real[0]]
    for _ in range(3000):
        src = rng.choice(real[:3])
        i = rng.randrange(1, min(len(src), 3000))
        b = bytearray(src[: rng.randrange(i, min(len(src), i + 2000)) + 1])
        b[i] = rng.choice((0, 1, 97, 98, 100, 104, 106, 107, 108, 109, 110, 118, 119, 255,
                           rng.randrange(256)))
        inputs.append(bytes(b))
    for data in inputs:
        _both(data)


def test_raw_text_is_format_term(real: list[bytes]) -> None:
    """build.raw_text (native) writes exactly what terms.format_term writes."""
    for data in (real[0], real[1], real[4]):
        t = etf.decode(data)
        assert build.raw_text(t) == format_term(t)
    odd = [True, False, None, 1 << 70, -3, 2.5, b"\x01", Atom("A b"), "é\n", "",
           Opaque("<0.1.2>"), (Atom("a"), [Atom("a"), "a"])]
    assert build.raw_text(odd) == format_term(odd)
