"""Fuzzing of the CSV reader's fast paths against its full path (csv_props.check).

    make fuzz FUZZ_SECS=3600
    .venv/bin/python tests/fuzz/atheris_csv.py -max_total_time=3600 CORPUS_DIR SEED_DIR...

Not collected by pytest; inputs it finds go to tests/data/bad_traces/ (checked by `make test`).
Coverage comes from the Python side (atheris does not see into the extension: refalloc/fuzz's
read_csv is the guided one); the seeds are valid traces, so mutations stay near the rows the
fast paths read.
"""

from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    import csv_props

    import beamalloc.trace  # noqa: F401 - instrumented for coverage


def main() -> None:
    atheris.Setup(sys.argv, csv_props.check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
