"""The one decoder of the external term format (collector/native/src/etf.rs, through
collector/etf.py) on every kind of term a real VM writes: each becomes the Python object
collector/terms.py maps it to, and a corrupted input is a term or an ETFError, nothing else."""

from __future__ import annotations

import base64
import random
import subprocess

import pytest

from beamalloc.collector import etf
from beamalloc.collector.terms import Atom, Opaque, format_term

pytestmark = pytest.mark.live  # the fixture runs erl

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


def test_real_terms_decode_whole(real: list[bytes]) -> None:
    for data in real:
        _, end = etf.decode_at(data, 0, {})
        assert end == len(data)
        etf.decode(data)


def test_every_kind_of_term(real: list[bytes]) -> None:
    """Big integers, floats, atoms, strings, binaries, maps, pids, refs, funs and ports."""
    t = etf.decode(real[3])
    assert t[:8] == [2**64 - 1, -(2**70), 2**200, -5, 256, -(2**31), 2.5, -0.0]
    assert [type(x) for x in t[8:12]] == [Atom, Atom, str, list]
    assert t[8:12] == ["Quoted atom", "\U0001F600", "é\n", []]
    assert t[12:18] == [[1000], [1, 2, 3], b"\x01\x02", b"", b"\x20", ()]
    assert t[18] == {Atom("a"): 1, "k": [Atom("x")]}
    pid, ref, export, fun, port = t[19:24]
    assert all(type(x) is Opaque for x in t[19:24])
    assert pid.startswith("<0.") and ref.startswith("#Ref<0.") and port.startswith("#Port<0.")
    assert export == "#Fun<lists.map.2>" and fun.startswith("#Fun<erl_eval.")
    assert format_term(t[0]) == str(2**64 - 1)
    improper = bytes([131, 108, 0, 0, 0, 1, 97, 1, 97, 2])
    with pytest.raises(etf.ETFError, match="improper list"):
        etf.decode(improper)


def test_corrupted_inputs_are_a_term_or_an_etf_error(real: list[bytes]) -> None:
    rng = random.Random(13)
    inputs = [real[1][:4000], real[0]]
    for _ in range(3000):
        src = rng.choice(real[:4])
        i = rng.randrange(1, min(len(src), 3000))
        b = bytearray(src[: rng.randrange(i, min(len(src), i + 2000)) + 1])
        b[i] = rng.choice((0, 1, 97, 98, 100, 104, 106, 107, 108, 109, 110, 118, 119, 255,
                           rng.randrange(256)))
        inputs.append(bytes(b))
    refused = 0
    for data in inputs:
        try:
            etf.decode(data)
        except etf.ETFError as e:
            refused += 1
            assert "\n" not in str(e) and str(e)
    assert 0 < refused < len(inputs)
