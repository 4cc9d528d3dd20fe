"""What the README and docs/ promise about the CLI without a node: `analyze -` on stdin, `--top`,
the analysis JSON of docs/analysis-schema.md, and `serve` as users start it (127.0.0.1:8050,
BEAMALLOC_TOKEN)."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from support import DATA, ROOT, SAMPLES, run_cli

from beamalloc.collector.sources import read_file

SAMPLE = SAMPLES / "recon_snapshot.txt"


def _analysis(*args: str, input: bytes | None = None) -> dict:
    r = run_cli("analyze", *args, "--json", input=input)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_analyze_reads_standard_input() -> None:
    """`analyze -` reads the same file from stdin: the same analysis, bar what only a file has
    (its name as the node, its modification time as taken_at)."""
    from_file = _analysis(str(SAMPLE))
    from_stdin = _analysis("-", input=SAMPLE.read_bytes())
    differ = {k for k in from_file if from_file[k] != from_stdin[k]}
    assert differ <= {"node", "taken_at", "notes"}
    assert from_stdin["totals"] == from_file["totals"] and from_stdin["source"] == "recon"
    assert from_stdin["taken_at"] is None and from_stdin["node"] == "unknown"


@pytest.mark.parametrize("top", [1, 3, 7])
def test_top_lists_the_worst_instances(top: int) -> None:
    """--top N: the per-instance table lists the first N rows of the analysis (recon's
    fragmentation order, worst first)."""
    want = [f"{r['allocator']}[{r['instance']}]" for r in _analysis(str(SAMPLE))["allocators"]]
    r = run_cli("analyze", str(SAMPLE), "--top", str(top), "--details")
    assert r.returncode == 0, r.stderr
    assert f"worst {top} first" in r.stdout
    # the table's first part: columns that do not fit the width go to a second one, with the
    # instance names again (reporters/table.py)
    table = r.stdout.split("Per instance")[1].split("(continued)")[0]
    shown = re.findall(r"^│ (\w+\[\d+\])\s", table, flags=re.M)
    assert shown == want[:top]


def _documented_keys() -> tuple[set[str], set[str]]:
    """The top-level keys of docs/analysis-schema.md's table and the keys of an `allocators`
    row listed after it."""
    doc = (ROOT / "docs" / "analysis-schema.md").read_text()
    table, _, rows = doc.partition("Each `allocators` row:")
    top = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            top |= set(re.findall(r"`(\w+)`", line.split("|")[1]))
    row_text = rows.split("\n\n")[0]
    row_keys = set(re.findall(r"`(\w+)`", row_text)) - {"fragmentation"}  # recon's function
    return top, row_keys


def test_analysis_json_follows_its_schema_doc() -> None:
    top, row_keys = _documented_keys()
    assert len(top) > 20 and {"schema", "taken_at", "allocators"} <= top
    for source in (SAMPLE, SAMPLES / "erl_crash.dump", SAMPLES / "raw_allocator_dump.txt"):
        a = _analysis(str(source))
        assert a["schema"] == "beamalloc.analysis/1"
        assert set(a) == top, source
        for row in a["allocators"]:
            # the options named there are those "where reported"; every other key is always there
            assert set(row) - {"options"} <= row_keys and row_keys - set(row) <= {
                "as", "sbct", "lmbcs", "smbcs", "mbcgs", "mmbcs", "acul", "acful", "acnl", "cp",
                "atags", "ramv"}, (source, set(row) ^ row_keys)


def test_taken_at_is_iso_8601_utc(tmp_path: Path) -> None:
    snap = read_file(str(SAMPLE))
    snap.taken_at = 1_700_000_000.25
    f = tmp_path / "s.json"
    f.write_text(snap.to_json())
    taken = _analysis(str(f))["taken_at"]
    t = datetime.fromisoformat(taken.replace("Z", "+00:00"))
    assert t.utcoffset() == timedelta(0) and t.timestamp() == 1_700_000_000.25


def test_sbcs_to_mbcs_is_infinity_when_only_sbcs_hold_blocks(tmp_path: Path) -> None:
    """hand_recon.txt's eheap_alloc 0 with its one block moved into an SBC: recon's
    sbcs_to_mbcs is `infinity`, written "infinity" in JSON (docs/analysis-schema.md)."""
    doc = json.loads(read_file(str(DATA / "hand_recon.txt")).to_json())
    inst = next(a for a in doc["allocators"] if a["allocator"] == "eheap_alloc")
    inst["sbcs"]["blocks"], inst["mbcs"]["blocks"] = inst["mbcs"]["blocks"], {}
    inst["sbcs"]["carriers"], inst["sbcs"]["carriers_size"] = [1, 1, 1], [4096, 4096, 4096]
    f = tmp_path / "s.json"
    f.write_text(json.dumps(doc))
    a = _analysis(str(f))
    ratios = {(r["allocator"], r["instance"]): r["ratio"] for r in a["sbcs_to_mbcs"]}
    assert ratios[("eheap_alloc", 0)] == "infinity"
    assert ratios[("binary_alloc", 1)] == 0.5  # 1 SBC block against 2 MBC/pool blocks
    row = next(r for r in a["allocators"] if (r["allocator"], r["instance"]) == ("eheap_alloc", 0))
    assert row["sbcs_to_mbcs"] == "infinity"


# --- serve, started as users start it, in a network namespace of its own (port 8050 may be taken
# on a shared machine; the namespace has only its own loopback).

CLIENT = """
import sys, urllib.request, urllib.error, time
def get(path, headers={}):
    req = urllib.request.Request("http://127.0.0.1:8050" + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
deadline = time.monotonic() + 60
while True:
    try:
        first = get("/", {"Host": "localhost"})
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
print(first, get("/", {"Authorization": "Bearer " + sys.argv[1]}))
"""


def _listening(pid: int) -> set[str]:
    """LISTEN sockets in the network namespace of `pid`, as "a.b.c.d:port"."""
    out = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":
            ip, port = local.split(":")
            out.add(".".join(str(int(ip[i:i + 2], 16)) for i in (6, 4, 2, 0)) + f":{int(port, 16)}")
    return out


@pytest.mark.parametrize("token", [None, "s3cr3t-token"])
def test_serve_through_the_cli(tmp_path: Path, token: str | None) -> None:
    """`beamalloc serve`: 127.0.0.1:8050 by default; with $BEAMALLOC_TOKEN every request needs
    the token (else 401), and the printed URL carries it."""
    if os.geteuid() != 0:
        pytest.skip("a network namespace of its own needs root")
    env = {k: v for k, v in os.environ.items() if k != "BEAMALLOC_TOKEN"}
    if token:
        env["BEAMALLOC_TOKEN"] = token
    store = tmp_path / "w.db"
    proc = subprocess.Popen(
        ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable,
         "-m", "beamalloc.cli", "serve", "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "serve printed nothing"
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line == f"beamalloc: serving {store} on http://127.0.0.1:8050/" + (
            f"?token={token}" if token else ""), line
        r = subprocess.run(["nsenter", f"--net=/proc/{proc.pid}/ns/net", sys.executable, "-c",
                            CLIENT, token or "none"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        without, bearer = map(int, r.stdout.split())
        assert _listening(proc.pid) == {"127.0.0.1:8050"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if token:
        assert (without, bearer) == (401, 200)
    else:
        assert without == 200
