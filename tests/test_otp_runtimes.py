"""The OTP 27 and 29 runtimes `make setup` provisions (docs/erts/releases.md §1): a second run
changes nothing, each holds the release its stamp names with erl, erlc, tools and runtime_tools,
and a node started in one is the release it claims."""

from __future__ import annotations

import os
import subprocess

import otp
import pytest

CHROOTS = ("27", "29")


def test_a_second_make_does_nothing() -> None:
    if any(otp.missing(r) for r in CHROOTS):
        pytest.skip(next(why for r in CHROOTS if (why := otp.missing(r))))
    stamps = [otp.CACHE / f"otp{r}" / ".beamalloc-ready" for r in CHROOTS]
    before = [s.stat().st_mtime_ns for s in stamps]
    r = subprocess.run(["make", "-s", "otp-runtimes", f"OTP_CACHE={otp.CACHE}"], cwd=otp.ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "" and "provisioning" not in r.stderr
    assert [s.stat().st_mtime_ns for s in stamps] == before
    assert not any((otp.CACHE / f"otp{r}.tmp").exists() for r in CHROOTS)


@pytest.mark.live
@pytest.mark.parametrize("release", otp.release_params(CHROOTS))
def test_the_runtime_is_its_release(release: str) -> None:
    root = otp.runtime(release).root
    assert root is not None and (root / ".beamalloc-ready").read_text().strip() == release
    libs = {p.name.split("-")[0] for p in (root / "usr/lib/erlang/lib").iterdir()}
    assert {"kernel", "stdlib", "compiler", "tools", "runtime_tools"} <= libs
    assert os.path.ismount(root / "proc")
    ebin = otp.compile_workload(release, "healthy")  # its own erlc
    assert (root / ebin.lstrip("/") / "healthy.beam").exists()
    with otp.start_node(release=release) as n:
        got = n.eval("{erlang:system_info(otp_release), code:which(instrument) =/= "
                     "non_existing, os:getpid()}")
        assert got.strip() == f'{{"{release}",true,"{n.pid}"}}'
        assert os.readlink(f"/proc/{n.pid}/root") == str(root)
