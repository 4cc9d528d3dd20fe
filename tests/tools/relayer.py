"""Folders are layers (issue 27 item 5): move the advice modules out of analyzer/ into advice/ and
the static HTML report (reporters/html.py) into htmlreport/, then rewrite every reference to them.

    .venv/bin/python tests/tools/relayer.py [ROOT]

analyzer/ keeps the analysis of one Snapshot (ANALYSIS below); every other module of it moves to
advice/, so a module added to analyzer/ since is moved too unless it is named in ANALYSIS.
References rewritten in every text file git knows (tracked, or untracked and not ignored):
imports (absolute, relative, `from beamalloc.analyzer import a, b` split by destination), dotted
names in strings (mock paths), paths in docs and comments (`analyzer/predict.py`), the folder lists
of tests and the Makefile, setup.cfg's package_dir and packages. Import blocks the rewrite touched
are sorted again by ruff (isort rules only). Idempotent: a second run changes nothing; it prints
what it did and, for what it cannot rewrite safely, a line starting "check:".
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

#: The analysis layer: what stays in analyzer/ (docs/architecture.md). Everything else moves.
ANALYSIS = ("__init__", "metrics", "options", "carriers", "analysis", "death", "categories",
            "defects", "limits")
OLD, NEW = "analyzer", "advice"
HTML_OLD, HTML_NEW, HTML_MOD = "reporters", "htmlreport", "html"
INIT_DOCS = {
    NEW: '"""The advice layer: findings, rules, lint, predictions (they replay), the\n'
         'recommendation, its records and wording, the holders\' judgement, diff\n'
         '(docs/architecture.md)."""\n',
    HTML_NEW: '"""The static HTML report: one file rendered from the web UI\'s templates,\n'
              'figures and page data, so it sits above webui/ (docs/architecture.md)."""\n',
}
#: Text files whose references are rewritten, by suffix (plus these names).
SUFFIXES = {".py", ".md", ".cfg", ".toml", ".html", ".in", ".txt", ".erl", ".hrl", ".rs", ".sh",
            ".yml", ".yaml", ".c", ".h", ".js", ".css", ".escript"}
NAMES = {"Makefile", "run"}
#: Top folders a literal list of folders names; a list naming the old folder gains the new one.
FOLDERS = {"beamalloc", "cli", "collector", "analyzer", "ebpf", "webui", "refalloc", "timeseries",
           "reporters", "docs", "samples", "cli/commands"}
MAX_LINE = 100  # pyproject.toml [tool.ruff] line-length
SELF = Path(__file__).resolve()


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


def tracked(root: Path, path: Path) -> bool:
    return subprocess.run(["git", "-C", str(root), "ls-files", "--error-unmatch", str(path)],
                          capture_output=True).returncode == 0


def move(root: Path, src: Path, dst: Path) -> None:
    dst.parent.mkdir(exist_ok=True)
    if tracked(root, src):
        git(root, "mv", str(src.relative_to(root)), str(dst.relative_to(root)))
    else:  # a new file not yet added: moved as it is
        src.rename(dst)
    print(f"moved {src.relative_to(root)} -> {dst.relative_to(root)}")


def move_modules(root: Path) -> tuple[set[str], list[Path]]:
    """Moves the modules; returns the advice modules' names (moved now or before) and the files
    moved by this run (their relative imports are read against their old package)."""
    moved: list[Path] = []
    for f in sorted((root / OLD).glob("*.py")):
        if f.stem not in ANALYSIS:
            dst = root / NEW / f.name
            if dst.exists():
                sys.exit(f"relayer: {dst.relative_to(root)} exists already; {f.name} not moved")
            move(root, f, dst)
            moved.append(dst)
    html = root / HTML_OLD / f"{HTML_MOD}.py"
    if html.exists():
        move(root, html, root / HTML_NEW / html.name)
        moved.append(root / HTML_NEW / html.name)
    for pkg, doc in INIT_DOCS.items():
        init = root / pkg / "__init__.py"
        if not init.exists():
            init.write_text(doc)
            git(root, "add", str(init.relative_to(root)))
            print(f"created {init.relative_to(root)}")
    advice = {f.stem for f in (root / NEW).glob("*.py") if f.stem != "__init__"}
    clash = advice & set(ANALYSIS)
    if clash:
        sys.exit(f"relayer: {sorted(clash)} in both analyzer/ and advice/")
    return advice, moved


def setup_cfg(text: str) -> str:
    """package_dir and packages gain the new packages, each after the one it comes from."""
    for old, new in ((OLD, NEW), (HTML_OLD, HTML_NEW)):
        for line, pat in ((f"beamalloc.{new} = {new}", rf"^([ \t]+)beamalloc\.{old} = {old}\n"),
                          (f"beamalloc.{new}", rf"^([ \t]+)beamalloc\.{old}\n")):
            if not re.search(rf"^[ \t]+{re.escape(line)}\n", text, re.M):
                text = re.sub(pat, lambda m, a=line: f"{m.group(0)}{m.group(1)}{a}\n", text,
                              count=1, flags=re.M)
    return text


