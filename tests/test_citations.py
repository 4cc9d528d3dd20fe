"""Citations link to the shipped docs (issue 15, item 5): beamalloc/citations.py.

The installed wheel gets the same check (tests/test_wheel.py runs tests/citation_check.py with
the installed interpreter).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from citation_check import problems, rule_sources

from beamalloc import citations
from beamalloc.advice.lint import lint_flags

ROOT = Path(__file__).resolve().parent.parent


def test_every_printed_citation_resolves_in_the_docs() -> None:
    bad, checked = problems()
    assert not bad, "\n".join(bad)
    assert checked >= 25  # the rules, the lint, the remedies and the help texts all counted


def test_every_rule_remedy_and_finding_cites_our_docs_first() -> None:
    homes = rule_sources()
    assert len(homes) >= 12
    for source, where in homes.items():
        assert source.startswith("docs/"), (where, source)
        assert citations.link(source), (where, source)


@pytest.mark.parametrize(
    ("citation", "doc", "anchor"),
    [
        ("docs/erts/tuning.md §1 R8, §0.2 item 5", "docs/erts/tuning.md",
         "r8-lint-lmbcs-against-sbct"),
        ("docs/erts/tuning.md §1 R1", "docs/erts/tuning.md", "r1-memory-outside-erts_alloc"),
        ("docs/erts/tuning.md §0.2 item 1", "docs/erts/tuning.md",
         "02-flag-interactions-the-recommender-must-lint"),
        ("docs/erts/alloc_util.md §2.1, §2.2", "docs/erts/alloc_util.md",
         "21-per-allocator-parameters"),
        ('docs/processes.md "Facts"', "docs/processes.md", "facts"),
        ("docs/erts/carrier-migration.md", "docs/erts/carrier-migration.md", None),
    ],
)
def test_a_link_is_the_file_and_the_heading_anchor(citation: str, doc: str,
                                                   anchor: str | None) -> None:
    uri = citations.link(citation)
    assert uri is not None and uri.startswith("file:///")
    parts = urlsplit(uri)
    assert Path(unquote(parts.path)) == citations.DOCS_DIR / doc.removeprefix("docs/")
    assert parts.fragment == (anchor or "")
    assert citations.with_link(citation) == f"{citation} <{uri}>"
    assert citations.doc_ref(citation) == doc.removeprefix("docs/") + (f"#{anchor}" if anchor
                                                                       else "")


def test_a_citation_of_no_doc_of_ours_is_left_as_is() -> None:
    missing = "docs/erts/nothing-here" + ".md"  # a document we do not ship
    for text in ("erlang/otp#9521", "Erlang in Anger §7.2", missing):
        assert citations.link(text) is None and citations.doc_ref(text) is None
        assert citations.with_link(text) == text


def test_a_section_the_document_lacks_has_no_anchor() -> None:
    """What the check above catches: a cited section with no heading of that number."""
    tuning = citations.targets("docs/erts/tuning.md")[0]
    alloc_util = citations.targets("docs/erts/alloc_util.md")[0]
    for doc, section in ((tuning, "R99"), (alloc_util, "3.99"), (tuning, "0.9")):
        assert citations.anchor(replace(doc, section=section)) is None
    assert citations.anchor(replace(tuning, section="0.4")) == (
        "04-what-releases-memory-when-no-flag-helps")


def test_lint_issues_link_to_their_rule() -> None:
    """Every check the lint makes, triggered by one flag string, cites a section that links."""
    issues = lint_flags("+MBas bf +MBacul 50 +MBlmbcs 1024 +MBsbct 1024 +MBrsbcst 150 "
                        "+MMmcs 99 +MEacul 50 +MEas gf +MBxyz 3")
    checks = {i.check for i in issues}
    assert {"lmbcs-sbct", "migration-off", "order", "range", "invalid"} <= checks, checks
    for i in issues:
        uri = citations.link(i.rule)
        assert uri and "#" in uri, (i.check, i.rule)
        assert Path(unquote(urlsplit(uri).path)).is_file()


def test_checkout_reads_the_repository_docs() -> None:
    """In a checkout (or an editable install) the docs are the repository's, not a copy."""
    assert citations.DOCS_DIR.resolve() == (ROOT / "docs").resolve()
