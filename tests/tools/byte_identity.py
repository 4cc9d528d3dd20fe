"""Byte-identity check for refactors (issue 11 item 8): run analyze / recommend (text and --json)
and replay on every sample and workload trace, and store or compare the outputs byte for byte.

    .venv/bin/python tests/tools/byte_identity.py capture DIR   # at the base commit
    .venv/bin/python tests/tools/byte_identity.py check DIR     # after: exit 1 on any difference
    .venv/bin/python tests/tools/byte_identity.py check DIR recon   # the outputs so named only

To capture a base commit without checking it out, lay its packages out as the installed namespace
(beamalloc/, beamalloc/collector/, ...; the built beamalloc/_refalloc*.so copied in) and pass that
folder in BYTE_IDENTITY_PYTHONPATH: every command runs on it, under `python -S` so that the
editable install cannot lend it the checkout's modules (tests/tools/identity.py, which also masks
what differs between two checkouts: times taken from a sample file's modification time).

Not part of `make test` (it takes minutes: each recommend replays its predictions). The traces
are generated once, at capture time, into DIR/traces and replayed from there on check, so a
change to the generators shows up as a replay difference of the generated trace's own, not here.
Live nodes are not used: their snapshots change from run to run.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import identity

ROOT = identity.ROOT
SHARED = ROOT.parent / "shared" / "samples" / "otp25"
#: Commands run outside the repository, so `-m` imports the installed (or given) package, not the
#: folder under the current directory.
RUN_IN = "/"


def sources() -> list[Path]:
    out = sorted((ROOT / "samples" / "otp25").glob("*"))
    out += sorted(SHARED.glob("*")) if SHARED.is_dir() else []
    out += sorted((ROOT / "samples" / "workloads" / "snapshots").glob("*.json"))
    return [p for p in out if p.is_file() and p.name != "README.md"]


def make_traces(tdir: Path) -> list[Path]:
    tdir.mkdir(parents=True, exist_ok=True)
    code = f"""
from pathlib import Path
try:
    from beamalloc.refalloc import tracegen
except ImportError:  # before issue 11
    from beamalloc import tracegen
from beamalloc.snapshot import Snapshot
d = Path({str(tdir)!r})
tracegen.spike_and_drop(d / "spike.batr", base_live=500, churn=4000)
tracegen.large_binaries(d / "bigbin.batr", live=50, events=3000)
tracegen.ets_churn(d / "ets.batr", rows=5000, cycles=2)
snap = Snapshot.from_json(Path({str(ROOT / "samples/workloads/snapshots/frag.json")!r}).read_text())
tracegen.stationary_mix(snap, d / "frag_mix.batr", max_live=5000, max_events=20000)
"""
    argv, env = identity.python(["-c", code])
    subprocess.run(argv, check=True, cwd=RUN_IN, env=env)
    return sorted(tdir.glob("*.batr"))


def runs(traces: list[Path]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for src in sources():
        tag = ("shared_" if SHARED in src.parents else "") + f"{src.parent.name}_{src.name}"
        out.append((f"analyze_{tag}.txt", ["analyze", str(src)]))
        out.append((f"analyze_{tag}.json", ["analyze", str(src), "--json"]))
        out.append((f"recommend_{tag}.txt", ["recommend", str(src)]))
        out.append((f"recommend_{tag}.json", ["recommend", str(src), "--json"]))
        out.append((f"recommend_{tag}_rabbitmq.txt", ["recommend", str(src), "--format",
                                                      "rabbitmq", "--no-predict"]))
    for t in traces:
        out.append((f"replay_{t.name}.txt", ["replay", str(t), "--compare", "+MBas aobf",
                                             "+MBas bf +MBlmbcs 1024"]))
        out.append((f"replay_{t.name}.json", ["replay", str(t), "--flags", "+MBas aobf",
                                              "--json"]))
    return out


def run_one(args: list[str]) -> bytes:
    argv, env = identity.python(["-m", "beamalloc.cli", *args])
    env.update(COLUMNS="100", TERM="dumb")
    p = subprocess.run(argv, capture_output=True, env=env, cwd=RUN_IN)
    return b"rc=%d\n--stdout--\n%s--stderr--\n%s" % (p.returncode, p.stdout, p.stderr)


def main() -> int:
    mode, d = sys.argv[1], Path(sys.argv[2])
    here = str(Path(__file__).parent)
    argv, env = identity.python(["-c", f"import sys; sys.path.insert(0, {here!r}); "
                                 "import identity; identity.check_base()"])
    if subprocess.run(argv, env=env, cwd=RUN_IN).returncode:
        return 2
    traces = make_traces(d / "traces") if mode == "capture" else sorted(
        (d / "traces").glob("*.batr"))
    masks = identity.mtime_masks(sources()) + identity.path_masks()

    only = sys.argv[3] if len(sys.argv) > 3 else ""

    def outputs() -> Iterator[tuple[str, bytes]]:
        for name, args in runs(traces):
            if only in name:
                yield name, identity.masked(run_one(args), masks)

    total, bad, digest = identity.compare(mode, d, outputs(), "out", "diff")
    print(f"{mode}: {total} outputs, {bad} differ; baseline digest {digest}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
