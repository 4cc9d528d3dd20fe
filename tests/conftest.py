"""Fixtures shared by every test, and the guard that keeps the test tiers honest; the helpers
themselves are in support.py.

Tiers (docs/architecture.md "Test tiers"): a test that starts a BEAM is marked `live`, one that
drives a browser or takes more than a few seconds `slow`; `make test-fast` runs the rest. Two
checks make a missing mark fail instead of silently slowing the fast tier:
- at collection, a test that uses a fixture which starts a BEAM or a browser must carry the mark;
- while a test runs without the mark, every way it could start one fails the test, naming the
  mark it lacks: the programs on PATH are stand-ins (for the test and every process it starts,
  also one given an environment of its own), and a process the test starts itself by an absolute
  path or through a wrapper (`chroot ROOT erl`, the other releases' runtimes of tests/otp.py;
  `setpriv ... erl`; `sh -c "... erl ..."`) is refused before it runs.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from otp import otp_release  # noqa: F401  (the fixture: each test release, tests/otp.py)
from support import run_cli

#: Programs whose start puts a test in a tier, by mark: the BEAM's own (erts' bin/ and the tools
#: that start an emulator), the applications' scripts that start one, the browsers.
TIER_PROGRAMS = {
    "live": ("erl", "erlc", "epmd", "escript", "run_erl", "erlexec", "beam", "beam.smp",
             "erl_call", "ct_run", "dialyzer", "typer", "elixir", "elixirc", "iex", "mix",
             "rabbitmq-server", "rabbitmqctl", "ejabberdctl"),
    "slow": ("chromium", "chromedriver", "chrome", "chromium-browser", "google-chrome"),
}
#: Programs that run the program named in their arguments (`chroot ROOT erl`, `sh -c "erl"`).
WRAPPERS = ("chroot", "setpriv", "env", "nice", "timeout", "sudo", "unshare", "nsenter",
            "taskset", "stdbuf", "systemd-run")
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


def _started(args: Any, shell: bool, programs: dict[str, str]) -> str | None:
    """The tier program a Popen of `args` would start, if any: its program, a wrapper's program
    (any word after the wrapper), or the program of any command of a shell's command line."""
    argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
    argv = [os.fsdecode(w) for w in argv]
    if shell:
        return _in_script(" ".join(argv), programs)
    if not argv:
        return None
    prog = os.path.basename(argv[0])
    if prog in ("sh", "bash", "dash") and "-c" in argv[1:-1]:
        return _in_script(argv[argv.index("-c") + 1], programs)
    words = [os.path.basename(w) for w in argv[1:]] if prog in WRAPPERS else []
    return next((w for w in [prog, *words] if w in programs), None)


def _in_script(script: str, programs: dict[str, str]) -> str | None:
    """The tier program a shell command line starts: each command's first word (after its
    variable assignments), or any word of a command a wrapper runs; comments skipped."""
    script = re.sub(r"(^|\s)#[^\n]*", " ", script)
    for cmd in re.split(r"[\n;&|()`]|\$\(", script):
        words = [w for w in cmd.split() if not re.match(r"^\w+=", w)]
        words = [os.path.basename(w.strip("'\"")) for w in words]
        if words and words[0] in (*WRAPPERS, "exec", "nohup", "command"):
            found = next((w for w in words[1:] if w in programs), None)
        else:
            found = words[0] if words and words[0] in programs else None
        if found:
            return found
    return None


class _Tier:
    """The running test's tier: its stand-ins' folder and log while it lacks a mark."""

    programs: ClassVar[dict[str, str]] = {}
    shims: ClassVar[Path | None] = None
    refused: ClassVar[list[str]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # Set before the test's fixtures, so a module- or session-scoped fixture that starts a BEAM
    # for an unmarked test is refused too (the autouse guard below comes after them).
    _Tier.refused = []
    _Tier.programs = {prog: mark for mark, progs in TIER_PROGRAMS.items()
                      if item.get_closest_marker(mark) is None for prog in progs}
    try:
        yield
    finally:
        _Tier.programs, _Tier.shims = {}, None


def pytest_configure(config: pytest.Config) -> None:
    popen_init = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[Any], args: Any, *a: Any, **kw: Any) -> None:
        prog = _started(args, bool(kw.get("shell")), _Tier.programs)
        if prog is not None:  # refused as a missing program is: the caller says so its own way
            mark = _Tier.programs[prog]
            _Tier.refused.append(f"{prog} (mark it {mark})")
            raise FileNotFoundError(errno.ENOENT, f"not started: the test is not marked {mark} "
                                    "(tests/conftest.py)", prog)
        env, shims = kw.get("env"), _Tier.shims
        if env is not None and shims is not None and all(isinstance(k, str) for k in env):
            path = env.get("PATH", os.defpath)  # its own environment, built before the test
            if str(shims) not in path and any(shutil.which(p, path=path) for p in _Tier.programs):
                kw["env"] = {**env, "PATH": f"{shims}{os.pathsep}{path}"}
        popen_init(self, args, *a, **kw)

    subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _tier_guard(tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if not _Tier.programs:
        yield
        return
    shims = tmp_path_factory.mktemp("tier")
    log = shims / "started.log"
    for prog, mark in _Tier.programs.items():
        shim = shims / prog
        shim.write_text(f'#!/bin/sh\necho "{prog} (mark it {mark})" >> "{log}"\nexit 127\n')
        shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ.get('PATH', '')}")
    _Tier.shims = shims
    yield
    started = set(_Tier.refused) | set(log.read_text().splitlines() if log.exists() else ())
    if started:
        pytest.fail(f"started {', '.join(sorted(started))}: not in the fast tier", pytrace=False)
