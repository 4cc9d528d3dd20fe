"""Every citation our output can print resolves in the docs the package ships (issue 15, item 5).

Used two ways: tests/test_citations.py imports `problems()` and checks the source tree;
tests/test_wheel.py runs this file with the installed wheel's interpreter (`python
citation_check.py`), so the same check reads the installed package and its installed docs.

What counts as a citation that reaches the output: every string in the package's code (docstrings
and comments excluded, they are not printed) that names `docs/...md`, and the sources of every
rule, remedy and process finding. For each one: the document exists under
`beamalloc.citations.DOCS_DIR`, a cited section number or rule has a heading there (so the link gets
its anchor), and the link names an existing file inside the installed package or checkout.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit


def printed_strings(package: Path) -> dict[str, list[str]]:
    """Strings naming docs/…md in the package's modules (not docstrings), by `file:line`."""
    out: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef
                                    | ast.AsyncFunctionDef)
                      and n.body and isinstance(n.body[0], ast.Expr)
                      and isinstance(n.body[0].value, ast.Constant)}  # fmt: skip
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and "docs/" in node.value
                    and ".md" in node.value):
                out.setdefault(node.value, []).append(f"{path.name}:{node.lineno}")
    return out


def rule_sources() -> dict[str, list[str]]:
    """The first source of every rule, remedy and process finding: its home in our docs."""
    from beamalloc.advice import holders, recommend, rules

    out: dict[str, list[str]] = {}
    for name, spec in vars(rules).items():
        if isinstance(spec, rules.RuleSpec):
            out.setdefault(spec.sources[0], []).append(f"rules.{name}")
    out.setdefault(recommend.SRC_REMEDIES, []).append("recommend.SRC_REMEDIES")
    out.setdefault(holders.SRC_FACTS, []).append("holders.SRC_FACTS")
    return out


def problems() -> tuple[list[str], int]:
    """What does not resolve, and how many citations were checked."""
    import beamalloc
    from beamalloc import citations

    package = Path(beamalloc.__file__).resolve().parent
    roots = {package, *(package.parent / d for d in ("analyzer", "advice", "cli", "collector",
                                                     "ebpf", "reporters", "htmlreport", "refalloc",
                                                     "timeseries", "webui"))}  # fmt: skip
    found: dict[str, list[str]] = {}
    for root in roots:
        if root.is_dir():
            for text, where in printed_strings(root).items():
                found.setdefault(text, []).extend(where)
    for text, where in rule_sources().items():
        found.setdefault(text, []).extend(where)
    out = []
    checked = 0
    for text, where in sorted(found.items()):
        for t in citations.targets(text):
            checked += 1
            at = f"{where[0]}: {text!r}"
            if not t.path.is_file():
                out.append(f"{at}: docs/{t.doc} is not in {citations.DOCS_DIR}")
                continue
            numbered = t.section is not None and (t.section[0] == "R" or t.section[0].isdigit())
            if numbered and citations.anchor(t) is None:
                out.append(f"{at}: docs/{t.doc} has no heading for {t.section}")
        if text in rule_sources():
            uri = citations.link(text)
            if uri is None:
                out.append(f"{where[0]}: {text!r} links to nothing of ours")
                continue
            file = Path(unquote(urlsplit(uri).path))
            if not (file.is_file() and file.is_relative_to(citations.DOCS_DIR)):
                out.append(f"{where[0]}: {uri} is not a shipped document")
    return out, checked


if __name__ == "__main__":
    from beamalloc import citations

    bad, n = problems()
    print(f"docs {citations.DOCS_DIR}; {n} citations checked")
    for line in bad:
        print(line)
    sys.exit(1 if bad else 0)
