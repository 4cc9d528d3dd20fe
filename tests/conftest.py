"""Fixtures shared by every test; the helpers themselves are in support.py."""

from __future__ import annotations

import pytest
from otp import otp_release  # noqa: F401  (the fixture: each test release, tests/otp.py)
from support import run_cli


@pytest.fixture
def cli():
    return run_cli
