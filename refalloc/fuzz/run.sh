#!/usr/bin/env bash
# Fuzz the trace readers, the replay and the input readers for FUZZ_SECS seconds, all nine
# fuzzers at once (README.md here): cargo-fuzz on refalloc's read_trace, read_csv and
# replay_trace, atheris on the trace reader's Python entry, on its CSV fast paths against its full
# path, and on the term-text, ETF, recon and crash-dump readers (tests/fuzz/atheris_readers.py). FUZZ_TARGETS picks some of them
# (default: all). Exit 1 if any finds a crash: its input is left in artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECS:-600}
python=${PYTHON:-$PWD/../.venv/bin/python}
targets=(${FUZZ_TARGETS:-read_trace read_csv replay_trace python_reader csv_fast terms etf recon crashdump})
readers=" terms etf recon crashdump "
if [[ " ${targets[*]} " =~ (read_trace|read_csv|replay_trace) ]]; then
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
  command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
  cargo +nightly fuzz build -O -a
fi
"$python" -c 'import atheris' 2>/dev/null || "$python" -m pip install -q atheris
"$python" fuzz/seeds.py fuzz/seeds
"$python" ../tests/fuzz/reader_seeds.py fuzz/seeds
pids=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t" "fuzz/regressions/$t" fuzz/logs
  if [[ $readers == *" $t "* ]]; then
    # What a reader fuzzer once found is kept in tests/corpus/fuzz/<reader>/ and read again.
    mkdir -p "../tests/corpus/fuzz/$t"
    "$python" ../tests/fuzz/atheris_readers.py "$t" -max_total_time="$secs" -max_len=16384 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
      "fuzz/corpus/$t" "fuzz/seeds/$t" "../tests/corpus/fuzz/$t" >"fuzz/logs/$t.log" 2>&1 &
  elif [ "$t" = csv_fast ]; then
    # The CSV reader's fast paths against its full path (tests/fuzz/csv_props.py).
    "$python" ../tests/fuzz/atheris_csv.py -max_total_time="$secs" -max_len=4096 \
      -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
      "fuzz/corpus/$t" "fuzz/seeds/$t" ../tests/data/bad_traces >"fuzz/logs/$t.log" 2>&1 &
  elif [ "$t" = python_reader ]; then
    # Bad traces the harness once tripped on are the Python side's regressions.
    "$python" ../tests/fuzz/atheris_trace.py -max_total_time="$secs" -max_len=4096 \
      -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
      "fuzz/corpus/$t" "fuzz/seeds/$t" ../tests/data/bad_traces >"fuzz/logs/$t.log" 2>&1 &
  else
    # -O -a: optimised, with overflow checks and debug assertions; new inputs go to corpus/.
    cargo +nightly fuzz run -O -a "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" "fuzz/regressions/$t" -- \
      -max_total_time="$secs" -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1 &
  fi
  pids+=($!)
done
rc=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  if wait "${pids[$i]}"; then
    echo "$t: $(grep -E '^Done [0-9]+ runs' "fuzz/logs/$t.log" | tail -1)," \
      "$(grep -E 'cov: [0-9]+' "fuzz/logs/$t.log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')," \
      "nothing found"
  else
    echo "$t: FAILED, see fuzz/logs/$t.log and fuzz/artifacts/$t/"
    rc=1
  fi
done
exit $rc
