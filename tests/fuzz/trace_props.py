"""The property the trace fuzzers check on the trace reader's Python entry (beamalloc/trace.py
over refalloc's reader), for atheris (atheris_trace.py) and for `make test`
(tests/test_trace_corpus.py, over every input a fuzzer ever kept).

Any bytes, read as a binary or CSV trace: the reader either yields events or raises TraceError
(one line for the CLI), nothing else; and whatever it accepts, TraceWriter and write_csv write
and the reader reads back as the same events (what `beamalloc replay` does to a CSV trace).
"""

from __future__ import annotations

import io
import itertools
import os
import tempfile

from beamalloc.trace import (
    Event,
    TraceError,
    TraceHeader,
    TraceWriter,
    open_trace_stream,
    write_csv,
)

MAX_EVENTS = 20_000  # more than any input libFuzzer makes (-max_len 4096) can hold
CSV_PATH = os.path.join(tempfile.gettempdir(), f"beamalloc-fuzz-{os.getpid()}.csv")


def read(data: bytes) -> tuple[TraceHeader, list[Event]] | None:
    """The header and events of `data`, or None if the reader refuses it with TraceError."""
    try:
        with open_trace_stream(io.BufferedReader(io.BytesIO(data)), "fz") as r:
            return r.header, list(itertools.islice(r, MAX_EVENTS))
    except TraceError:
        return None


def check(data: bytes) -> bool:
    """Assert the property on `data`; True if the reader accepted it."""
    got = read(data)
    if got is None:
        return False
    header, events = got
    binary = io.BytesIO()
    w = TraceWriter(binary, header)
    for ev in events:
        w.write(ev)
    w.close()
    back = read(binary.getvalue())
    assert back is not None and back[1] == events, "binary round trip"
    write_csv(CSV_PATH, header, events)
    with open(CSV_PATH, "rb") as f:
        back = read(f.read())
    assert back is not None and back[1] == events, "CSV round trip"
    return True
