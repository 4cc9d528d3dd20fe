"""The shipped Prometheus rules (deploy/prometheus/) pass promtool and follow the rule base."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from beamalloc.advice import rules

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DEPLOY / "beamalloc-rules.yml"
PROMTOOL = shutil.which("promtool")

needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is installed by make setup")


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    out = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    out = subprocess.run([PROMTOOL, "test", "rules", "beamalloc-rules.test.yml"], cwd=DEPLOY,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_alerts_name_rules_that_exist() -> None:
    """An alert on beamalloc_finding{rule=...} must name rules the rule base can raise."""
    known = {rule_id for rule_id, _ in rules.RULES}
    named = set()
    for m in re.finditer(r'rule=~?"([^"]+)"', RULES.read_text()):
        named |= set(m.group(1).split("|"))
    assert named, "no alert reads beamalloc_finding"
    assert named <= known, f"alerts name rules the rule base lacks: {sorted(named - known)}"


def test_cache_miss_alert_uses_the_rule_threshold() -> None:
    """R6's hit-rate threshold has its home in advice/rules.py; the alert must agree."""
    m = re.search(r"mseg_cache_hit_ratio:rate5m < ([0-9.]+)", RULES.read_text())
    assert m is not None
    assert float(m.group(1)) == rules.R6_HIT_RATE
