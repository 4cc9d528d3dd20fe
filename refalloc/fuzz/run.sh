#!/usr/bin/env bash
# Fuzz refalloc's trace reader and replay for FUZZ_SECS seconds each, both at once, each on one
# core (README.md here). Exit 1 if either finds a crash: the input is left in artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECS:-600}
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
python=${PYTHON:-../.venv/bin/python}
"$python" fuzz/seeds.py fuzz/seeds
cargo +nightly fuzz build -O -a
pids=()
for t in read_trace replay_trace; do
  mkdir -p "fuzz/corpus/$t" "fuzz/logs"
  # -O -a: optimised, with overflow checks and debug assertions; seeds and regressions are read,
  # new inputs go to corpus/.
  cargo +nightly fuzz run -O -a "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" "fuzz/regressions/$t" -- \
    -max_total_time="$secs" -print_final_stats=1 >"fuzz/logs/$t.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in 0 1; do
  t=$([ $i = 0 ] && echo read_trace || echo replay_trace)
  if wait "${pids[$i]}"; then
    echo "$t: $(grep -E '^Done [0-9]+ runs' "fuzz/logs/$t.log"), no crash (log: fuzz/logs/$t.log)"
  else
    echo "$t: FAILED, see fuzz/logs/$t.log and fuzz/artifacts/$t/"; rc=1
  fi
done
exit $rc
