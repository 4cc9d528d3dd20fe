"""Every citation in the repository can be followed inside the repository (issue 11, item 7).

A citation names a document by path (`docs/erts/alloc_util.md`), optionally a section
(`docs/erts/alloc_util.md §3.3`, `§2.1, §2.2`, `§1 R8`) or a named section
(`docs/design.md "Conventions"`, `§7, "Resolving"`). For each source and doc file this test
checks that the named document exists in the repository, that each cited § number has a heading
of that number in it (`## 3.` / `### 3.3 …`), that each cited rule `§1 Rn` has a heading `Rn`, and
that each quoted section name occurs in it.

Which document a bare `§n` means: the one named last on the same line; else, in a document with
numbered headings of its own, that document; else the one named last above it in the file. A bare
`§n` with no document named anywhere before it cannot be followed and fails. `§` after "Anger" or
"EiA" cites *Erlang in Anger*, a book, and is not checked. A path written `owner/repo:path` cites
another repository and is not checked either.

A bare file name (`alloc_util.md`) followed by a section must sit beside the citing file or at the
repository's root; a bare name mentioned without a section must exist somewhere in the repository.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve()

SUFFIXES = {".py", ".pyi", ".rs", ".erl", ".hrl", ".escript", ".c", ".h", ".md", ".html",
            ".cfg", ".toml"}  # fmt: skip
NAMES = {"Makefile"}
#: Not ours to check: tools' caches, build output, test inputs (data, not prose).
SKIP_DIRS = {".git", ".venv", "venv", "target", "node_modules", "__pycache__", ".pytest_cache",
             ".ruff_cache", "build", "dist", "data"}  # fmt: skip

#: A document named by path or bare name: a Markdown file, or the type table (the one data
#: file cited as a reference; other data files are named as inputs, not cited). Not after ':'
#: (owner/repo:path is another repository), not inside a longer path or word.
DOC = re.compile(r"(?<![\w/.:-])((?:\.\./|[\w.-]+/)*(?:[\w-][\w.-]*\.md|erts_types_otp\d+\.tsv))\b")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
#: A section reference right after a document name: `x.md §3`, `x.md, "Name"`, `x.md "Name"`.
AFTER_DOC = re.compile(r'\s*(?:§\d|,?\s*"[A-Z])')
NAMED = re.compile(r',?\s*"([A-Za-z][^"\n]{1,59})"')
RULE = re.compile(r"\s+(R\d+)\b")
EXTERNAL = re.compile(r"(?:Anger|EiA)\s*$")
HEADING = re.compile(r"^#{1,6}\s+§?(\d+(?:\.\d+)*)\.?(?:\s|$)")
RULE_HEADING = re.compile(r"^#{1,6}\s+(R\d+)\b")


@dataclass
class Doc:
    path: Path
    sections: set[str]
    rules: set[str]
    text: str


_docs: dict[Path, Doc | None] = {}


def _doc(path: Path) -> Doc | None:
    """The cited document, or None when it does not exist inside the repository."""
    path = path.resolve()
    if path not in _docs:
        ok = path.is_file() and path.is_relative_to(ROOT)
        text = path.read_text(encoding="utf-8", errors="replace") if ok else ""
        lines = text.splitlines()
        _docs[path] = Doc(path, {m[1] for ln in lines if (m := HEADING.match(ln))},
                          {m[1] for ln in lines if (m := RULE_HEADING.match(ln))},
                          text) if ok else None  # fmt: skip
    return _docs[path]


def _resolve(name: str, citing: Path, with_section: bool) -> Path | None:
    """Where a cited name points, or None if nowhere in the repository."""
    if "/" in name:  # from the root, or from the citing file's folder or one above it
        for base in (ROOT, *citing.parents):
            p = (base / name).resolve()
            if p.is_file() and p.is_relative_to(ROOT) and base.is_relative_to(ROOT):
                return p
        return None
    for base in (citing.parent, ROOT):
        if (base / name).is_file():
            return (base / name).resolve()
    if not with_section:  # a mention: any file of that name will do
        return next(iter(_files_named(name)), None)
    return None


def _files_named(name: str) -> list[Path]:
    return [p for p in _source_files() if p.name == name] + sorted(ROOT.glob(f"docs/**/{name}"))


def check_file(path: Path) -> list[str]:
    """Problems with the citations in one file, as `path:line: what`."""
    text = path.read_text(encoding="utf-8", errors="replace")
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    own = _doc(path) if path.suffix == ".md" else None
    numbered_self = own is not None and bool(own.sections)
    problems: list[str] = []
    last: tuple[Path | None, str] | None = None  # the document named last above: (path, name)
    for no, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{no}"
        on_line: list[tuple[int, Path | None, str]] = []  # (end offset, document, name)
        for m in DOC.finditer(line):
            name = m[1]
            with_section = bool(AFTER_DOC.match(line, m.end()))
            target = _resolve(name, path, with_section)
            if target is None:
                hint = "" if "/" in name else " (cite it by its path)"
                problems.append(f"{where}: {name} is not a file in the repository{hint}")
            on_line.append((m.end(), target, name))
            if with_section and target is not None:
                named = NAMED.match(line, m.end())
                if named and named[1] not in (_doc(target) or Doc(target, set(), set(), "")).text:
                    problems.append(f'{where}: {name} has no section "{named[1]}"')
        for m in SECTION.finditer(line):
            if EXTERNAL.search(line, 0, m.start()):
                continue
            before = [d for d in on_line if d[0] <= m.start()]
            if before:
                target, name = before[-1][1], before[-1][2]
            elif numbered_self:
                target, name = path, str(rel)
            elif last is not None:
                target, name = last
            else:
                problems.append(f"{where}: §{m[1]} names no document (cite it as <path> §{m[1]})")
                continue
            if target is None:
                continue  # the missing document is reported already
            doc = _doc(target)
            if doc is None or m[1] not in doc.sections:
                problems.append(f"{where}: {name} has no section §{m[1]}")
                continue
            rule = RULE.match(line, m.end())
            if m[1] == "1" and rule and rule[1] not in doc.rules:
                problems.append(f"{where}: {name} §1 has no rule {rule[1]}")
            named = NAMED.match(line, m.end())
            if named and named[1] not in doc.text:
                problems.append(f'{where}: {name} §{m[1]} has no part "{named[1]}"')
        if on_line:
            last = on_line[-1][1], on_line[-1][2]
    return problems


_files: list[Path] = []


def _source_files() -> list[Path]:
    if not _files:
        for p in sorted(ROOT.rglob("*")):
            rel = p.relative_to(ROOT).parts
            if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel[:-1]):
                continue
            if p.is_file() and (p.suffix in SUFFIXES or p.name in NAMES) and p != SELF:
                _files.append(p)
    return _files


@pytest.mark.parametrize("path", _source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_citations_can_be_followed(path: Path) -> None:
    problems = check_file(path)
    assert not problems, "\n".join(problems)


def test_reference_docs_carry_what_the_code_cites() -> None:
    """The sections the code relies on are in docs/erts, with the numbers the code uses."""
    au = _doc(ROOT / "docs/erts/alloc_util.md")
    rf = _doc(ROOT / "docs/erts/recon-formulas.md")
    tu = _doc(ROOT / "docs/erts/tuning.md")
    assert au and rf and tu
    assert {"1", "2.1", "2.2", "2.3", "2.4", "2.5", "3.1", "3.8", "4.1", "4.9", "5", "6.1", "6.4",
            "7", "8", "9.10", "9.27"} <= au.sections  # fmt: skip
    assert {"0", "0.1", "0.2", "0.3", "0.4", "1", "2", "3", "3.1", "3.3", "4", "5"} <= rf.sections
    assert {"0.1", "0.2", "0.3", "1"} <= tu.sections
    assert {f"R{i}" for i in range(16)} <= tu.rules
    assert (ROOT / "docs/erts/erts_types_otp25.tsv").read_text().count("\n") == 231


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("see docs/erts/alloc_util.md §3.3, §9.10", None),
        ("see docs/erts/alloc_util.md §3.9", "has no section §3.9"),
        ("see docs/erts/alloc_util.md §2.1, §12", "has no section §12"),
        ("see alloc_util.md §2", "alloc_util.md is not a file in the repository (cite it by"),
        ("see ../shared/DESIGN.md", "../shared/DESIGN.md is not a file in the repository"),
        ('docs/design.md, "Conventions"', None),
        ('docs/design.md, "Architecture"', 'has no section "Architecture"'),
        ('docs/erts/alloc_util.md §7, "Resolving extra"', 'has no part "Resolving extra"'),
        ("docs/erts/tuning.md §1 R8, §0.2 item 5", None),
        ("docs/erts/tuning.md §1 R99", "§1 has no rule R99"),
        ("(§2.1)", "§2.1 names no document"),
        ("Erlang in Anger §7.3.1; EiA §7.2", None),
        ("erlang/otp:erts/doc/internal_docs/carriermigration.md", None),
        ("carriermigration.md", "carriermigration.md is not a file"),
    ],
)
def test_checker_catches_bad_citations(tmp_path: Path, line: str, expect: str | None) -> None:
    """The checker itself: it passes good citations and names the fault in bad ones."""
    src = tmp_path / "mod.py"
    src.write_text(f"# {line}\n")
    problems = check_file(src)
    if expect is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expect in problems[0], problems


def test_bare_sections_follow_the_document_named_above(tmp_path: Path) -> None:
    src = tmp_path / "mod.rs"
    src.write_text("//! A model of docs/erts/alloc_util.md.\n// (§3.1)\n// (§4.1, §4.3)\n"
                   "// docs/erts/tuning.md §1 R3\n// (§0.2 item 1)\n// (§3.1)\n")  # fmt: skip
    assert check_file(src) == [f"{src}:6: docs/erts/tuning.md has no section §3.1"]
