"""No module globals but constants (issue 27 item 4): the settings of a run travel in its Context
and Terminal (cli/context.py, beamalloc/console.py), never in a module's variable that a call
changes. Read from every module's source: a `global` statement, a call of `globals()`, a
module-level ContextVar, a function cache (functools.cache, lru_cache), or a module-level name
that a function mutates (an item or attribute assigned or deleted, a mutating method called on
it) fails the test unless ALLOWED names it and says why its state cannot change what a run does.
"""

from __future__ import annotations

import ast

from test_layers import _modules

#: Mutating methods of the builtin containers, deque and the like.
MUTATORS = frozenset({
    "append", "appendleft", "extend", "extendleft", "insert", "update", "add", "setdefault",
    "pop", "popleft", "popitem", "clear", "remove", "discard", "sort", "reverse",
    "difference_update", "intersection_update", "symmetric_difference_update", "__setitem__",
    "__delitem__",
})

#: (module, name): why its state never changes behaviour. Caches only: a value computed from its
#: arguments or from files the package ships, the same whenever it is computed.
ALLOWED: dict[tuple[str, str], str] = {
    ("beamalloc.snapshot", "_FIELD_NAMES"):
        "a dataclass's field names per type, as dataclasses.fields() gives them every time",
    ("beamalloc.ebpf.kernel", "_bcc"):
        "Debian's bcc module once loaded: the same module whichever call loads it",
    ("beamalloc.units", "_EXACT"):
        "a ContextVar set only inside `with exact_bytes()` and reset when it ends, so a "
        "rendering's exact bytes never leak into a stage's sentences or another thread",
    ("beamalloc.citations", "_headings"): "a shipped doc's headings, read once",
    ("beamalloc.collector.dist", "_atom"): "an atom's external term format, a pure function",
    ("beamalloc.htmlreport.html", "_env"):
        "the Jinja environment over the package's own templates, built once",
    ("beamalloc.timeseries.store", "_dict"):
        "a zstd dictionary built from its key, a pure function of its arguments",
    ("beamalloc.webui.assets", "text"): "a static file of the package, read once",
    ("beamalloc.webui.assets", "plotly_js"): "plotly's own script, read once",
    ("beamalloc.webui.assets", "plotly_js_gz_b64"): "that script compressed, once",
    ("beamalloc.webui.docs", "index"): "the package's shipped docs, read once",
}

_CACHES = frozenset({"cache", "lru_cache", "functools.cache", "functools.lru_cache"})


def _module_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level: assignments, classes, functions."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):  # a class's attribute is state too
            names.add(node.name)
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign)
                   else [])  # fmt: skip
        for t in targets:
            names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _base(node: ast.expr) -> str | None:
    """`X` of `X[...]`, `X.a`, `X.a[...]`: the module-level name an item or attribute is of."""
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _locals(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names a function binds itself (arguments, assignments): they hide the module's."""
    a = fn.args
    out = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    out |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return out


def state_of(mod: str, source: str) -> list[str]:
    """Each piece of module-level mutable state of `source`, as 'module name: what (line)'."""
    tree = ast.parse(source)
    top = _module_names(tree)
    found: list[tuple[str, str, int]] = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("ContextVar"):
            for name in _module_names(ast.Module(body=[node], type_ignores=[])):
                found.append((name, "a module-level ContextVar", node.lineno))
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                f = d.func if isinstance(d, ast.Call) else d
                if ast.unparse(f) in _CACHES:
                    found.append((node.name, "a function cache", node.lineno))
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        shadowed = _locals(fn)
        for n in ast.walk(fn):
            if isinstance(n, ast.Global):
                found += [(name, "a global statement", n.lineno) for name in n.names]
                shadowed -= set(n.names)
        for n in ast.walk(fn):
            targets: list[ast.expr] = []
            if isinstance(n, ast.Assign | ast.Delete):
                targets = n.targets
            elif isinstance(n, ast.AugAssign | ast.AnnAssign):
                targets = [n.target]
            for t in targets:
                for e in t.elts if isinstance(t, ast.Tuple | ast.List) else [t]:
                    if isinstance(e, ast.Subscript | ast.Attribute):
                        b = _base(e)
                        if b in top and b not in shadowed:
                            found.append((b, "assigned an item or attribute", n.lineno))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                b = _base(n.func.value)
                if n.func.attr in MUTATORS and b in top and b not in shadowed:
                    found.append((b, f"mutated by .{n.func.attr}()", n.lineno))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "globals":
                found.append(("globals()", "called", n.lineno))
    return sorted({f"{mod} {name}: {what} (line {line})" for name, what, line in found
                   if (mod, name) not in ALLOWED})


def test_no_module_holds_state_a_call_changes() -> None:
    found = [s for mod, (path, _) in sorted(_modules().items())
             for s in state_of(mod, path.read_text(encoding="utf-8"))]
    assert not found, "module-level state (pass it in a Context or an argument):\n" + \
        "\n".join(found)


def test_every_allowed_cache_is_still_there() -> None:
    """An entry of ALLOWED whose name is gone would let a new state of that name in unseen."""
    mods = _modules()
    for mod, name in ALLOWED:
        assert mod in mods, mod
        assert name in mods[mod][0].read_text(encoding="utf-8"), (mod, name)


def test_the_scan_finds_each_kind_of_state() -> None:
    """The detector itself: each kind of module state it is meant to refuse, and what it lets be
    (a function's own list, a module-level constant only read)."""
    src = '''
import functools
from contextvars import ContextVar
SETTINGS = Settings()
_ACTIVE: list = []
_SEEN = {}
COUNT = 0
LIMITS = {"a": 1}
VAR = ContextVar("v")

def configure(q):
    SETTINGS.quiet, SETTINGS.no_color = q, q

def push(p):
    _ACTIVE.append(p)

def remember(k):
    _SEEN[k] = 1

def bump():
    global COUNT
    COUNT += 1

class Registry:
    items = []

def register(x):
    Registry.items.append(x)

@functools.lru_cache
def cached(x):
    return x

def fine(LIMITS):
    LIMITS["a"] = 2
    out = []
    out.append(LIMITS["a"])
    return out
'''
    got = "\n".join(state_of("m", src))
    for name, what in [("SETTINGS", "assigned"), ("_ACTIVE", ".append"), ("_SEEN", "assigned"),
                       ("COUNT", "global"), ("VAR", "ContextVar"), ("cached", "cache"),
                       ("Registry", ".append")]:
        assert f"m {name}: " in got and what in got.split(f"m {name}: ", 1)[1], (name, got)
    assert "LIMITS" not in got and " out" not in got, got
