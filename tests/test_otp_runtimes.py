"""The OTP 27 and 29 runtimes `make setup` provisions (docs/erts/releases.md §1): a second run
changes nothing, each holds the release its stamp names with erl, erlc, tools and runtime_tools,
and a node started in one is the release it claims."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import otp
import pytest

from beamalloc.advice import rules
from beamalloc.advice.findings import facts
from beamalloc.advice.lint import lint_flags
from beamalloc.collector import live
from beamalloc.ebpf.procmem import dynamic_symbols, symbol_table

CHROOTS = ("27", "29")
ALL = (*CHROOTS, *otp.VARIANTS)  # and the same releases with their symbols (Makefile otp-sym)


def test_a_second_make_does_nothing() -> None:
    """Over the runtimes present (otp27sym is built on request only): a runtime with symbols whose
    stamp names its patches is not built again."""
    present = [r for r in ALL if not otp.missing(r)]
    if not present:
        pytest.skip(otp.missing(ALL[0]) or "")
    stamps = [otp.CACHE / f"otp{r}" / ".beamalloc-ready" for r in present]
    before = [s.stat().st_mtime_ns for s in stamps]
    r = subprocess.run(["make", "-s", "otp-sym", f"OTP_CACHE={otp.CACHE}"], cwd=otp.ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "" and "provisioning" not in r.stderr
    assert [s.stat().st_mtime_ns for s in stamps] == before
    assert not any((otp.CACHE / f"otp{r}{x}").exists() for r in ALL for x in (".tmp", ".build"))


@pytest.mark.live
@pytest.mark.parametrize("variant", otp.release_params(tuple(otp.VARIANTS)))
def test_a_symbol_runtime_is_its_debian_runtime_with_symbols(variant: str) -> None:
    """otp27sym/otp29sym: the Debian runtime's files, but a beam.smp with a .symtab built from
    the Debian version the runtime runs (docs/erts/releases.md §5); a node on it is that release
    and runs that very file."""
    release = otp.VARIANTS[variant]
    root, debian = otp.runtime(variant).root, otp.runtime(release).root
    assert root is not None and debian is not None
    (beam,) = root.glob("usr/lib/erlang/erts-*/bin/beam.smp")
    rel = beam.relative_to(root)
    assert (debian / rel).exists()  # the same erts version
    assert symbol_table(beam).source.endswith("'s .symtab")
    assert not symbol_table(debian / rel).source.endswith("'s .symtab")
    for other in ("erlexec", "erl_child_setup", "inet_gethost"):
        assert (beam.parent / other).read_bytes() == (debian / rel.parent / other).read_bytes()
    dpkg = subprocess.run(["chroot", str(debian), "dpkg-query", "-W", "-f=${Version}",
                           "erlang-base"], capture_output=True, text=True, check=True).stdout
    stamp = (root / ".beamalloc-sym").read_text().splitlines()
    assert stamp[0].startswith(f"erlang {dpkg} ({rel.parts[3]})")
    # Debian's patches, in its series order, or the one line that says why not
    assert re.fullmatch(r"patches: ([\w.+-]+\.(patch|diff) )+\(debian/patches/series, applied by "
                        r"dpkg-source\)|patches: none: the mirror served no \.dsc, .*", stamp[1])
    # built as Debian builds it: the same libraries, link flags and exported symbols
    assert _dynamic(beam) == _dynamic(debian / rel)
    assert dynamic_symbols(beam).keys() == dynamic_symbols(debian / rel).keys()
    with otp.start_node(release=variant) as n:
        got = n.eval("{erlang:system_info(otp_release), erlang:system_info(version)}").strip()
        assert got == f'{{"{release}","{rel.parts[3].removeprefix("erts-")}"}}'
        assert os.readlink(f"/proc/{n.pid}/exe") == str(beam)


def _dynamic(binary: Path) -> list[str]:
    """The NEEDED libraries and FLAGS of `binary`'s dynamic section, as readelf prints them."""
    out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True,
                         check=True).stdout
    return [ln.split(None, 2)[2] for ln in out.splitlines() if "(NEEDED)" in ln or "(FLAGS" in ln]


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


def _erts(release: str) -> tuple[int, ...]:
    """The erts version of `release`'s runtime, from its erts-X.Y.Z directory."""
    root = otp.runtime(release).root or Path("/")
    (d,) = (root / "usr/lib/erlang").glob("erts-*")
    return tuple(int(x) for x in d.name.removeprefix("erts-").split("."))


#: OTP 26-29's knobs (docs/erts/releases.md §4), each with what the node says once it is in
#: force: an Erlang expression that is `true` then.
KNOBS = {
    "+MMlp on +MMscs 64": "element(2, lists:keyfind(scs, 1, element(2, lists:keyfind(options, 1, "
                          "element(2, lists:keyfind(default_mmap, 1, "
                          "erlang:system_info({allocator, erts_mmap}))))))) > 0",
    # umadtn is in no system_info: the node starts with it (test_madtn_... measures it)
    "+Mumadtn true +MBacful de": "lists:keyfind(acful, 1, element(2, lists:keyfind(options, 1, "
                                 "element(3, lists:keyfind(1, 2, "
                                 "erlang:system_info({allocator, binary_alloc})))))) =/= "
                                 "{acful, 0}",
    "+hmax 100000000 +hmaxib true": "maps:get(include_shared_binaries, "
                                    "erlang:system_info(max_heap_size), absent) =:= true",
}


