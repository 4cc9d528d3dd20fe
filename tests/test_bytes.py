"""`--bytes` (issue 26 item 2, "MiB with the bytes on request"): analyze, recommend and report
print a size's exact bytes beside its human figure; the answer's first lines stay as they are.

The commands run as users run them (tests/support.py run_cli) on the real crash dumps in
../shared (skipped where that copy is absent) and the repository's OTP 25 dump, at 80 and 100
columns: every exact figure agrees with the human one beside it (units.human of those bytes),
the figures the JSON holds are there to the byte, nothing is wider than the terminal, and
without the option no exact figure is printed.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from test_terminal_short import KINDS, UINT_MAX_TEXT, _check, _cli, _dump

from beamalloc.units import EXACT_SUFFIX, exact_bytes, human

ROOT = Path(__file__).resolve().parent.parent
OTP25_DUMP = ROOT / "samples" / "otp25" / "erl_crash.dump"
#: A size with its bytes inline, "8.1 GiB (8,682,930,176 B)"; or a table cell's second line.
INLINE = re.compile(r"(-?\d+\.\d (?:KiB|MiB|GiB|TiB)) \((-?\d[\d,]*) B\)")
STACKED = re.compile(r"(?<![\w.])(-?\d{1,3}(?:,\d{3})+|\d{4,}) B\b")


def test_human_gives_the_bytes_inside_the_block_only() -> None:
    assert human(162_738_176) == "155.2 MiB"
    with exact_bytes():
        assert human(162_738_176) == "155.2 MiB (162,738,176 B)"
        assert human(-2048) == "-2.0 KiB (-2,048 B)"
        assert human(1023) == "1023 B"  # exact already
        assert human(None) == "-"
        with exact_bytes(False):  # a stage's own sentence inside the rendering
            assert human(162_738_176) == "155.2 MiB"
        assert EXACT_SUFFIX.search(human(1 << 40)).group(1) == "1,099,511,627,776"
    assert human(1 << 40) == "1.0 TiB"


def _pairs_agree(text: str) -> int:
    """Every inline pair: the human figure is human() of its bytes. Returns their count."""
    pairs = INLINE.findall(text)
    for h, b in pairs:
        assert human(int(b.replace(",", ""))) == h, (h, b)
    return len(pairs)


def _sources() -> list[str]:
    return [str(OTP25_DUMP), str(_dump(KINDS["out of memory"]))]


@pytest.mark.parametrize("cols", (80, 100))
def test_recommend_and_analyze_print_the_bytes_beside_the_sizes(cols: int) -> None:
    for source in _sources():
        a = json.loads(_cli("analyze", source, "--json", cols=cols))
        r = json.loads(_cli("recommend", source, "--json", cols=cols))
        for cmd, doc in (("analyze", a), ("recommend", r)):
            plain = _cli(cmd, source, cols=cols)
            exact = _cli(cmd, source, "--bytes", cols=cols)
            # the answer is as said: the same first lines, whole, within 100 characters
            lines = plain.splitlines()
            k = next(i for i, ln in enumerate(lines) if ln.startswith(a["node"] + "  "))
            assert k > 0 and exact.splitlines()[:k + 1] == lines[:k + 1]
            _check(exact, doc, r["verdict"], cols, short=False)
            assert not INLINE.search(plain) and not EXACT_SUFFIX.search(plain), cmd
            shown = _pairs_agree(exact) + len(STACKED.findall(exact))
            assert shown >= 3, (cmd, exact)
            assert UINT_MAX_TEXT not in exact
        # the figures the analysis holds, to the byte
        t = a["totals"]
        text = _cli("analyze", source, "--bytes", cols=cols)
        for k in ("allocated", "used", "unused"):
            if t[k] >= 1024:
                assert f"{t[k]:,} B" in text, (k, t[k])
        top = a["allocator_types"][0]
        assert f"{top['allocated']:,} B" in text


def test_details_tables_keep_each_number_whole() -> None:
    """With --details every table too: a size's bytes on the line under it (one column as
    wide as the longer of the two), never cut, at 80 columns."""
    text = _cli("analyze", str(OTP25_DUMP), "--details", "--bytes", cols=80)
    assert "Per instance" in text and _pairs_agree(text) > 0
    assert all(len(ln) <= 80 for ln in text.splitlines() if not ln.lstrip().startswith("<"))
    for ln in text.splitlines():  # a stacked figure is whole: digits in threes, then " B"
        for m in re.finditer(r"(\d[\d,]*) B\b", ln):
            assert re.fullmatch(r"\d{1,3}(,\d{3})*|\d{1,4}", m.group(1)), ln


def test_report_gives_the_bytes_on_request(tmp_path: Path) -> None:
    source = str(OTP25_DUMP)
    a = json.loads(_cli("analyze", source, "--json", cols=100))
    for flag, out in (([], tmp_path / "plain.html"), (["--bytes"], tmp_path / "bytes.html")):
        _cli("report", source, "-o", str(out), *flag, cols=100)
    plain = html.unescape((tmp_path / "plain.html").read_text())
    exact = html.unescape((tmp_path / "bytes.html").read_text())
    want = f"{human(a['totals']['allocated'])} ({a['totals']['allocated']:,} B)"
    assert want in exact and want not in plain
    assert _pairs_agree(exact) > 5 and not INLINE.search(plain)
    # the verdict's line says the same either way (the recommender speaks human)
    head = re.compile(r'<p class="headline">([^<]*)</p>')
    assert head.findall(exact) == head.findall(plain) and head.findall(plain)
    assert all(len(h) <= 100 for h in head.findall(exact))
