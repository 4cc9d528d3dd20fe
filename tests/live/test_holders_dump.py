"""Offline holders (issue 12 item 6): a crash dump's =proc sections feed the same tables. The
dump of a real holders node names the same holders with the figures the live scan read; a
malformed section costs one line on stderr, never a traceback."""

from __future__ import annotations

import io
import re
import tempfile
import time
from pathlib import Path

import pytest

from beamalloc.advice import holders as h
from beamalloc.cli.demo import WorkloadNode
from beamalloc.collector import processes as procs
from beamalloc.collector.procdump import read_procdump

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples/otp25/erl_crash.dump"
REAL = ROOT.parent / "shared/samples/real-dumps"


@pytest.mark.live
def test_dump_of_a_holders_node_matches_the_live_scan() -> None:
    with tempfile.TemporaryDirectory() as d:
        dump = Path(d) / "erl_crash.dump"
        with WorkloadNode("holders", env={"ERL_CRASH_DUMP": str(dump), "WORKERS": "50"}) as wl:
            wl.wait_ready()
            live = procs.scan_node(wl.node, wl.cookie, timeout=60)
            assert wl.proc is not None
            from live.conftest import erl_eval

            class T:
                node, cookie = wl.node, wl.cookie
            with pytest.raises(RuntimeError):  # the node halts under the probe's call
                erl_eval(T, "erpc:call(T, erlang, halt, [\"holders test\"])")
            deadline = time.monotonic() + 60
            while wl.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        t = read_procdump(dump, err := io.StringIO())
    assert err.getvalue() == "" and t.complete and t.source == "crashdump"
    assert t.count == len(t.procs) and abs(t.count - live.count) <= 5
    dead = {p.name: p for p in t.procs if p.name}
    for name in ("leaky_router", "bin_cache"):
        a, b = dead[name], next(p for p in live.procs if p.name == name)
        assert abs(a.binary_bytes - b.binary_bytes) <= b.binary_bytes // 10, name
        assert abs(a.memory - b.memory) <= b.memory // 10, name
        assert abs(a.total_heap_bytes - b.total_heap_bytes) <= b.total_heap_bytes // 10, name
    assert dead["slow_consumer"].message_queue_len >= 100
    j = h.processes_json(t)
    assert j["top_binary"][0]["name"] == "leaky_router" and j["gc_probe"] is None
    assert j["top_binary"][0]["binary_count"] is None  # a dump has no binary addresses
    assert any(f["rule"] == "H3" and f["name"] == "slow_consumer" for f in j["findings"])
    assert any(f["rule"] == "H2" for f in j["findings"])
    # a dump cannot tell dead references from live ones: said, and nobody is called a cache
    router = next(f for f in j["findings"] if f["rule"] == "H1" and f["name"] == "leaky_router")
    assert router["level"] == "info" and router["evidence"]["holder"]["kind"] == "unknown"
    said, _ = h.verdict_holders(j, [])
    assert "live" not in " ".join(said)


def test_malformed_sections_are_one_line_each(tmp_path: Path) -> None:
    text = SAMPLE.read_text(encoding="latin-1")
    starts = [m.start() for m in re.finditer(r"^=proc:", text, re.M)]
    assert len(starts) >= 10
    # section 3 loses its heap line, section 5 gets a bad number, section 7 a bad pid, and the
    # file is cut inside the last section
    cut = text[: starts[-1] + 40]
    sec3 = cut.index("Stack+heap:", starts[3])
    cut = cut[:sec3] + "Stack-heap: 1\n" + cut[cut.index("\n", sec3) + 1:]
    sec5 = cut.index("OldHeap:", cut.index("=proc:", sec3 + 1))
    cut = cut[:sec5] + "OldHeap: 12x\xff\n" + cut[cut.index("\n", sec5) + 1:]
    sec7 = [m.start() for m in re.finditer(r"^=proc:", cut, re.M)][7]
    cut = cut[:sec7] + "=proc:<0.x\x00.0>" + cut[cut.index("\n", sec7):]
    bad = tmp_path / "erl_crash.dump"
    bad.write_bytes(cut.encode("latin-1"))
    t = read_procdump(bad, err := io.StringIO())
    lines = err.getvalue().splitlines()
    assert len(lines) == 4 and all(x.startswith("beamalloc: skipped the process section at line")
                                   for x in lines)
    assert "\xff" not in err.getvalue() and "\x00" not in err.getvalue()  # never the file's bytes
    assert t.count == len(starts) and t.scanned == len(starts) - 4 and not t.complete
    assert any("4 of" in n for n in t.notes)


def test_every_process_of_the_real_dumps_reads() -> None:
    if not REAL.is_dir():
        pytest.skip(f"{REAL} not present (the shared real crash dumps)")
    n = 0
    for dump in sorted(REAL.iterdir()):
        t = read_procdump(dump, err := io.StringIO())
        assert err.getvalue() == "", dump.name
        assert all(p.total_heap_bytes >= 0 and p.memory > 0 for p in t.procs), dump.name
        n += t.scanned
    assert n > 500


def test_web_upload_of_a_dump_shows_its_holders() -> None:
    """The web UI reads an uploaded crash dump's =proc sections too: the snapshot page and its
    analysis JSON carry them (the same partial as the HTML report)."""
    from beamalloc.webui.app import create_app

    c = create_app(None).test_client()
    r = c.post("/upload", data={"file": (io.BytesIO(SAMPLE.read_bytes()), "erl_crash.dump")})
    assert r.status_code == 303
    ref = r.headers["Location"].rsplit("/", 1)[1]
    page = c.get(f"/snapshot/{ref}").data.decode()
    assert "Who holds the memory" in page and "code_server" in page
    a = c.get(f"/api/snapshot/{ref}").get_json()
    assert a["processes"]["count"] == 38 and a["processes"]["top_heap"][0]["name"] == "code_server"
    r = c.post("/upload", data={"file": (io.BytesIO((ROOT / "samples/otp25/recon_snapshot.txt")
                                                    .read_bytes()), "n.txt")})
    ref = r.headers["Location"].rsplit("/", 1)[1]
    # a recon file has no process scan: the section says so instead of listing processes
    page = c.get(f"/snapshot/{ref}").data.decode()
    assert 'id="holders-none"' in page and "carries no process scan" in page
    assert "code_server" not in page