@pytest.mark.live
@pytest.mark.parametrize("flags", list(KNOBS))
@pytest.mark.parametrize("release", otp.release_params())
def test_the_lint_release_gate_is_what_the_node_does(release: str, flags: str) -> None:
    """The lint's release check says a knob is unknown (or ignored) exactly where the node of that
    release refuses to start with it or starts without it in force."""
    gated = "release" in [i.check for i in lint_flags(flags, erts=_erts(release))]
    try:
        node = otp.start_node(flags.split(), release=release)
    except RuntimeError:  # erts printed `bad "M?" parameter` and exited
        in_force = False
    else:
        with node:
            in_force = node.eval(KNOBS[flags]).strip() == "true"
    assert gated is not in_force, (release, flags, gated)


#: How far the RSS of a restart with +Mumadtn true may land from R10's prediction: the prediction
#: comes from another run of the same workload, and runs differ (binspike under acful on OTP 29:
#: RSS 144-150 MB and LazyFree 38-52 MB without madtn, 94-104 MB with it); seven pairs measured
#: -11.7 to +4.9 % off, median -1.2 % (docs/erts/releases.md §4) [measured]. 25 %: twice the
#: worst pair, still far from a model that got madtn wrong (RSS unchanged: +50 % here), so a
#: loaded CI machine does not fail a right prediction.
MADTN_TOLERANCE = 0.25


def _rollup(pid: int) -> tuple[int, int]:
    """(Rss, LazyFree) of a process in KiB, from its smaps_rollup."""
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    kb = {ln.split(":")[0]: int(ln.split()[1]) for ln in rollup}
    return kb["Rss"], kb["LazyFree"]


def _settled(pid: int, timeout: float = 20.0) -> None:
    """Wait until the node's RSS and LazyFree hold still for a second: "ready" comes once the
    workers collected, but the carriers they emptied reach the pool, and have their free pages
    discarded, as their schedulers get to them (a snapshot read before had no LazyFree yet)."""
    deadline, last, still = time.monotonic() + timeout, None, 0
    while time.monotonic() < deadline and still < 4:
        now = _rollup(pid)
        still = still + 1 if now == last else 0
        last = now
        time.sleep(0.25)


def _madtn_pair(release: str) -> tuple[int | None, dict[str, tuple[int, int]]]:
    """One run of binspike's dropped burst without +Mumadtn and one with it: R10's prediction
    for the restart (kB), made from a live snapshot of the first, and each run's settled
    (Rss, LazyFree)."""
    seen, predicted = {}, None
    for madtn in ("false", "true"):
        n = otp.start_workload(release, "binspike", env={"BURST": "40000"},
                               flags=["+MBacul", "60", "+MBacful", "50", "+Mumadtn", madtn])
        try:
            n.wait_ready()
            _settled(n.pid)
            if madtn == "false":
                f = facts(live.snapshot_node(n.node, n.cookie, timeout=60.0, max_carriers=0))
                [x] = [x for x in rules.r10_pool_bloat(f) if "rss_with_madtn" in x.evidence]
                predicted = x.evidence["rss_with_madtn"] >> 10
            seen[madtn] = _rollup(n.pid)
        finally:
            n.stop()
    return predicted, seen


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.parametrize("release", otp.release_params(("29",)))
def test_madtn_gives_acful_pages_back_at_once(release: str) -> None:
    """+Mumadtn true (OTP 28.1): the free pages acful discards leave RSS at once instead of
    staying as LazyFree (docs/erts/releases.md §4). binspike's dropped burst under
    `+MBacul 60 +MBacful 50`, measured in the node's smaps_rollup once it settled; R10's
    prediction for the restart, made from a live snapshot of the node without it (RSS less its
    LazyFree), is what the restart with it measures, within MADTN_TOLERANCE. The prediction and
    the measure come from two runs of the workload, and runs differ: a pair off by more is
    measured once more (a clean-clone run met one: both runs' RSS far below the others', -34 %),
    and the second pair must hold. A model that got madtn wrong fails both."""
    for _ in range(2):
        predicted, seen = _madtn_pair(release)
        (rss_free, lazy_free), (rss_dontneed, lazy_dontneed) = seen["false"], seen["true"]
        assert lazy_free > 16 << 10, seen  # MADV_FREE: tens of MB resident but reclaimable
        assert lazy_dontneed < lazy_free / 20, seen  # MADV_DONTNEED: gone from RSS
        assert rss_dontneed < rss_free - lazy_free / 2, seen
        assert predicted is not None and predicted < rss_free - (16 << 10)
        off = abs(rss_dontneed - predicted)
        if off <= MADTN_TOLERANCE * predicted:
            return
    raise AssertionError(f"two pairs off by more than {MADTN_TOLERANCE:.0%}: the last "
                         f"predicted {predicted} kB, measured {seen}")


@pytest.mark.live
@pytest.mark.parametrize("release", otp.release_params())
def test_processes_iterator_from_otp_28(release: str) -> None:
    """erlang:processes_iterator/0 (OTP 28.0, OTP-19369): what a process scan could walk the
    table with instead of building the list of every pid; exported from OTP 28 on."""
    with otp.start_node(release=release) as n:
        got = n.eval("erlang:function_exported(erlang, processes_iterator, 0)").strip()
    assert got == ("true" if _erts(release) >= (16, 0) else "false")
