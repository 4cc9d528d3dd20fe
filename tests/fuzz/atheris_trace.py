"""Fuzzing of the trace reader's Python entry (beamalloc/trace.py over refalloc's reader,
refalloc/src/trace.rs and csv.rs) with atheris; the property is trace_props.check (read or
TraceError; what reads round-trips in both formats). atheris sees the Python side's coverage
only: the Rust reader's guided fuzzers are refalloc/fuzz's read_trace and read_csv.

    make fuzz FUZZ_SECS=3600      # with refalloc's cargo-fuzz targets (refalloc/fuzz/README.md)
    .venv/bin/python tests/fuzz/atheris_trace.py -max_total_time=3600 CORPUS_DIR SEED_DIR...

Not collected by pytest (atheris is not a test dependency); what it finds goes to
tests/data/bad_traces/, which tests/test_trace_corpus.py checks on every `make test`.
"""

from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    import trace_props

    import beamalloc.trace  # noqa: F401 - instrumented for coverage


def main() -> None:
    atheris.Setup(sys.argv, trace_props.check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
