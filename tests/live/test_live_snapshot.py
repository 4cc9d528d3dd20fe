"""snapshot_node() against a real node: content, read-only, and the cookie rule."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from support import SecretWatch

from beamalloc.collector import live, osinfo
from beamalloc.collector.terms import parse_term
from beamalloc.versions import ERTS_TO_OTP

pytestmark = pytest.mark.live


def _terms(out: str) -> object:
    return parse_term(out.strip() + ".")


def test_snapshot_content(any_target, probe, marker) -> None:
    """On every test release (tests/otp.py): the node's own allocators, instances and pid."""
    target = any_target
    info = _terms(probe(target, "erpc:call(T, erlang, system_info, [alloc_util_allocators])"))
    before = time.time()
    snap = live.snapshot_node(target.node, target.cookie)
    after = time.time()

    assert snap.source == "live" and snap.node == target.node
    assert snap.otp_release == target.release
    erts = int(target.release) - ERTS_TO_OTP
    assert snap.erts_version and snap.erts_version.startswith(f"{erts}."), snap.erts_version
    assert snap.wordsize == 8
    assert snap.schedulers == 4
    assert snap.os_pid == target.pid
    assert snap.rss is not None and snap.rss > 0
    assert snap.taken_at is not None and before <= snap.taken_at <= after
    assert snap.memory["total"] > 0 and snap.memory["binary"] > 0

    # Every alloc_util allocator of the target, one instance per scheduler plus instance 0;
    # literal_alloc has a single instance (docs/erts/alloc_util.md §6.1).
    assert sorted(snap.allocator_names()) == sorted(str(a) for a in info)
    for name in info:
        got = sorted(i.instance for i in snap.instances(str(name)))
        assert got == ([0] if name == "literal_alloc" else list(range(5))), name
    assert sorted(m.instance for m in snap.mseg) == list(range(5))
    assert {"sys_alloc", "erts_mmap", "alloc_util"} <= set(snap.extra)
    binary1 = snap.instances("binary_alloc")[1]
    assert binary1.mbcs.carriers_size.current > 0 and binary1.mbcs_pool is not None

    assert snap.raw is not None
    assert parse_term(snap.raw + ".")  # the whole collected term, as Erlang text


def test_read_only(target, probe, marker) -> None:
    loaded = "lists:sort([M || {M, _} <- erpc:call(T, code, all_loaded, [])])"
    before = _terms(probe(target, loaded))
    # Counters only: not even OTP's instrument (test_carriers_live.py checks the carrier path)
    live.snapshot_node(target.node, target.cookie, max_carriers=0)
    after = _terms(probe(target, loaded))
    assert not any(m.startswith("beamalloc_") for m in after)
    assert after == before


def test_cookie_never_in_argv_env_or_output(target, marker, capfd) -> None:
    # The target itself was started with -setcookie (it is the test's node, not ours).
    with SecretWatch(target.cookie, skip=target.pid) as watch:
        snap = live.snapshot_node(target.node, target.cookie)
    assert watch.seen, "the poller never saw the hidden node (nothing was checked)"
    assert watch.leaks == []
    assert target.cookie not in snap.to_json()
    out, err = capfd.readouterr()
    assert target.cookie not in out + err


def test_cookie_with_quotes_and_spaces(node_factory, marker) -> None:
    """The cookie travels hex-encoded over stdin, so any characters survive."""
    odd = node_factory(cookie="a b'c\"d\\e$(x)")
    snap = live.snapshot_node(odd.node, odd.cookie)
    assert snap.os_pid == odd.pid


def test_os_memory_beside_rss(target) -> None:
    """LazyFree (smaps_rollup) and MemAvailable beside VmRSS, read from /proc as they are."""
    snap = live.snapshot_node(target.node, target.cookie)
    rollup = Path(f"/proc/{target.pid}/smaps_rollup").read_text()
    assert snap.rss_lazyfree == osinfo.kb_field(rollup, "LazyFree")  # an idle node: unchanged
    avail = osinfo.kb_field(Path("/proc/meminfo").read_text(), "MemAvailable")
    assert snap.mem_available is not None and avail is not None
    assert abs(snap.mem_available - avail) < 0.2 * avail  # other developers share the host
    assert osinfo.os_memory(2**22 + 12345)[0] is None  # no such process: no LazyFree


def test_carrier_rate_between_two_samples(target) -> None:
    """The rate a speed trade needs: calls per second between two live samples, never lifetime
    counters; an idle node makes (almost) no carrier calls."""
    from beamalloc.advice.recommend import carrier_rate

    a = live.snapshot_node(target.node, target.cookie)
    time.sleep(1.0)
    b = live.snapshot_node(target.node, target.cookie)
    rate, why = carrier_rate(a, b)
    assert why is None and rate is not None and 0.9 < rate.seconds < 5
    assert "binary_alloc" in rate.per_allocator and rate.per_allocator["binary_alloc"] < 50
    assert carrier_rate(b, a) == (None, "the samples do not say when they were taken, or are "
                                        "out of order")  # fmt: skip


def test_rss_only_for_a_beam_of_that_node(target) -> None:
    assert osinfo.rss(target.pid, target.node) is not None
    assert osinfo.rss(target.pid, f"someone_else@{target.node.split('@')[1]}") is None
    assert osinfo.rss(os.getpid(), target.node) is None  # not a beam process
    assert osinfo.rss(2**22 + 12345, target.node) is None  # no such process


def test_recommend_a_live_node_measures_the_rate(target) -> None:
    """`recommend NODE` samples a node twice, --rate-seconds apart, only where a speed-trade
    rule fires (bigbin: R7), says so on stderr, and the verdict carries the measured rate;
    --rate-seconds 0 says why there is none; an idle node is sampled once and told why."""
    import json

    from support import run_cli

    from beamalloc.cli.demo import WorkloadNode

    with WorkloadNode("bigbin") as wl:
        wl.wait_ready()
        env = dict(os.environ, BEAMALLOC_COOKIE=wl.cookie)
        r = run_cli("recommend", wl.node, "--json", "--rate-seconds", "1", "--no-predict",
                    env=env)
        assert r.returncode == 0, r.stderr
        assert "R7 trade memory for speed: sampling" in r.stderr
        assert "--rate-seconds 0 skips it" in r.stderr
        v = json.loads(r.stdout)["verdict"]
        assert v["rate"] is not None and 0.9 <= v["rate"]["seconds"] < 5
        assert "binary_alloc" in v["rate"]["carrier_calls_per_second"]
        r = run_cli("recommend", wl.node, "--json", "--rate-seconds", "0", "--no-predict",
                    env=env)
        v = json.loads(r.stdout)["verdict"]
        assert v["rate"] is None and v["rate_unavailable"].startswith("--rate-seconds 0")
    env = dict(os.environ, BEAMALLOC_COOKIE=target.cookie)
    r = run_cli("recommend", target.node, "--json", "--rate-seconds", "1", "--no-predict",
                env=env)
    assert r.returncode == 0 and "sampling" not in r.stderr, r.stderr
    v = json.loads(r.stdout)["verdict"]
    assert v["rate"] is None and v["rate_unavailable"].startswith("no speed-trade rule fires")
    assert run_cli("recommend", target.node, "--rate-seconds", "-1", env=env).returncode == 2
