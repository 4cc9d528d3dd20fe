"""What the identity tools share (tests/tools/byte_identity.py, page_identity.py): the code under
test chosen by BYTE_IDENTITY_PYTHONPATH, the masks of what differs between two checkouts of one
tree, and the capture-or-check loop over named outputs.

The base is usually run from a copy of it (its packages laid out as the installed namespace:
beamalloc/, beamalloc/collector/, ..., the built beamalloc/_refalloc*.so copied in), given in
BYTE_IDENTITY_PYTHONPATH. Two things then differ that no change of the code made:

- a time the readers take from a file's modification time (collector/sources.py: a recon file or
  a snippet has none of its own), since a copy's files are new: `mtime_masks`;
- the checkout's own path, in the report's links to the installed docs (citations.link):
  `path_masks`.

Both are masked, on capture and on check alike, so `check` of an unchanged tree against a capture
made from a copy says identical.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The checkout's venv, or (a copy has none) the interpreter running the tool.
PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").is_dir() else sys.executable
#: The folder of the base's packages (see the module's docstring), or None: the checkout's own.
BASE = os.environ.get("BYTE_IDENTITY_PYTHONPATH") or None


def python(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run `python ARGS` on the code under test. With BASE, `-S`
    and the venv's site-packages named on the path: the venv's .pth files stay unread, so the
    editable install's finder cannot hand out the checkout's modules for any the base lacks
    (it would mix the two trees silently)."""
    env = dict(os.environ)
    if not BASE:
        return [PY, *args], env
    env["PYTHONPATH"] = os.pathsep.join([BASE, site_packages()])
    return [PY, "-S", *args], env


def site_packages() -> str:
    """Where the interpreter's packages are (flask, rich, ...): its venv's site-packages."""
    venv = Path(PY).parent.parent
    return sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"]


def reexec_on_base() -> None:
    """In a tool that imports the code under test itself (page_identity.py): with BASE, run
    again under `python -S` on it (once: the environment says it is done)."""
    if BASE and os.environ.get("BYTE_IDENTITY_ON_BASE") != BASE:
        argv, env = python([os.path.abspath(sys.argv[0]), *sys.argv[1:]])
        env["BYTE_IDENTITY_ON_BASE"] = BASE
        os.execve(argv[0], argv, env)


def check_base() -> None:
    """Refuse to go on when the package imported is not the one BASE names (or, without BASE,
    not this checkout's): a capture of the wrong tree would say identical."""
    import beamalloc

    where = Path(beamalloc.__file__).resolve().parent
    want = Path(BASE).resolve() / "beamalloc" if BASE else ROOT / "beamalloc"
    if where != want:
        sys.exit(f"the beamalloc imported is {where}, not {want}")


def _renderings(t: float) -> list[bytes]:
    """How an output writes the time `t` (Unix seconds): the JSON's ISO form (microseconds,
    snapshot.py), the pages' and terminal's minutes and seconds, and the number itself."""
    d = datetime.fromtimestamp(t, UTC)
    out = [d.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), d.strftime("%Y-%m-%dT%H:%M:%SZ"),
           d.strftime("%Y-%m-%d %H:%M:%S"), d.strftime("%Y-%m-%d %H:%M"), repr(t)]
    return [s.encode() for s in out]


def mtime_masks(files: Iterable[Path]) -> list[tuple[re.Pattern[bytes], bytes]]:
    """Masks of every rendering of each file's modification time (longest first)."""
    found = {r for f in files for r in _renderings(f.stat().st_mtime)}
    return [(re.compile(re.escape(r)), b"MTIME") for r in sorted(found, key=len, reverse=True)]


def path_masks() -> list[tuple[re.Pattern[bytes], bytes]]:
    """The installed docs' folder of whichever checkout ran (`file:///.../docs/`)."""
    return [(re.compile(rb"file://[^\"'<>\s]*?/docs/"), b"file:///CHECKOUT/docs/")]


def masked(data: bytes, masks: list[tuple[re.Pattern[bytes], bytes]]) -> bytes:
    for pattern, repl in masks:
        data = pattern.sub(repl, data)
    return data


def compare(mode: str, d: Path, outputs: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
            store: str, diffs: str) -> tuple[int, int, str]:
    """Store (`capture`) or compare (`check`) each named output under d/STORE; a differing one
    is written to d/DIFFS and named. (outputs, differing, digest of the stored outputs)."""
    if mode not in ("capture", "check"):
        sys.exit(f"mode {mode!r}: capture or check")
    items = outputs.items() if isinstance(outputs, Mapping) else outputs
    total = bad = 0
    digest = hashlib.sha256()
    for name, got in items:
        total += 1
        ref = d / store / name
        if mode == "capture":
            ref.parent.mkdir(parents=True, exist_ok=True)
            ref.write_bytes(got)
        elif not ref.exists() or ref.read_bytes() != got:
            bad += 1
            (d / diffs).mkdir(parents=True, exist_ok=True)
            (d / diffs / name).write_bytes(got)
            print(f"DIFFERS: {name}", flush=True)
        if ref.exists():
            digest.update(ref.read_bytes())
    return total, bad, digest.hexdigest()[:16]
