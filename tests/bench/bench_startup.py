"""Startup of the `beamalloc` command against the venv's `python -c pass` (issue 28 item 4: within
2x), and each subcommand's import cost.

In one run, alternating with the floor, RUNS times each: `beamalloc --version`, `beamalloc
--help`, and for each command of cli/commands/ a Python that imports cli/main.py and then the
modules its `run` imports in its body (read from the source with ast, so a new import shows up
here). CPU time (user + system) of each child, from the kernel's accounting; the median
counts. Prints each median against the floor's.

The venv's bytecode is what `make setup` compiles (the environment may forbid writing it at
import); a stale or missing one is said, since every module would then be compiled each run.

Usage: python tests/bench/bench_startup.py [RUNS]
"""

from __future__ import annotations

import ast
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMMANDS = ROOT / "cli" / "commands"


def cpu(cmd: list[str]) -> float:
    """User + system seconds of one run of `cmd` (stdout and stderr discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd="/")  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def command_imports() -> dict[str, list[str]]:
    """NAME -> the beamalloc modules the body of cli/commands/NAME.py's `run` imports (helpers
    it calls are left out: their imports come on top, where the command takes that path)."""
    out: dict[str, list[str]] = {}
    for path in sorted(COMMANDS.glob("*.py")):
        for fn in ast.parse(path.read_text()).body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "run":
                mods = sorted({n.module for n in ast.walk(fn) if isinstance(n, ast.ImportFrom)
                               and n.module and n.module.startswith("beamalloc")})  # fmt: skip
                out[path.stem] = mods
    return out


def stale_bytecode() -> list[str]:
    import importlib.util

    out = []
    # the folders the Makefile's bytecode target compiles (an installed wheel's are compiled
    # by pip: tests/test_wheel.py test_the_installed_modules_are_compiled)
    for folder in ("beamalloc", "cli", "cli/commands", "collector", "analyzer", "advice", "ebpf",
                   "webui", "refalloc", "timeseries", "reporters", "htmlreport"):
        for src in (ROOT / folder).glob("*.py"):
            pyc = Path(importlib.util.cache_from_source(str(src)))
            if not pyc.exists() or pyc.stat().st_mtime < src.stat().st_mtime:
                out.append(str(src.relative_to(ROOT)))
    return out


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    py, exe = str(BIN / "python"), str(BIN / "beamalloc")
    stale = stale_bytecode()
    if stale:
        print(f"note: {len(stale)} modules without current bytecode (run `make setup`), "
              f"e.g. {stale[0]}")  # fmt: skip
    cases: dict[str, list[str]] = {
        "beamalloc --version": [exe, "--version"],
        "beamalloc --help": [exe, "--help"],
    }
    for name, mods in command_imports().items():
        code = "import beamalloc.cli.main\n" + "".join(f"import {m}\n" for m in mods)
        cases[f"{name} (imports)"] = [py, "-c", code]
    floor = [py, "-c", "pass"]
    times: dict[str, list[float]] = {k: [] for k in cases}
    base: list[float] = []
    env_note = "PYTHONDONTWRITEBYTECODE set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""
    for _ in range(runs):
        for name, cmd in cases.items():
            base.append(cpu(floor))
            times[name].append(cpu(cmd))
    b = statistics.median(base)
    print(f"floor `python -c pass`: median {b * 1e3:.1f} ms CPU over {len(base)} runs"
          f"{'; ' + env_note if env_note else ''}")  # fmt: skip
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:28s} median {m * 1e3:6.1f} ms CPU   {m / b:5.2f}x the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
