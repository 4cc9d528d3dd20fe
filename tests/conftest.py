"""Fixtures shared by every test, and the guard that keeps the test tiers honest; the helpers
themselves are in support.py.

Tiers (docs/architecture.md "Test tiers"): a test that starts a BEAM is marked `live`, one that
drives a browser or takes more than a few seconds `slow`; `make test-fast` runs the rest. Two
checks make a missing mark fail instead of silently slowing the fast tier:
- at collection, a test that uses a fixture which starts a BEAM or a browser must carry the mark;
- while a test runs, `erl`, `erlc`, `epmd` and the browser found on PATH are stand-ins unless the
  test carries the mark: a stand-in that is started fails the test, naming the mark it lacks
  (the other releases' runtimes, tests/otp.py, are reached through the `otp_release` fixture).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from otp import otp_release  # noqa: F401  (the fixture: each test release, tests/otp.py)
from support import run_cli

#: Programs whose start puts a test in a tier, by mark.
TIER_PROGRAMS = {
    "live": ("erl", "erlc", "epmd", "escript", "run_erl"),
    "slow": ("chromium", "chromedriver"),
}
#: Fixtures that start a BEAM or a browser, by the mark a test using them needs.
TIER_FIXTURES = {
    "live": ("node_factory", "target", "any_target", "probe", "hidden", "churn", "ebin",
             "otp_release"),
    "slow": ("browser",),
}


@pytest.fixture
def cli():
    return run_cli


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [
        f"{item.nodeid} uses {name} but is not marked {mark}"
        for item in items
        for mark, names in TIER_FIXTURES.items()
        for name in names
        if name in getattr(item, "fixturenames", ()) and item.get_closest_marker(mark) is None
    ]
    if unmarked:
        raise pytest.UsageError("test tiers: " + "; ".join(unmarked))


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    missing = [m for m in TIER_PROGRAMS if request.node.get_closest_marker(m) is None]
    if not missing:
        yield
        return
    shims = tmp_path_factory.mktemp("tier")
    log = shims / "started.log"
    for mark in missing:
        for prog in TIER_PROGRAMS[mark]:
            shim = shims / prog
            shim.write_text(f'#!/bin/sh\necho "{prog} (mark it {mark})" >> "{log}"\nexit 127\n')
            shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ.get('PATH', '')}")
    yield
    if Path(log).exists():
        started = sorted(set(Path(log).read_text().splitlines()))
        pytest.fail(f"started {', '.join(started)}: not in the fast tier", pytrace=False)
