"""collector/crashdump.py reads an =allocator: section's statistics lines by their key (what
precedes the first ": "), each key classified once (_line_kind): the kind it gives is the one
the line regexes _BLOCKS, _CARRIERS and _CALLS give the whole line, tried in that order."""

from __future__ import annotations

import random

from beamalloc.collector import crashdump
from beamalloc.collector.crashdump import _BLOCKS, _CALLS, _CARRIERS, _line_kind


def _by_regex(line: str) -> tuple[str, ...] | None:
    if m := _BLOCKS.match(line):
        return ("blocks", m.group(1), m.group(2), m.group(3) if m.group(3) == " size" else None,
                m.group(4))
    if m := _CARRIERS.match(line):
        return ("carriers", m.group(1), m.group(2), m.group(3), m.group(4))
    if " calls: " in line and (m := _CALLS.match(line)):
        return ("calls", m.group(1), m.group(2))
    return None


def _by_key(line: str, kinds: crashdump.Kinds) -> tuple[str, ...] | None:
    key, sep, value = line.partition(": ")
    kind = _line_kind(key, kinds) if sep else None
    if kind is None:
        return None
    return (*kind[:4], value) if kind[0] != "calls" else (*kind, value)


def test_a_lines_kind_by_its_key_is_the_regexes() -> None:
    rnd = random.Random(284)
    kinds: crashdump.Kinds = {}
    pieces = ["mbcs", "sbcs", "mbcs_pool", " blocks", "[binary_alloc]", "[", "]", "_", " count",
              " size", ": ", ":", " ", " carriers", " mseg carriers", " sys_alloc carriers",
              " calls", "mseg_alloc", "x", "0 1 2", "\r", "\t", "é", "A"]
    seen = 0
    for _ in range(20_000):
        if rnd.random() < 0.5:  # a line the VM writes, a piece put in somewhere
            line = "".join([rnd.choice(["mbcs", "sbcs", "mbcs_pool", "mseg_alloc"]),
                            rnd.choice([" blocks", " carriers", " mseg carriers", " calls",
                                        " sys_alloc carriers"]),
                            rnd.choice(["", "[binary_alloc]", "[x_y]"]),
                            rnd.choice(["", " count", " size"]), ": ", "0 1 2"])
            at = rnd.randrange(len(line) + 1)
            line = line[:at] + rnd.choice(pieces) * rnd.randrange(2) + line[at:]
        else:
            line = "".join(rnd.choice(pieces) for _ in range(rnd.randrange(1, 9)))
        want = _by_regex(line)
        assert _by_key(line, kinds) == want, repr(line)
        seen += want is not None
    assert seen > 1000  # real keys often enough
    real = ["mbcs blocks[binary_alloc] count: 0 20 20", "mbcs_pool blocks[ets_alloc] size: 8",
            "sbcs sys_alloc carriers size: 0", "mbcs carriers: 1 2 3", "mseg_alloc calls: 5",
            "mbcs blocks: 1 2 3", "mbcs blocks size: 4 5 6"]
    assert all(_by_key(x, kinds) == _by_regex(x) is not None for x in real)


def test_the_keys_remembered_are_bounded() -> None:
    kinds: crashdump.Kinds = {}
    for i in range(crashdump.MAX_KINDS * 2 + 3):
        _line_kind("".join(chr(97 + int(d)) for d in str(i)) + " calls", kinds)  # a, b, ba
    assert 0 < len(kinds) <= crashdump.MAX_KINDS
    assert _line_kind("b calls", kinds) == ("calls", "b")
