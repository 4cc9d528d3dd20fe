"""The properties the reader fuzzers check (atheris_readers.py), and `make test` checks on every
input kept in tests/corpus/fuzz/ (tests/test_corpus.py).

Any bytes, through each reader: a result, or the reader's one-line error (InputError, ETFError
for the ETF decoder), nothing else; and whatever reads is usable by every command:

* terms: what parses prints (format_term) and parses back to the same terms;
* etf: what decodes is made of the types terms.py maps Erlang terms to;
* recon, crashdump: the Snapshot passes Snapshot.check, round-trips through JSON, and recon's
  numbers (analyzer/metrics.py) compute on it without an exception.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable

from beamalloc.advice.holders import DumpMembers, processes_json
from beamalloc.analyzer import metrics
from beamalloc.collector import dumpscan, etf
from beamalloc.collector.crashdump import MAGIC, read_crashdump_file, read_crashdump_lines
from beamalloc.collector.procdump import (
    MAX_WORDS,
    PROC_INTS,
    VALUES,
    ProcSections,
    read_proc_lines,
)
from beamalloc.collector.processes import ProcessTable
from beamalloc.collector.recon import read_recon
from beamalloc.collector.sources import _decode
from beamalloc.collector.terms import Atom, Opaque, format_term, parse_terms
from beamalloc.errors import InputError
from beamalloc.snapshot import Snapshot

READERS = ("terms", "etf", "recon", "crashdump")


def _text(data: bytes) -> str:
    return _decode(data, "fz")  # what sources.read_file does: NUL refused, utf-8 else latin-1


def check_terms(data: bytes) -> bool:
    try:
        terms = parse_terms(_text(data), final_dot=False)
    except InputError:
        return False
    for t in terms:
        (back,) = parse_terms(format_term(t) + ".")
        assert back == t, "format_term does not parse back to the same term"
    return True


def _plain(t: object) -> None:
    stack = [t]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple | list):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        else:  # floats may be any IEEE double, NaN included: system_info refuses them as counts
            assert isinstance(x, Atom | Opaque | int | float | str | bytes), type(x)


def check_etf(data: bytes) -> bool:
    try:
        term = etf.decode(data)
    except etf.ETFError:
        return False
    _plain(term)
    return True


def _usable(snap: Snapshot) -> None:
    snap.check()
    back = Snapshot.from_json(snap.to_json())
    assert back.to_json() == snap.to_json(), "JSON round trip"
    for kw in ("current", "max"):
        for key in ("used", "allocated", "unused", "usage"):
            v = metrics.memory(snap, key, kw)  # type: ignore[arg-type]
            assert math.isfinite(v)
        metrics.fragmentation(snap, kw)  # type: ignore[arg-type]
        metrics.average_block_sizes(snap, kw)  # type: ignore[arg-type]
        metrics.sbcs_to_mbcs(snap, kw)  # type: ignore[arg-type]
    metrics.cache_hit_rates(snap)


def check_recon(data: bytes) -> bool:
    try:
        snap = read_recon(_text(data), node="fz", taken_at=None)
        snap.check()
    except InputError:
        return False
    _usable(snap)
    return True


def check_crashdump(data: bytes) -> bool:
    # Half the inputs get the header, so that mutations spend their time past it.
    if data[:1] != b"=" and len(data) % 2:
        data = MAGIC.encode() + b"0.5\n" + data
    try:
        snap = read_crashdump_lines(data.decode("latin-1").split("\n"), "fz")
        snap.check()
    except InputError:
        return False
    _usable(snap)
    _blocks_as_lines(data)
    return True


def _blocks_as_lines(data: bytes) -> None:
    """The block reader (collector/dumpscan.py, 61-byte blocks: headers straddle them) reads
    what the line reader reads from the same lines."""
    def read(how: Callable[[], Snapshot]) -> str:
        try:
            return how().to_json()
        except InputError as e:
            return str(e)

    procs = ProcSections()
    chunk, dumpscan.CHUNK = dumpscan.CHUNK, 61
    try:
        blocks = read(lambda: read_crashdump_file(io.BytesIO(data), "fz", procs=procs))
    finally:
        dumpscan.CHUNK = chunk
    text = [x.decode("latin-1") for x in io.BytesIO(data)]
    lines = read(lambda: read_crashdump_lines(text, "fz"))
    assert blocks == lines, "the block reader and the line reader differ"
    if blocks.startswith("{"):  # read: its =proc sections, fed in the same pass, are procdump's
        said, said_by_lines = io.StringIO(), io.StringIO()
        one = procs.table(said, lambda at: data.count(b"\n", 0, at) + 1)
        alone = read_proc_lines(text, said_by_lines)
        assert json.dumps(one, default=vars) == json.dumps(alone, default=vars), \
            "the one-pass process table differs from procdump's"
        assert said.getvalue() == said_by_lines.getvalue()
        _kept_as_all(data, one, blocks, said.getvalue())


def _kept_as_all(data: bytes, every: ProcessTable, snap: str, said: str) -> None:
    """The processes holders.DumpMembers keeps give the `processes` section all of them give,
    read natively (collector/native/src/procrecs.rs: the scan hands it the =proc and =ets
    sections) the same Snapshot `snap` and skipped sections `said`, and each =proc section's
    values read natively are the regex's (dumpscan.Keys)."""
    for body in data.split(b"\n=proc:")[1:]:
        text = body.decode("latin-1")
        assert VALUES.parsed(text, len(PROC_INTS), MAX_WORDS) == dumpscan.parse(
            VALUES.reference(text), len(PROC_INTS), MAX_WORDS), "native values differ"
    pids = [p.pid for p in every.procs]
    if len(set(pids)) < len(pids):  # a dump names a process once; the sums count each section
        return
    kept = ProcSections(keep=(sums := DumpMembers()))
    assert read_crashdump_file(io.BytesIO(data), "fz", procs=kept).to_json() == snap, \
        "the native sections' Snapshot differs"
    told = io.StringIO()
    table = kept.table(told, lambda at: data.count(b"\n", 0, at) + 1)
    assert told.getvalue() == said, "the native sections' skips differ"
    assert json.dumps(processes_json(table, sums=sums), default=str) == \
        json.dumps(processes_json(every), default=str), "the kept processes' section differs"


CHECKS = {
    "terms": check_terms,
    "etf": check_etf,
    "recon": check_recon,
    "crashdump": check_crashdump,
}
