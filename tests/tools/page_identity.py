"""Byte-identity of the web UI's pages and API answers for refactors (issue 27 item 1): the
snapshot page, its JSON, what-if and the HTML report of every sample (a cut RabbitMQ dump for the
PARTIAL line), and the node pages of a synthetic store, stored or compared byte for byte.

    .venv/bin/python tests/tools/page_identity.py capture DIR   # at the base commit
    .venv/bin/python tests/tools/page_identity.py check DIR     # after: exit 1 on any difference

Upload refs, times of reading and the report's writing time are masked before comparing, and
so is what differs between two checkouts (tests/tools/identity.py: a time taken from a sample
file's modification time, the checkout's path in the report's links to the docs). With
BYTE_IDENTITY_PYTHONPATH (the base's packages laid out as byte_identity.py says) the tool runs
itself again on them, under `python -S`.
Not part of `make test` (what-if replays take seconds per sample).
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import identity

identity.reexec_on_base()
identity.check_base()
ROOT = identity.ROOT
sys.path[:0] = [str(ROOT / "tests")]

from browser.synth import build_store  # noqa: E402

from beamalloc.analyzer.analysis import analyze  # noqa: E402
from beamalloc.collector.sources import read_file  # noqa: E402
from beamalloc.htmlreport.html import render_report  # noqa: E402
from beamalloc.webui.app import create_app  # noqa: E402

RABBIT = (ROOT.parent / "shared" / "samples" / "real-dumps"
          / "henok-projects__Smart-home-system-__rabbitmq_scripts_ubuntu_erl_crash.dump.dump")
WHATIF = ("binspike.json", "frag.json", "healthy.json")


def sources(tmp: Path) -> list[Path]:
    out = sorted(p for p in (ROOT / "samples" / "otp25").glob("*") if p.name != "README.md")
    out += sorted((ROOT / "samples" / "workloads" / "snapshots").glob("*.json"))
    if RABBIT.is_file():
        cut = tmp / "cut.dump"
        cut.write_bytes(RABBIT.read_bytes()[:60_000])
        out.append(cut)
    return out


def outputs(tmp: Path) -> dict[str, bytes]:
    store = tmp / "watch.db"
    if not store.exists():
        build_store(store, node="app@web1", days=0.5)
    c = create_app(store, upload_limit=64 << 20).test_client()
    out: dict[str, bytes] = {}
    for url in ("/", "/node?n=app%40web1", "/snapshot/s1", "/api/snapshot/s1",
                "/api/nodes", "/compare?a=s1&b=s2", "/whatif?r=s1"):
        out["store" + re.sub(r"\W", "_", url)] = c.get(url).data
    for src in sources(tmp):
        r = c.post("/upload", data={"file": (io.BytesIO(src.read_bytes()), src.name)})
        loc = r.headers.get("Location", "")
        ref = loc.rsplit("/", 1)[-1]
        if not ref:
            out[f"upload_{src.name}"] = r.data
            continue
        urls = [f"/snapshot/{ref}", f"/api/snapshot/{ref}"]
        urls += [f"/whatif?r={ref}"] if src.name in WHATIF else []
        for url in urls:
            out[f"{src.name}_{url.split('/')[1].split('?')[0]}_{url.split('/')[-2]}"] = (
                c.get(url).data.replace(ref.encode(), b"REF"))
        snap = read_file(str(src))
        rep = render_report([analyze(snap)], [snap])
        out[f"{src.name}_report"] = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "WHEN",
                                           rep).encode()
    return out


def mask(page: bytes) -> bytes:
    """Upload refs (random) and read times of sources without one (now) vary from run to run."""
    page = re.sub(rb"u[0-9a-f]{32}", b"uREF", page)
    page = re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", b"TIME", page)
    return re.sub(rb'"taken_unix": ?[0-9.]+', b'"taken_unix":0', page)


def main() -> int:
    mode, d = sys.argv[1], Path(sys.argv[2])
    (d / "tmp").mkdir(parents=True, exist_ok=True)
    # the cut dump is written in tmp each run, and a dump's time is its own, never the file's
    files = [p for p in sources(d / "tmp") if d / "tmp" not in p.parents]
    masks = identity.mtime_masks(files) + identity.path_masks()
    got = {n: identity.masked(mask(b), masks) for n, b in outputs(d / "tmp").items()}
    total, bad, digest = identity.compare(mode, d, sorted(got.items()), "pages", "pdiff")
    print(f"{mode}: {total} pages, {bad} differ; digest {digest}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
