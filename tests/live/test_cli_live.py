"""What the README promises about nodes, through the CLI as users run it, on real nodes: the live
path of analyze, recommend, report and snapshot with --cookie-file and --timeout; exit code 3
(one line) for a node that cannot be reached, a wrong cookie and a timeout; the cookie in no
argv, log line or store of watch; and a target left as it was by a snapshot."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from pathlib import Path

import pytest
from support import SecretWatch, run_cli

from beamalloc.collector.terms import parse_term

pytestmark = pytest.mark.live

COMMANDS = ("analyze", "recommend", "report", "snapshot")


def _env(home: Path) -> dict[str, str]:
    """No cookie but the --cookie-file one: no $BEAMALLOC_COOKIE, no ~/.erlang.cookie."""
    env = {k: v for k, v in os.environ.items() if k != "BEAMALLOC_COOKIE"}
    env["HOME"] = str(home)
    return env


def _cookie_file(tmp_path: Path, cookie: str) -> str:
    f = tmp_path / "cookie"
    f.write_text(cookie + "\n")
    f.chmod(0o600)
    return str(f)


def _args(command: str, node: str, tmp_path: Path) -> list[str]:
    out = {"analyze": ["--json"], "recommend": ["--json", "--no-predict"],
           "report": ["-o", str(tmp_path / "r.html")],
           "snapshot": ["-o", str(tmp_path / "s.json")]}[command]
    return [command, node, *out]


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("beamalloc: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_live_path_with_cookie_file_and_timeout(command, target, tmp_path) -> None:
    f = _cookie_file(tmp_path, target.cookie)
    r = run_cli(*_args(command, target.node, tmp_path), "--cookie-file", f, "--timeout", "30",
                env=_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert target.cookie not in r.stdout + r.stderr
    if command in ("analyze", "recommend"):
        doc = json.loads(r.stdout)
        assert doc["node"] == target.node and doc["source"] == "live"
        assert doc["schedulers"] == 4  # the target runs +S 4
        if command == "analyze":
            assert doc["os_pid"] == target.pid
    elif command == "snapshot":
        doc = json.loads((tmp_path / "s.json").read_text())
        assert doc["node"] == target.node and doc["os_pid"] == target.pid
        assert target.cookie not in (tmp_path / "s.json").read_text()
    else:
        page = (tmp_path / "r.html").read_text()
        assert target.node in page and target.cookie not in page


@pytest.mark.parametrize("command", COMMANDS)
def test_exit_code_3_no_such_node_and_host(command, target, tmp_path) -> None:
    f = _cookie_file(tmp_path, target.cookie)
    host = target.node.split("@")[1]
    name = f"nobody_{secrets.token_hex(3)}"
    r = run_cli(*_args(command, f"{name}@{host}", tmp_path), "--cookie-file", f,
                env=_env(tmp_path))
    assert r.returncode == 3
    assert _one_line(r).startswith(f"beamalloc: no node named {name} on host {host}")
    r = run_cli(*_args(command, "someone@nohost.invalid", tmp_path), "--cookie-file", f,
                env=_env(tmp_path))
    assert r.returncode == 3
    assert _one_line(r).startswith("beamalloc: cannot reach epmd on host nohost.invalid")
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_exit_code_3_wrong_cookie(command, target, tmp_path) -> None:
    wrong = f"W{secrets.token_hex(10)}"
    r = run_cli(*_args(command, target.node, tmp_path), "--cookie-file",
                _cookie_file(tmp_path, wrong), env=_env(tmp_path))
    assert r.returncode == 3
    line = _one_line(r)
    assert "authentication failed" in line
    assert wrong not in r.stdout + r.stderr and target.cookie not in r.stdout + r.stderr


def test_exit_code_3_timeout(node_factory, tmp_path) -> None:
    """A node that accepts the connection and never answers: --timeout is what ends it."""
    n = node_factory()
    os.kill(n.pid, signal.SIGSTOP)
    f = _cookie_file(tmp_path, n.cookie)
    for command in COMMANDS:
        r = run_cli(*_args(command, n.node, tmp_path), "--cookie-file", f, "--timeout", "2",
                    env=_env(tmp_path))
        assert r.returncode == 3, (command, r.stderr)
        line = _one_line(r)
        assert line.startswith("beamalloc: timed out after 2 s") and n.node in line, command


def test_no_cookie_anywhere_is_exit_code_2(target, tmp_path) -> None:
    r = run_cli("analyze", target.node, env=_env(tmp_path))
    assert r.returncode == 2
    assert "no cookie: pass --cookie-file" in _one_line(r)


def test_watch_keeps_the_cookie_out_of_argv_logs_and_store(target, tmp_path) -> None:
    db = tmp_path / "w.db"
    f = _cookie_file(tmp_path, target.cookie)
    with SecretWatch(target.cookie, skip=target.pid) as watch:
        # Through the hidden node, the one process besides ours that holds the cookie.
        r = run_cli("watch", target.node, "--store", str(db), "--cookie-file", f,
                    "--interval", "0.5", "--duration", "4",
                    env={**_env(tmp_path), "BEAMALLOC_HIDDEN_NODE": "1"})
    assert r.returncode == 0, r.stderr
    assert watch.seen, "the poller never saw watch's hidden node (nothing was checked)"
    assert watch.leaks == []
    assert "samples written" in r.stderr and target.cookie not in r.stdout + r.stderr
    stored = [p for p in tmp_path.iterdir() if p.name.startswith("w.db")]
    assert stored and all(target.cookie.encode() not in p.read_bytes() for p in stored)
    from beamalloc.timeseries.store import Store

    with Store(db, readonly=True) as st:
        assert {n["node"]: n["samples"] for n in st.list_nodes()}[target.node] >= 2
        assert target.cookie not in st.latest(target.node).to_json()


STATE = ("{erpc:call(T, erlang, system_info, [atom_count]),"
         " erpc:call(T, erlang, system_info, [process_count]),"
         " lists:sort(erpc:call(T, erlang, registered, [])),"
         " lists:sort([erpc:call(T, ets, info, [X, name]) || X <- erpc:call(T, ets, all, [])]),"
         " length(erpc:call(T, ets, all, [])),"
         " lists:sort([M || {M, _} <- erpc:call(T, code, all_loaded, [])])}")

# Some BIFs create atoms on their first call in a VM's life (alloc_util builds the atoms of its
# info lists on the first system_info({allocator, A}); erlang:memory() and a few system_info
# items add a handful): the VM's own, once per node. The probe makes the same calls first.
WARM = ("{[erpc:call(T, erlang, system_info, [{allocator, A}]) || A <- [sys_alloc, mseg_alloc, "
        "erts_mmap, alloc_util | erpc:call(T, erlang, system_info, [alloc_util_allocators])]], "
        "[erpc:call(T, erlang, system_info, [I]) || I <- [otp_release, version, wordsize, "
        "schedulers]], erpc:call(T, erlang, memory, []), erpc:call(T, os, getpid, [])}")


def test_snapshot_leaves_the_target_as_it_was(node_factory, probe, tmp_path) -> None:
    """After the first, `beamalloc snapshot` adds nothing to the target: no atom (its hidden
    node's name comes back from a pool of 16, docs/robustness.md), no process, ETS table
    or registered name, no module but OTP's own `instrument` (the README: its first use loads
    it from the target's code path, with its atoms). Each probe node adds the atom of its own
    name, so the reference is two probes in a row."""
    n = node_factory()
    probe(n, WARM)
    # The first snapshot loads instrument; every later one must leave the node as it was.
    first = run_cli("snapshot", n.node, "-o", str(tmp_path / "s0.json"), "--cookie-file",
                    _cookie_file(tmp_path, n.cookie), env=_env(tmp_path))
    assert first.returncode == 0, first.stderr

    def state() -> tuple:
        return parse_term(probe(n, STATE).strip() + ".")

    s1 = state()
    s2 = state()
    r = run_cli("snapshot", n.node, "-o", str(tmp_path / "s.json"), "--cookie-file",
                _cookie_file(tmp_path, n.cookie), env=_env(tmp_path))
    assert r.returncode == 0, r.stderr
    s3 = state()
    probe_atoms = s2[0] - s1[0]
    assert probe_atoms == 1, (s1[0], s2[0])
    assert s3[0] - s2[0] == probe_atoms, "the snapshot created atoms on the target"
    assert s3[1:] == s2[1:] == s1[1:]
    assert not any(str(m).startswith("beamalloc_") for m in s3[5])  # nothing of ours loaded
    assert "instrument" in s3[5]  # the snapshot did read carriers

