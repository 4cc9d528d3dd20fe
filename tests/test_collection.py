"""`make test` runs every test file in the repository: pytest's own collection (run here as
`make test` runs it, with pyproject.toml's testpaths and norecursedirs) reaches each file named
like a test module, wherever it sits. A `norecursedirs` pattern without a "/" matches a directory
NAME at any depth; "refalloc" once dropped all of tests/refalloc/ this way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

# Not the repository's own files: the virtualenv, build output, Rust's target, git's metadata.
NOT_OURS = {".git", ".venv", "build", "target", "__pycache__"}


def files_named_like_tests() -> set[str]:
    """Every test_*.py and *_test.py (pytest's default python_files) under the repository."""
    found = set()
    for here, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in NOT_OURS and not d.endswith(".egg-info")]
        for f in files:
            if re.fullmatch(r"test_.*\.py|.*_test\.py", f):
                found.add(str(Path(here, f).relative_to(ROOT)))
    return found


@pytest.mark.slow
def test_every_test_file_is_collected() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ids = [ln for ln in r.stdout.splitlines() if "::" in ln]
    collected = {ln.split("::", 1)[0] for ln in ids}
    on_disk = files_named_like_tests()
    assert len(on_disk) >= 30 and "tests/refalloc/test_fidelity.py" in on_disk
    assert on_disk - collected == set(), "test files pytest does not collect"
    total = re.search(r"(\d+) tests? collected", r.stdout)
    assert total and int(total.group(1)) == len(ids), r.stdout[-500:]
    print(f"{len(ids)} items in {len(collected)} files")
