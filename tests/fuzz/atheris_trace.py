"""Coverage-guided fuzzing of the Python trace reader (beamalloc/trace.py) with atheris.

Any bytes, read as a binary or CSV trace: the reader either yields events or raises TraceError
(one line for the CLI), nothing else; and whatever it accepts, TraceWriter writes and the reader
reads back as the same events, in both formats (what `beamalloc replay` does to a CSV trace).

    make fuzz FUZZ_SECS=3600      # with refalloc's cargo-fuzz targets (refalloc/fuzz/README.md)
    .venv/bin/python tests/fuzz/atheris_trace.py -max_total_time=3600 CORPUS_DIR SEED_DIR...

Not collected by pytest (atheris is not a test dependency); the corpus of bad inputs the
harness ever tripped on is tests/data/bad_traces/, which tests/test_trace.py reads.
"""

from __future__ import annotations

import io
import itertools
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from beamalloc.trace import Event, TraceError, TraceWriter, open_trace_stream, write_csv

MAX_EVENTS = 20_000  # enough for any input libFuzzer makes (-max_len 4096)
CSV_PATH = os.path.join(tempfile.gettempdir(), f"atheris-trace-{os.getpid()}.csv")


def _read(data: bytes) -> tuple[object, list[Event]] | None:
    try:
        with open_trace_stream(io.BufferedReader(io.BytesIO(data)), "fz") as r:
            events = list(itertools.islice(r, MAX_EVENTS))
            return r.header, events
    except TraceError:
        return None


def one_input(data: bytes) -> None:
    got = _read(data)
    if got is None:
        return
    header, events = got
    binary = io.BytesIO()
    w = TraceWriter(binary, header)  # type: ignore[arg-type]
    for ev in events:
        w.write(ev)
    w.close()
    back = _read(binary.getvalue())
    assert back is not None and back[1] == events, "binary round trip"
    write_csv(CSV_PATH, header, events)  # type: ignore[arg-type]
    with open(CSV_PATH, "rb") as f:
        back = _read(f.read())
    assert back is not None and back[1] == events, "CSV round trip"


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
