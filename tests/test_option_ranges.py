"""Every numeric option of every command is range-checked where options are parsed: NaN,
infinities, 1e308, negative and absurd values are exit 2 and one line naming the option, before
anything sleeps on them, divides by them or allocates by them (docs/robustness.md, "Ranges").

Issue 16: `replay --sample-ms nan|inf|-1|1e30` and `--timeout nan|1e308` were tracebacks,
`--timeout -1` exit 3, `replay --schedulers 1000000000` grew by 14 MB/s and never ended.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import signal

import pytest
from support import DATA

from beamalloc.cli import main
from beamalloc.units import OPTIONS

SRC = str(DATA / "hand_recon.txt")
NODE = "nobody@localhost"  # never reached: the option is refused first
BAD = ["nan", "inf", "-inf", "-1", "1e30", "1e308", "1" + "0" * 400, "abc", ""]

#: (command line without the option, option, values that must be refused besides BAD)
CASES = [
    (["analyze", NODE], "--timeout", ["0"]),
    (["snapshot", NODE], "--timeout", ["0", "3601"]),
    (["analyze", NODE], "--max-carriers", []),
    (["analyze", SRC], "--top", ["0"]),
    (["recommend", NODE], "--rate-seconds", ["3601"]),
    (["recommend", NODE], "--trace-for", ["0", "601"]),
    (["replay", "x.batr"], "--sample-ms", ["0", "1e-9"]),
    (["replay", "x.batr"], "--schedulers", ["0", "1025", "1000000000"]),
    (["watch", NODE], "--interval", ["0"]),
    (["watch", NODE], "--retain", ["0"]),
    (["watch", NODE], "--duration", ["0"]),
    (["watch", NODE], "--carriers-every", []),
    (["trace", "--node", NODE], "--duration", ["0"]),
    (["trace", "--node", NODE], "--sample", ["0", "1.5"]),
    (["trace", "--node", NODE], "--slice-ms", ["0"]),
    (["trace", "--node", NODE], "--max-overhead", ["0", "101"]),
    (["trace", "--node", NODE], "--timeout", ["0"]),
]


def _run(argv: list[str]) -> tuple[object, str]:
    err = io.StringIO()
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.alarm(20)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code: object = main(argv)
            except KeyboardInterrupt:
                code = "hang"
            except SystemExit as e:
                code = e.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, err.getvalue()


@pytest.mark.parametrize("base, option, extra", CASES, ids=[f"{c[0][0]} {c[1]}" for c in CASES])
def test_out_of_range_option_is_one_line_exit_2(base, option, extra) -> None:
    for value in BAD + extra:
        code, err = _run([*base, f"{option}={value}"])
        assert code == 2, (option, value, code, err[-500:])
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("beamalloc: ") and option in lines[0], \
            (option, value, err)


def test_every_range_refuses_non_finite_and_accepts_its_bounds() -> None:
    for option, t in OPTIONS.items():
        for bad in BAD:
            with pytest.raises(argparse.ArgumentTypeError):
                t(bad)
        assert t(str(t.hi)) == t.hi, option
        if not t.open_lo:
            assert t(str(t.lo)) == t.lo, option


def test_replay_schedulers_are_bounded_at_the_core() -> None:
    """Whoever calls the replay (the CLI, the recommender, a test): 1..1024 schedulers."""
    from beamalloc.flags import FlagError, replay_config

    assert replay_config("", 1024)["schedulers"] == 1024
    for n in (0, 1025, 1_000_000_000):
        with pytest.raises(FlagError):
            replay_config("", n)
