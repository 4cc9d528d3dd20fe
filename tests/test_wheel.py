"""The wheel installs and runs where operators work (issue 15, item 6; docs/install.md).

`python -m build --wheel` once per module (cargo's refalloc/target reused, so not a cold Rust
build), then `pipx install` of that wheel (Debian's pipx, `make setup` installs it) into a fresh
PIPX_HOME and PIPX_BIN_DIR, with a PATH built from scratch: pipx's bin directory and a folder of
symlinks to /usr/bin without any compiler or Rust tool. Every command then runs from that install,
in a scratch directory, against a sample file, a real node this module starts and a store `watch`
writes; `trace` once with Debian's bcc (it compiles the shipped BPF sources) and once with bcc
hidden (a private mount namespace), where it must say what it needs in one line; `analyze` and
`recommend` as nobody from the root-owned install. Nothing may be written inside the package.

About 1 to 2 minutes on the shared machine: the wheel 3-25 s with cargo's target warm (90 s when
the extension must relink under load), pipx 15-40 s (dependencies from the pip cache), the
commands about 40 s, removing pipx's venv the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from beamalloc import citations

pytestmark = [pytest.mark.slow, pytest.mark.live]

ROOT = Path(__file__).resolve().parent.parent
HOST = socket.gethostname().split(".")[0]
#: Debian's bcc module; ebpf/kernel.py loads it from here even inside pipx's environment.
BCC_DIST = Path("/usr/lib/python3/dist-packages/bcc")
#: Compilers, linkers and Rust tools (any target prefix or version suffix): not on the PATH the
#: installed commands see.
TOOLCHAIN = re.compile(r"^(?:[\w.]+-)*(?:gcc|g\+\+|cc|c\+\+|c89|c99|cpp|clang|clang\+\+|tcc|"
                       r"ld|ld\.\w+|as|rustc|rustdoc|rustup|cargo)(?:-[\d.]+)?$")  # fmt: skip
FORBIDDEN = ("cargo", "rustc", "gcc", "cc", "clang", "c++", "g++", "ld", "as")
SAMPLE = ROOT / "samples/workloads/snapshots/frag.json"  # a fragmented binary_alloc
RECON = ROOT / "samples/otp25/recon_snapshot.txt"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build", reason="make setup installs `build` (the test extra)")
    out = tmp_path_factory.mktemp("dist")
    cargo_bin = Path.home() / ".cargo" / "bin"
    # The isolated build env's interpreter has a new path each time, and pyo3 rebuilds when
    # PYO3_PYTHON changes: pin it to ours (same CPython minor), so cargo finds the crate fresh.
    env = dict(os.environ, CARGO_TARGET_DIR=str(ROOT / "refalloc" / "target"),
               PYO3_PYTHON=sys.executable,
               PATH=f"{cargo_bin}{os.pathsep}{os.environ.get('PATH', '')}")  # fmt: skip
    if not shutil.which("cargo", path=env["PATH"]):
        pytest.skip("building the wheel needs cargo (make setup: rustup)")
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
                       capture_output=True, text=True, env=env, timeout=1200, cwd=ROOT)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    (whl,) = out.glob("beamalloc-*.whl")
    return whl


def _clean_bin() -> Path:
    """/usr/bin as symlinks, less every compiler and Rust tool (erl, erlc and setpriv stay). In
    a world-readable folder: run as root, snapshot starts its hidden node as nobody, through it."""
    where = Path(tempfile.mkdtemp(prefix="beamalloc-wheel-bin-"))
    where.chmod(0o755)
    for p in Path("/usr/bin").iterdir():
        if not TOOLCHAIN.match(p.name):
            (where / p.name).symlink_to(p)
    return where


@dataclass
class Install:
    env: dict[str, str]
    work: Path  # the scratch directory every command runs in
    package: Path  # the installed beamalloc package, in pipx's venv
    python: Path  # that venv's interpreter

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["beamalloc", *args], capture_output=True, text=True,
                              env=self.env, cwd=self.work, timeout=timeout,
                              stdin=subprocess.DEVNULL)  # fmt: skip


def _files(package: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(package)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[Install, dict[str, tuple[int, int]]]]:
    pipx = Path("/usr/bin/pipx")
    if not pipx.is_file():
        pytest.skip("needs Debian's pipx (make setup installs it)")
    # World-readable, like a root-owned install others run (pytest's own tmp is root-only).
    base = Path(tempfile.mkdtemp(prefix="beamalloc-wheel-"))
    base.chmod(0o755)
    usr_bin = _clean_bin()
    pip_cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env = {"HOME": str(Path.home()), "LANG": "C.UTF-8", "TERM": "dumb", "COLUMNS": "100",
           "PATH": f"{base / 'bin'}{os.pathsep}{usr_bin}",
           "PIPX_HOME": str(base / "home"), "PIPX_BIN_DIR": str(base / "bin"),
           "PIP_CACHE_DIR": pip_cache,  # dependencies from the cache when there
           "XDG_CACHE_HOME": str(base / "cache"), "XDG_DATA_HOME": str(base / "data")}  # fmt: skip
    for tool in FORBIDDEN:
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    for tool in ("erl", "erlc", "python3"):
        assert shutil.which(tool, path=env["PATH"]), tool
    r = subprocess.run([str(pipx), "install", str(wheel)], capture_output=True, text=True,
                       env=env, timeout=600, cwd=base)
    if r.returncode != 0:
        shutil.rmtree(usr_bin, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert shutil.which("beamalloc", path=env["PATH"]) == str(base / "bin" / "beamalloc")
    python = base / "home" / "venvs" / "beamalloc" / "bin" / "python"
    (site,) = (base / "home" / "venvs" / "beamalloc" / "lib").glob("python3*/site-packages")
    work = base / "work"
    work.mkdir()
    inst = Install(env, work, site / "beamalloc", python)
    try:
        yield inst, _files(inst.package)
    finally:
        shutil.rmtree(usr_bin, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Node:
    name: str
    cookie_file: Path
    proc: subprocess.Popen[bytes]

    @property
    def node(self) -> str:
        return f"{self.name}@{HOST}"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A real node to snapshot (started with the test's own PATH; beamalloc's hidden node is
    started by the installed command with the clean one)."""
    name, cookie = f"wheel_{secrets.token_hex(4)}", f"C{secrets.token_hex(12)}"
    cookie_file = tmp_path_factory.mktemp("cookie") / "cookie"
    cookie_file.write_text(cookie)
    cookie_file.chmod(0o600)
    proc = subprocess.Popen(["erl", "-sname", name, "-setcookie", cookie, "-noshell"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    n = Node(name, cookie_file, proc)
    try:
        deadline = time.monotonic() + 30
        while f"name {name} at port" not in subprocess.run(
                ["epmd", "-names"], capture_output=True, text=True).stdout:
            assert proc.poll() is None and time.monotonic() < deadline, "node did not start"
            time.sleep(0.1)
        yield n
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_the_wheel_holds_the_extension_the_agent_the_bpf_sources_and_the_docs(
        wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert [n for n in names if re.fullmatch(r"beamalloc/_refalloc\.cpython-3\d+-.*\.so", n)]

    def shipped(pattern: str, to: str) -> set[str]:
        found = {f"{to}/{p.relative_to(ROOT / pattern.split('/')[0])}"
                 for p in ROOT.glob(pattern)}  # fmt: skip
        assert found, pattern
        return found

    want = (shipped("collector/erlang/*.erl", "beamalloc/collector")
            | shipped("ebpf/*.bpf.c", "beamalloc/ebpf") | shipped("ebpf/*.bpf.h", "beamalloc/ebpf")
            | shipped("docs/*.md", "beamalloc/docs") | shipped("docs/erts/*.md", "beamalloc/docs")
            | shipped("docs/erts/*.tsv", "beamalloc/docs")
            | shipped("samples/workloads/*.erl", "beamalloc/samples")
            | shipped("webui/templates/*.html", "beamalloc/webui"))  # fmt: skip
    assert want - names == set()
    assert not [n for n in names if n.endswith((".rs", "Cargo.toml")) or n.startswith("tests/")]
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "Requires-Python: >=3.11" in zipfile.ZipFile(wheel).read(meta).decode()


def test_the_installed_modules_are_compiled(installed: tuple[Install, dict]) -> None:
    """pipx (pip) compiles the wheel's modules when it installs them, so a command reads
    bytecode rather than compiling every module it imports on every run (cli/main.py,
    "Startup")."""
    inst, _ = installed
    for mod in ("__init__", "console", "limits", "cli/main", "reporters/analyze",
                "analyzer/analysis"):
        folder, name = (inst.package / mod).parent, (inst.package / mod).name
        assert list((folder / "__pycache__").glob(f"{name}.*.pyc")), mod


def test_help_and_the_command_list(installed: tuple[Install, dict]) -> None:
    inst, _ = installed
    r = inst.run("--help")
    assert r.returncode == 0, r.stderr
    for cmd in ("snapshot", "watch", "analyze", "recommend", "report", "replay", "serve",
                "trace", "snippet", "demo"):  # fmt: skip
        assert re.search(rf"^\s+{cmd}\b", r.stdout, re.M), cmd
    r = inst.run("snippet")
    assert r.returncode == 0 and "erlang:system_info" in r.stdout, r.stderr


def test_the_installed_code_and_docs_are_the_ones_used(installed: tuple[Install, dict]) -> None:
    """Every citation our output prints resolves in the installed docs (tests/citation_check.py
    run by the installed interpreter, away from the checkout)."""
    inst, _ = installed
    r = subprocess.run([str(inst.python), str(ROOT / "tests" / "citation_check.py")],
                       capture_output=True, text=True, env=inst.env, cwd=inst.work, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"docs {inst.package / 'docs'};" in r.stdout


def test_analyze_and_recommend_a_sample(installed: tuple[Install, dict]) -> None:
    inst, _ = installed
    r = inst.run("analyze", str(RECON))
    assert r.returncode == 0, r.stderr
    assert "usage" in r.stdout and "Traceback" not in r.stderr
    # the lint's citations are in the --details output (the default is the short answer)
    r = inst.run("recommend", str(SAMPLE), "--flags-in-use", "+MBas bf +MBacul 50", "--details")
    assert r.returncode == 0, r.stderr
    assert "binary_alloc" in r.stdout
    # Citations link to the installed docs, with the section's anchor (the lint's on as/acul).
    links = re.findall(r"<file://([^#>]+)#([\w-]+)>", r.stdout)
    assert links, r.stdout[-2000:]
    for path, anchor in links:
        assert Path(path).is_file() and Path(path).is_relative_to(inst.package / "docs"), path
        heads = re.findall(r"^#+ (.+)$", Path(path).read_text(), re.M)
        assert anchor in {citations.slug(h) for h in heads}, (path, anchor)
    assert (str(inst.package / "docs/erts/tuning.md"),
            "02-flag-interactions-the-recommender-must-lint") in links
    r = inst.run("recommend", str(SAMPLE), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"]["state"] and doc["node"]


def test_replay_runs_the_compiled_core(installed: tuple[Install, dict]) -> None:
    inst, _ = installed
    rows = ["t_ns,op,allocator,instance,type,size,id,new_id"]
    for i in range(4000):  # blocks that outlive their neighbours leave carriers sparse
        rows.append(f"{i},alloc,binary_alloc,1,binary,{2000 + (i * 37) % 30000},{i + 1},")
    rows += [f"{4000 + i},free,binary_alloc,1,binary,,{i + 1}," for i in range(4000) if i % 8]
    (inst.work / "t.csv").write_text("\n".join(rows) + "\n")
    r = inst.run("replay", "t.csv", "--compare", "+MBas bf", "+MBas aoffcbf", "--json")
    assert r.returncode == 0, r.stderr
    assert "binary_alloc" in r.stdout and "bf" in r.stdout


def test_snapshot_watch_report_and_serve_a_real_node(installed: tuple[Install, dict],
                                                     node: Node) -> None:
    inst, _ = installed
    r = inst.run("snapshot", node.node, "--cookie-file", str(node.cookie_file), "-o", "snap.json")
    assert r.returncode == 0, r.stderr
    snap = json.loads((inst.work / "snap.json").read_text())
    assert snap["node"] == node.node and snap["allocators"]
    # Plain TCP: our own distribution client, which needs no Erlang code of ours.
    agents = (Path(inst.env["XDG_CACHE_HOME"]) / "beamalloc").rglob("beamalloc_relay.beam")
    assert not list(agents)
    # Through the hidden node (TLS, or forced): the relay is compiled from the installed
    # sources by the host's erlc, into the user's cache.
    inst.env["BEAMALLOC_HIDDEN_NODE"] = "1"
    try:
        r = inst.run("snapshot", node.node, "--cookie-file", str(node.cookie_file), "-o",
                     "snap-hidden.json")
    finally:
        del inst.env["BEAMALLOC_HIDDEN_NODE"]
    assert r.returncode == 0, r.stderr
    assert json.loads((inst.work / "snap-hidden.json").read_text())["node"] == node.node
    assert list((Path(inst.env["XDG_CACHE_HOME"]) / "beamalloc").rglob("beamalloc_relay.beam"))

    r = inst.run("report", "snap.json", str(RECON), "-o", "report.html")
    assert r.returncode == 0, r.stderr
    html = (inst.work / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and node.node in html

    r = inst.run("watch", node.node, "--cookie-file", str(node.cookie_file), "--interval", "1",
                 "--duration", "3", "--store", "w.db", timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen(["beamalloc", "serve", "--store", "w.db", "--port", str(port)],
                           env=inst.env, cwd=inst.work, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    try:
        page = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and srv.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    page = resp.read().decode()
                    break
            except OSError:
                time.sleep(0.2)
        assert srv.poll() is None, srv.stderr.read().decode() if srv.stderr else ""
        assert "beamalloc" in page and node.node in page, page[:500]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/assets/style.css", timeout=5) as rs:
            assert rs.status == 200 and rs.read()
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()


def test_trace_without_bcc_says_what_it_needs(installed: tuple[Install, dict],
                                              node: Node) -> None:
    """Debian's bcc hidden behind an empty tmpfs in a private mount namespace: the host really
    has no bcc for this command, and nothing else changes."""
    inst, _ = installed
    if os.geteuid() != 0:
        pytest.skip("trace checks root first; the bcc check is reached as root")
    argv = ["beamalloc", "trace", "--pid", str(node.proc.pid), "--duration", "1", "--summary"]
    if BCC_DIST.is_dir():
        unshare = shutil.which("unshare")
        if not unshare:
            pytest.skip("hiding Debian's bcc needs unshare (util-linux)")
        argv = [unshare, "-m", "sh", "-c", f'mount -t tmpfs -o ro none {BCC_DIST} && exec "$@"',
                "sh", *argv]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, env=inst.env, cwd=inst.work,
                       timeout=60)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "bcc" in lines[0] and "apt-get install" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_trace_with_debian_bcc_compiles_the_installed_bpf_sources(
        installed: tuple[Install, dict], node: Node) -> None:
    """With bcc there, `trace` compiles the BPF programs shipped in the wheel (bcc's own clang,
    no compiler on PATH) and follows the node for a second."""
    inst, _ = installed
    if os.geteuid() != 0 or not BCC_DIST.is_dir():
        pytest.skip("eBPF needs root and Debian's bcc (make setup: python3-bpfcc)")
    r = inst.run("trace", "--pid", str(node.proc.pid), "--duration", "1", "--summary",
                 timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"pid {node.proc.pid}" in r.stdout + r.stderr


def test_the_demo_runs_from_the_install(installed: tuple[Install, dict]) -> None:
    """`demo` compiles the workload shipped in the wheel (beamalloc/samples/workloads) with the
    host's erlc, fragments a node, analyzes it and writes the report (about 10 s)."""
    inst, _ = installed
    r = inst.run("demo", "--report", "demo.html", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "binary_alloc" in r.stdout
    assert (inst.work / "demo.html").read_text().startswith("<!DOCTYPE html>")


def test_an_unprivileged_user_runs_the_root_owned_install(installed: tuple[Install, dict]
                                                          ) -> None:
    """Installed by root, run by a user who cannot write it and has no home (nobody)."""
    inst, _ = installed
    if os.geteuid() != 0:
        pytest.skip("switching to nobody needs root")
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("needs setpriv (util-linux)")
    shared = Path(tempfile.mkdtemp(prefix="beamalloc-wheel-nobody-"))
    try:
        shared.chmod(0o777)
        shutil.copy(SAMPLE, shared / "frag.json")
        (shared / "frag.json").chmod(0o644)
        env = dict(inst.env, HOME="/nonexistent")
        del env["XDG_CACHE_HOME"], env["XDG_DATA_HOME"]
        for cmd in (["analyze", "frag.json"], ["recommend", "frag.json"]):
            r = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                                "beamalloc", *cmd], capture_output=True, text=True, env=env,
                               cwd=shared, timeout=180)  # fmt: skip
            assert r.returncode == 0, (cmd, r.stderr[-2000:])
            assert "binary_alloc" in r.stdout
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_nothing_is_written_into_the_installed_package(installed: tuple[Install, dict]) -> None:
    """Runs last: site-packages may be read-only (root-owned); every command above wrote only to
    the working directory and the user's cache."""
    inst, before = installed
    assert _files(inst.package) == before