class Imports:
    """Rewrites `from X import ...` statements whose module or names moved."""

    def __init__(self, advice: set[str]) -> None:
        self.advice = advice

    def module(self, name: str) -> str:
        """A dotted module name after the move."""
        parts = name.split(".")
        if parts[:2] == ["beamalloc", OLD] and len(parts) > 2 and parts[2] in self.advice:
            return ".".join(["beamalloc", NEW, *parts[2:]])
        if parts[:3] == ["beamalloc", HTML_OLD, HTML_MOD]:
            return ".".join(["beamalloc", HTML_NEW, *parts[2:]])
        return name

    def target(self, mod: str, name: str) -> str:
        """Where `from mod import name` imports from after the move."""
        if (mod == f"beamalloc.{OLD}" and name in self.advice) or (
                mod == f"beamalloc.{HTML_OLD}" and name == HTML_MOD):
            return self.module(f"{mod}.{name}").rpartition(".")[0]
        return self.module(mod)

    def rewrite(self, text: str, pkg_before: str | None, pkg_after: str | None) -> str:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return text
        lines = text.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line.encode()))
        raw = text.encode()
        edits: list[tuple[int, int, bytes]] = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                if pkg_before is None:
                    continue
                parts = pkg_before.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                mod = ".".join([*parts, node.module] if node.module else parts)
            else:
                mod = node.module or ""
            if not mod.startswith("beamalloc"):
                continue
            groups: dict[str, list[str]] = {}
            for a in node.names:
                spelled = a.name if a.asname is None else f"{a.name} as {a.asname}"
                groups.setdefault(self.target(mod, a.name), []).append(spelled)
            stays_relative = node.level and pkg_after is not None and pkg_before == pkg_after
            if list(groups) == [mod] and (not node.level or stays_relative):
                continue
            stmts = []
            for new_mod, names in groups.items():
                if node.level and pkg_after and (new_mod == pkg_after
                                                 or new_mod.startswith(pkg_after + ".")):
                    spelled = "." + new_mod[len(pkg_after):].lstrip(".")
                else:
                    spelled = new_mod
                stmts.append(f"from {spelled} import {', '.join(names)}")
            start = offsets[node.lineno - 1] + node.col_offset
            end = offsets[node.end_lineno - 1] + node.end_col_offset
            if b"#" in raw[start:end]:
                print(f"check: comments inside the import at line {node.lineno} are dropped")
            edits.append((start, end, ("\n" + " " * node.col_offset).join(stmts).encode()))
        for start, end, new in sorted(edits, reverse=True):
            raw = raw[:start] + new + raw[end:]
        return raw.decode()


def folder_lists(text: str, makefile: bool) -> str:
    """A literal list of top folders that names the old folder names the new one beside it."""
    lines = text.splitlines(keepends=True)
    grown = []
    for i, line in enumerate(lines):
        for old, new in ((OLD, NEW), (HTML_OLD, HTML_NEW)):
            if makefile:
                words = line.split()
                if old in words and new not in words and len(set(words) & FOLDERS) >= 3:
                    line = re.sub(rf"(?<=\s){old}(?=\s)", f"{old} {new}", line, count=1)
            else:
                quoted = set(re.findall(r'"([\w/]+)"', line))
                if old in quoted and new not in quoted and len(quoted & FOLDERS) >= 2:
                    line = line.replace(f'"{old}"', f'"{old}", "{new}"', 1)
        if line != lines[i]:
            lines[i] = line
            grown.append(i)
    for i in reversed(grown):
        lines = wrap_make(lines, i) if makefile else wrap_py(lines, i)
    return "".join(lines)


def width(line: str) -> int:
    return len(line.rstrip("\n").expandtabs(8))


def wrap_make(lines: list[str], i: int) -> list[str]:
    """A recipe line that grew too long hands its last words to its continuation line."""
    while width(lines[i]) > MAX_LINE and lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
        head, _, word = lines[i].rstrip()[:-1].rstrip().rpartition(" ")
        nxt = lines[i + 1]
        indent = nxt[: len(nxt) - len(nxt.lstrip())]
        lines[i] = f"{head} \\\n"
        lines[i + 1] = f"{indent}{word} {nxt.lstrip()}"
    return lines


