"""Folders are layers (docs/architecture.md, issues 11 and 27): every package folder sits on one
layer, and every module of it imports, from its source (imports inside functions included), only
modules of its own layer or of a layer below it; no two modules import each other, directly or
around a cycle.

LAYERS is the one home of the order, by folder: a package folder it does not name fails the test,
so a new folder says where it sits (docs/architecture.md says where each kind of change goes), and
a folder whose modules belong on two layers is two folders.
"""

from __future__ import annotations

import ast
import configparser
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Lowest first: each layer and its folders (setup.cfg's package_dir), each folder on one layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # The model, units, flags grammar, trace format, console helper, the native model's binding.
    ("core", ("beamalloc",)),
    # Readers: files, live nodes, eBPF. They build Snapshots and trace files.
    ("collect", ("collector", "ebpf")),
    # recon_alloc's numbers and the carrier view of one Snapshot, its death, categories, limits.
    ("analysis", ("analyzer",)),
    # Replay: the Rust model's adapter and the trace generators; a replay is a Snapshot.
    ("replay", ("refalloc",)),
    # Findings, rules, lint, predictions, the recommendation (they replay).
    ("advice", ("advice",)),
    # The time series of watched nodes: gauges, watch loop, store, Prometheus.
    ("series", ("timeseries",)),
    # Terminal renderings and paste formats of what the stages return.
    ("report", ("reporters",)),
    ("web", ("webui",)),
    # The static HTML report renders the web UI's templates and page data: above webui/ (which
    # takes verdict lines and paste formats from the reporters below).
    ("html", ("htmlreport",)),
    # The `beamalloc` command and the demo.
    ("app", ("cli", "cli/commands")),
]
#: The native model (refalloc/src, built into the core package by setuptools-rust).
NATIVE = "beamalloc._refalloc"


@functools.cache
def _packages() -> dict[str, str]:
    """setup.cfg's package_dir: import name -> folder (relative to the repository)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    out = {}
    for line in cfg["options"]["package_dir"].strip().splitlines():
        name, folder = (s.strip() for s in line.split("="))
        out[name] = folder
    return out


@functools.cache
def _modules() -> dict[str, tuple[Path, str]]:
    """Every module of the package -> (its file, its folder)."""
    mods: dict[str, tuple[Path, str]] = {}
    for pkg, folder in _packages().items():
        for f in (ROOT / folder).glob("*.py"):
            mods[pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"] = (f, folder)
    return mods


def _folder_layer(folder: str) -> int:
    found = [i for i, (_, folders) in enumerate(LAYERS) if folder in folders]
    assert found, f"{folder}/ is in no layer: add it to LAYERS and docs/architecture.md"
    return found[0]


def _layer(mod: str) -> int:
    return _folder_layer("beamalloc" if mod == NATIVE else _modules()[mod][1])


def _imports(mod: str, path: Path, mods: dict[str, tuple[Path, str]]) -> set[str]:
    """The package modules `mod` imports, at module level or inside functions."""
    pkg = mod if path.stem == "__init__" else mod.rpartition(".")[0]

    def resolve(name: str) -> str:  # a name inside a module -> that module
        while name and name not in mods and name != NATIVE:
            name = name.rpartition(".")[0]
        return name

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [resolve(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            # `from beamalloc.x import y`: y is a module of its own, or a name in beamalloc.x.
            targets = [resolve(f"{base}.{a.name}") for a in node.names]
        else:
            continue
        out |= {t for t in targets if t.startswith("beamalloc") and t != mod}
    return out


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    """Read once per session: each test below asks for it (ten of them by layer)."""
    mods = _modules()
    return {m: frozenset(_imports(m, p, mods)) for m, (p, _) in mods.items()}


def test_the_graph_is_read() -> None:
    g = _graph()
    # A sample of edges that exist, so a reader that finds nothing does not pass vacuously.
    assert "beamalloc.snapshot" in g["beamalloc.analyzer.metrics"]
    assert "beamalloc.refalloc.replay" in g["beamalloc.advice.predict"]  # inside a function
    assert "beamalloc.webui.pagedata" in g["beamalloc.htmlreport.html"]
    assert len(g) > 60


def test_every_folder_has_one_layer() -> None:
    """A folder is a layer's, whole: LAYERS names folders only (a module there would let its
    folder span two layers), each once, each one setup.cfg maps; and every folder with modules
    is named, so every module of it is on that folder's layer."""
    named = [f for _, folders in LAYERS for f in folders]
    assert len(named) == len(set(named)), "a folder on two layers"
    assert sorted(set(named) - set(_packages().values())) == [], "not a package folder"
    with_modules = {folder for _, folder in _modules().values()}
    assert sorted(with_modules - set(named)) == []
    # the reader sees what it is looking for: analyzer/ is the analysis, advice/ the advice
    assert {LAYERS[_layer(m)][0] for m in _graph() if m.startswith("beamalloc.analyzer")} == {
        "analysis"}
    assert _layer("beamalloc.advice.predict") > _layer("beamalloc.refalloc.replay")


def test_every_package_folder_is_in_the_wheel() -> None:
    """A folder with an __init__.py is a package setup.cfg lists (package_dir and packages), so
    the wheel holds it (tests/test_wheel.py builds one)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = {ln.strip() for ln in cfg["options"]["packages"].splitlines()
              if ln.strip() and not ln.strip().startswith("#")}
    inits = {p.parent.relative_to(ROOT).as_posix() for p in ROOT.glob("*/__init__.py")}
    inits |= {p.parent.relative_to(ROOT).as_posix() for f in inits
              for p in (ROOT / f).glob("*/__init__.py")}
    inits -= {"tests", "tests/browser", "tests/live"}
    folders = {f: name for name, f in _packages().items()}
    assert sorted(inits - set(folders)) == [], "package folders setup.cfg does not map"
    assert sorted(folders[f] for f in inits if folders[f] not in listed) == []
    assert {"advice", "htmlreport", "cli/commands"} <= inits


@pytest.mark.parametrize("name", [name for name, _ in LAYERS])
def test_imports_go_down(name: str) -> None:
    bad = [
        f"{m} ({LAYERS[_layer(m)][0]}) imports {t} ({LAYERS[_layer(t)][0]})"
        for m, targets in sorted(_graph().items())
        if LAYERS[_layer(m)][0] == name
        for t in sorted(targets)
        if _layer(t) > _layer(m)
    ]
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycle() -> None:
    g = _graph()
    # The package's own __init__ (`beamalloc.cli` re-exports main) is not a cycle with its modules.
    edges = {m: {t for t in ts if not (m.startswith(t + ".") and t in g)} for m, ts in g.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycle = [*stack[stack.index(t):], t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t in edges and t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def _third_party(path: Path, top: str) -> bool:
    """Whether the module at `path` imports package `top` (at module level or in a function)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [])
        if any(n == top or n.startswith(top + ".") for n in names):
            return True
    return False


def test_terminal_rendering_lives_in_reporters() -> None:
    """Every terminal reporter is in reporters/ (issue 11 item 6): no other module draws with
    rich, apart from the console helper that picks the terminal (beamalloc/console.py)."""
    drawing = {m for m, (p, _) in _modules().items() if _third_party(p, "rich")}
    assert "beamalloc.reporters.trace" in drawing  # the reader sees what it is looking for
    outside = sorted(m for m in drawing
                     if not m.startswith("beamalloc.reporters.") and m != "beamalloc.console")
    assert not outside, f"terminal rendering outside reporters/: {outside}"
