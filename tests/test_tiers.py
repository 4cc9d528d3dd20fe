"""The tier guard of tests/conftest.py (docs/architecture.md "Test tiers"), run on a session of
its own: every way an unmarked test could start a BEAM or a browser fails that test, naming the
mark; a marked test gets the real programs, and a test that starts neither passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path(__file__).resolve().parent

INNER = '''
import os, shutil, subprocess, sys
import pytest

HALT = ["-noshell", "-eval", "halt()."]

def test_on_path():
    subprocess.run(["erl", *HALT])

def test_by_absolute_path():
    subprocess.run(["/usr/bin/erl", *HALT])

def test_in_a_chroot():  # as tests/otp.py runs OTP 27 and 29
    subprocess.run(["chroot", "/var/cache/beamalloc/otp27", "erl", *HALT])

def test_in_a_shell():
    subprocess.run("true; erlc -help", shell=True)

def test_grandchild_with_an_environment_of_its_own():
    code = "import subprocess; subprocess.run(['epmd', '-names'])"
    subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"})

def test_a_browser():
    subprocess.run(["chromedriver", "--version"])

@pytest.fixture(scope="module")
def node():
    subprocess.run(["erl", *HALT])

def test_module_fixture(node):
    pass

@pytest.mark.live
def test_marked_live(tmp_path_factory):  # its erl is not a stand-in of this session
    assert not shutil.which("erl").startswith(str(tmp_path_factory.getbasetemp()))
    assert shutil.which("chromedriver").startswith(str(tmp_path_factory.getbasetemp()))

def test_neither():
    assert subprocess.run(["true"]).returncode == 0
'''


def test_the_guard_fails_every_way_an_unmarked_test_starts_a_beam(tmp_path: Path) -> None:
    for name in ("conftest.py", "otp.py", "support.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    live: BEAM\n    slow: browser\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    xml = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={xml}", "test_inner.py"], cwd=tmp_path, capture_output=True,
                   timeout=900)  # a bound for a hung session, not a time asserted
    outcome: dict[str, str] = {}
    for case in ET.parse(xml).iter("testcase"):
        bad = [c for c in case if c.tag in ("failure", "error")]
        outcome[case.get("name", "")] = " ".join(
            (c.get("message") or "") + (c.text or "") for c in bad) or "passed"
    assert outcome.pop("test_marked_live") == "passed"
    assert outcome.pop("test_neither") == "passed"
    assert outcome.pop("test_a_browser").count("mark it slow") >= 1
    assert len(outcome) == 6, outcome
    for name, text in outcome.items():
        assert "live" in text and ("mark it live" in text or "not marked live" in text), name
