"""Imports go one way (docs/architecture.md, issue 11): every module of the package, read from its
source (imports inside functions included), imports only modules of its own layer or of a layer
below it, and no two modules import each other, directly or around a cycle.

LAYERS is the one home of the order: a module not named here fails the test, so a new folder or
module says where it sits (docs/architecture.md says where each kind of change goes).
"""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Lowest first. A module belongs to the longest entry its dotted name equals or starts with (then
#: "."); the root package "beamalloc" only to itself, so each core module is named.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # The model, units, flags grammar, trace format, console helper, the native model's binding.
    ("core", ("beamalloc.errors", "beamalloc.units", "beamalloc.files", "beamalloc.snapshot",
              "beamalloc.limits", "beamalloc.pastes",
              "beamalloc.flags", "beamalloc.trace", "beamalloc.console", "beamalloc._refalloc",
              "beamalloc.versions", "beamalloc.citations", "beamalloc")),
    # Readers: files, live nodes, eBPF. They build Snapshots and trace files.
    ("collect", ("beamalloc.collector", "beamalloc.ebpf")),
    # recon_alloc's numbers and the carrier view of one Snapshot.
    ("analysis", ("beamalloc.analyzer.metrics", "beamalloc.analyzer.options",
                  "beamalloc.analyzer.carriers", "beamalloc.analyzer.analysis",
                  "beamalloc.analyzer.death", "beamalloc.analyzer.categories",
                  "beamalloc.analyzer.defects", "beamalloc.analyzer.limits")),
    # Replay: the Rust model's adapter and the trace generators; a replay is a Snapshot.
    ("replay", ("beamalloc.refalloc",)),
    # Findings, rules, lint, predictions, the recommendation (they replay).
    # (advice/ and htmlreport/: the folders tests/tools/relayer.py moves them to.)
    ("advice", ("beamalloc.analyzer", "beamalloc.advice")),
    # The time series of watched nodes: gauges, watch loop, store, Prometheus.
    ("series", ("beamalloc.timeseries",)),
    # Terminal renderings and paste formats of what the stages return.
    ("report", ("beamalloc.reporters",)),
    ("web", ("beamalloc.webui",)),
    # The static HTML report: a reporter that renders the web UI's templates and page data, so it
    # sits above webui/ (which takes verdict lines and paste formats from the reporters below).
    ("html", ("beamalloc.htmlreport.html", "beamalloc.htmlreport")),
    # The `beamalloc` command and the demo.
    ("app", ("beamalloc.cli",)),
]


def _packages() -> dict[str, Path]:
    """setup.cfg's package_dir: import name -> folder."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    out = {}
    for line in cfg["options"]["package_dir"].strip().splitlines():
        name, folder = (s.strip() for s in line.split("="))
        out[name] = ROOT / folder
    return out


def _modules() -> dict[str, Path]:
    pkgs = _packages()
    mods: dict[str, Path] = {}
    for pkg, folder in pkgs.items():
        for f in folder.glob("*.py"):
            name = pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"
            mods[name] = f
    return mods


def _layer(mod: str) -> int:
    found = [
        (len(p), i)
        for i, (_, prefixes) in enumerate(LAYERS)
        for p in prefixes
        if mod == p or (p != "beamalloc" and mod.startswith(p + "."))
    ]
    assert found, f"{mod} is in no layer: add it to LAYERS and docs/architecture.md"
    return max(found)[1]


def _imports(mod: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The package modules `mod` imports, at module level or inside functions."""
    pkg = mod if path.stem == "__init__" else mod.rpartition(".")[0]

    def resolve(name: str) -> str:  # a name inside a module -> that module
        while name and name not in mods and name != "beamalloc._refalloc":
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


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def test_the_graph_is_read() -> None:
    g = _graph()
    # A sample of edges that exist, so a reader that finds nothing does not pass vacuously.
    assert "beamalloc.snapshot" in g["beamalloc.analyzer.metrics"]
    assert "beamalloc.refalloc.replay" in g["beamalloc.advice.predict"]  # inside a function
    assert len(g) > 60


def test_every_module_has_a_layer() -> None:
    for m in _graph():
        _layer(m)


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
    mods = _modules()
    drawing = {m for m, p in mods.items() if _third_party(p, "rich")}
    assert "beamalloc.reporters.trace" in drawing  # the reader sees what it is looking for
    outside = sorted(m for m in drawing
                     if not m.startswith("beamalloc.reporters.") and m != "beamalloc.console")
    assert not outside, f"terminal rendering outside reporters/: {outside}"
