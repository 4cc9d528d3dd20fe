"""Coverage-guided fuzzing of the input readers with atheris: the Erlang term text parser
(collector/terms.py), the external term format decoder (collector/etf.py), recon files
(collector/recon.py, collector/system_info.py) and crash dumps (collector/crashdump.py). The
properties are reader_props.py's.

    make fuzz FUZZ_SECS=3600      # all fuzzers at once (refalloc/fuzz/README.md)
    .venv/bin/python tests/fuzz/atheris_readers.py READER -max_total_time=3600 CORPUS SEEDS...

READER is terms, etf, recon or crashdump. Seeds come from tests/fuzz/reader_seeds.py. Not
collected by pytest (atheris is not a test dependency); what a run finds goes to
tests/corpus/fuzz/READER/, which tests/test_corpus.py checks on every `make test`.
"""

from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    import reader_props

    import beamalloc.analyzer.metrics
    import beamalloc.collector.crashdump
    import beamalloc.collector.etf
    import beamalloc.collector.recon
    import beamalloc.collector.system_info
    import beamalloc.collector.terms
    import beamalloc.snapshot  # noqa: F401


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in reader_props.READERS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(reader_props.READERS)}}} [libFuzzer args]")
    check = reader_props.CHECKS[sys.argv.pop(1)]
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
