"""The report says what the terminal says, first (issue 26 item 1), and no page shows a rule's
code without its words (issue 26 item 2), in a real browser: `beamalloc report` and `beamalloc
recommend` run as a user runs them, on the same input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import run_cli

from .pages import BARE_RULES, FIRST_LINE, PAGES, Ctx, Page, visit

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: A snapshot without a death, a crash dump of the repository, an out-of-memory dump of shared/.
SOURCES = {
    "snapshot": ROOT / "samples/workloads/snapshots/heapchurn.json",
    "crash dump": ROOT / "samples/otp25/erl_crash.dump",
    "out of memory": ROOT.parent / "shared/samples/real-dumps"
    / "Vintinthethird__erlang_benchmarking__ebin_erl_crash.dump.dump",
}


def _first_line(*args: str) -> str:
    # 100 columns: the width the pages give the first line (wording.HEADLINE_MAX)
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    r = run_cli(*args, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return next(ln.strip() for ln in r.stdout.splitlines() if ln.strip())


@pytest.mark.parametrize("kind", list(SOURCES))
def test_report_opens_with_recommends_first_line(browser, tmp_path: Path, kind: str) -> None:
    source = SOURCES[kind]
    if not source.is_file():
        pytest.skip(f"{source} is absent (the CI clone has shared/ beside the repository)")
    out = tmp_path / "report.html"
    run = run_cli("report", str(source), "-o", str(out), timeout=300)
    assert run.returncode == 0, run.stderr
    visit(browser, out.as_uri())
    first = browser.execute_script(FIRST_LINE)
    assert first == _first_line("recommend", str(source)), first
    assert len(first) <= 100
    # the death's line comes before the verdict's where the source is a dump
    heads = browser.execute_script(
        "return [...document.querySelectorAll('section.snapshot .headline')]"
        ".map(e => e.textContent.trim())")
    assert (len(heads) == 2) == (kind != "snapshot"), heads
    # why lines in normal weight, at most three under the verdict
    weights = browser.execute_script(
        "return [...document.querySelectorAll('.verdict li, .death p.why')]"
        ".map(e => +getComputedStyle(e).fontWeight)")
    assert all(w < 600 for w in weights), weights
    assert browser.execute_script("return document.querySelectorAll('.verdict li').length") <= 3


@pytest.fixture(scope="module")
def ctx(server, store_path, tmp_path_factory) -> Ctx:
    return Ctx(server, store_path, tmp_path_factory.mktemp("words"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_bare_rule_code(browser, ctx: Ctx, page: Page) -> None:
    if page.name == "docs":
        pytest.skip("the rules' own documentation: each code heads its rule's words")
    visit(browser, page.address(ctx), charts=page.charts)
    bare = browser.execute_script(BARE_RULES)
    assert not bare, f"{page.name}: a rule's code without its words: {bare}"
    codes = browser.execute_script("return document.querySelectorAll('small.rule').length")
    if page.name in ("snapshot-advice", "whatif"):  # pages with findings: the check saw codes
        assert codes > 0, f"{page.name}: no rule code shown at all"