def wrap_py(lines: list[str], i: int) -> list[str]:
    """A literal list of strings that grew too long, filled again to the line length, its
    continuation lines aligned on its first element as they were."""
    if width(lines[i]) <= MAX_LINE:
        return lines
    col = lines[i].index('"')
    while i > 0 and not lines[i][:col].strip() and lines[i - 1][col - 1 : col] in ("(", " ") \
            and lines[i - 1][col : col + 1] == '"':
        i -= 1
    col = lines[i].index('"')
    j = i
    while j + 1 < len(lines) and not lines[j + 1][:col].strip() and lines[j + 1][col] == '"':
        j += 1
    block = "".join(lines[i : j + 1])
    m = re.match(r'((?:\s*"[\w/]+",?)+)(.*)', block[col:], re.S)
    if m is None:
        return lines
    items = re.findall(r'"[\w/]+"', m.group(1))
    comma = m.group(1).rstrip().endswith(",")
    out, cur, filled = [], block[:col], False
    for k, item in enumerate(items):
        piece = item + ("," if k < len(items) - 1 or comma else "")
        tail = m.group(2).rstrip("\n") if k == len(items) - 1 else ""
        if filled and width(f"{cur} {piece}{tail}") > MAX_LINE:
            out.append(cur + "\n")
            cur, filled = " " * col, False
        cur, filled = (f"{cur} {piece}" if filled else cur + piece), True
    out.append(cur + m.group(2))
    return [*lines[:i], *out, *lines[j + 1 :]]


def rewrite_text(text: str, advice: set[str]) -> str:
    names = "|".join(sorted(advice, key=len, reverse=True))
    if names:
        text = re.sub(rf"\bbeamalloc\.{OLD}\.({names})(?!\w)", rf"beamalloc.{NEW}.\1", text)
        text = re.sub(rf"(?<![\w.]){OLD}/({names})(?![\w])", rf"{NEW}/\1", text)
    text = re.sub(rf"\bbeamalloc\.{HTML_OLD}\.{HTML_MOD}(?!\w)", f"beamalloc.{HTML_NEW}.{HTML_MOD}",
                  text)
    text = re.sub(rf"(?<![\w.]){HTML_OLD}/{HTML_MOD}(?![\w])", f"{HTML_NEW}/{HTML_MOD}", text)
    return text


def residue(path: Path, text: str, advice: set[str]) -> str:
    """Import statements in strings or docs (no AST reaches them) that name moved modules: the
    module is renamed where every name moved, else the statement is reported."""

    def one(m: re.Match[str]) -> str:
        old = m.group(1)
        moved, new = (advice, NEW) if old == OLD else ({HTML_MOD}, HTML_NEW)
        names = {n.split(" as ")[0].strip() for n in m.group(2).split(",")} - {""}
        if names and names <= moved:
            return f"from beamalloc.{new} import {m.group(2)}"
        if names & moved:
            print(f"check: {path}: {m.group(0)!r} (split it by hand)")
        return m.group(0)

    return re.sub(rf"from beamalloc\.({OLD}|{HTML_OLD}) import ([\w, ]+)", one, text)


def packages(root: Path) -> dict[Path, str]:
    """Folder -> package, from setup.cfg's package_dir (read after its rewrite)."""
    out = {}
    block = re.search(r"^package_dir\s*=\s*\n((?:[ \t]+.*\n)+)",
                      (root / "setup.cfg").read_text(), re.M)
    assert block, "setup.cfg has no package_dir"
    for line in block.group(1).splitlines():
        if "=" in line and not line.strip().startswith("#"):
            name, folder = (s.strip() for s in line.split("="))
            out[(root / folder).resolve()] = name
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else git(Path.cwd(), "rev-parse", "--show-toplevel")
                .strip()).resolve()
    advice, moved = move_modules(root)
    cfg = root / "setup.cfg"
    cfg.write_text(setup_cfg(cfg.read_text()))
    pkgs = packages(root)
    old_pkg = {root / NEW: f"beamalloc.{OLD}", root / HTML_NEW: f"beamalloc.{HTML_OLD}"}
    imports = Imports(advice)
    files = git(root, "ls-files", "-co", "--exclude-standard", "-z").split("\0")
    changed: list[Path] = []
    for rel in files:
        path = root / rel
        if (not rel or path.resolve() == SELF or not path.is_file()
                or (path.suffix not in SUFFIXES and path.name not in NAMES)):
            continue
        try:
            before = path.read_text()
        except UnicodeDecodeError:
            continue
        text = before
        if path.suffix == ".py":
            folder = path.parent.resolve()
            after = pkgs.get(folder)
            pre = old_pkg.get(path.parent) if path in moved else after
            text = imports.rewrite(text, pre, after)
        text = rewrite_text(text, advice)
        if path.suffix == ".py" or path.name == "Makefile":
            text = folder_lists(text, path.name == "Makefile")
        text = residue(path.relative_to(root), text, advice)
        if text != before:
            path.write_text(text)
            changed.append(path)
            print(f"rewrote {rel}")
    py = [str(p) for p in changed if p.suffix == ".py"]
    if py:  # the renamed modules sort elsewhere in their import blocks
        ruff = next((str(r) for r in (root / ".venv/bin/ruff", Path(sys.executable).parent / "ruff")
                     if r.exists()), "ruff")
        subprocess.run([ruff, "check", "-q", "--fix", "--select", "I", *py], cwd=root,
                       check=False)
    print(f"relayer: {len(moved)} modules moved, {len(changed)} files rewritten")
    if moved:  # the editable install maps each package to its folder when it is installed
        print("relayer: now `make setup` (or .venv/bin/pip install -e .): new packages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
