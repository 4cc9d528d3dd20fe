"""The bad-input corpus (tests/corpus/, written by make_corpus.py) through every command that
reads a file and through the web upload: exit 0 or 2, never a traceback, never a hang; an exit 2
is one line naming the file and showing none of a secret's bytes (docs/robustness.md).

Commands run in this process through beamalloc.cli.main (as the console script does), each
under an alarm: 432 files x 6 commands in about a minute, where subprocesses would take ten.
"""

from __future__ import annotations

import collections
import contextlib
import io
import signal
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from support import ROOT

from beamalloc.cli import main

CORPUS = ROOT / "tests" / "corpus"
sys.path.insert(0, str(CORPUS))
import make_corpus  # noqa: E402

pytestmark = pytest.mark.slow

FILES = sorted(p for p in (CORPUS / "bad").iterdir() if p.is_file())
HANG_SECONDS = 30  # a command on a file of at most 100 kB takes well under a second


class _Hang(BaseException):
    pass


def _alarm(*_: object) -> None:
    raise _Hang


def run(argv: list[str], seconds: int = HANG_SECONDS) -> tuple[object, str, str]:
    """(exit code, stdout, stderr); the code is "traceback" or "hang" when that happened."""
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code: object = main(argv)
            except _Hang:
                code = "hang"
            except SystemExit as e:
                code = e.code
            except BaseException:  # the very thing this test looks for
                code = "traceback"
                err.write(traceback.format_exc())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


def _commands(path: str, tmp: Path) -> dict[str, list[str]]:
    return {
        "analyze": ["analyze", path],
        "recommend": ["recommend", path],
        "recommend --json --no-predict": ["recommend", path, "--json", "--no-predict"],
        "report": ["report", path, "-o", str(tmp / "report.html")],
        "replay": ["replay", path],
        "snapshot -o": ["snapshot", path, "-o", str(tmp / "snap.json")],
    }


def _secret_shown(text: str) -> str | None:
    """A run of 4 or more characters of a secret that `text` shows, if any."""
    for s in make_corpus.SECRETS:
        for variant in (s, s.encode().decode("latin-1"), s.encode("latin-1", "replace").decode()):
            for i in range(len(variant) - 3):
                if variant[i : i + 4] in text:
                    return variant[i : i + 4]
    return None


def test_corpus_is_what_its_script_writes() -> None:
    """The files are the script's, byte for byte, and there are at least 300 of them."""
    res = subprocess.run([sys.executable, str(CORPUS / "make_corpus.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert len(FILES) >= 300
    kinds = {p.name.split("__")[0] for p in FILES}
    assert {"recon", "json", "otp25_dump", "trace_bin", "trace_csv", "system_info"} <= kinds


def test_every_command_on_every_file(tmp_path: Path) -> None:
    table: collections.Counter[tuple[str, object]] = collections.Counter()
    failures = []
    for f in FILES:
        for name, argv in _commands(str(f), tmp_path).items():
            code, out, err = run(argv)
            table[(name, code)] += 1
            lines = err.strip().splitlines()
            if code not in (0, 2):
                failures.append(f"{name} {f.name}: {code}\n{err[-2000:]}")
            elif code == 2 and not (len(lines) == 1 and lines[0].startswith("beamalloc: ")
                                    and "Traceback" not in err):
                failures.append(f"{name} {f.name}: exit 2 but stderr is {err!r}")
            elif code == 2 and f.name not in lines[0] and name != "replay":
                failures.append(f"{name} {f.name}: the line does not name the file: {lines[0]}")
            elif f.name.startswith("x_") and not f.name.startswith("x_trace") and code != 2 \
                    and name != "replay":
                failures.append(f"{name} {f.name}: an impossible input read with exit {code}")
            elif (leak := _secret_shown((out + err).replace(str(f), ""))) is not None:
                failures.append(f"{name} {f.name}: shows {leak!r} of a secret")
    print("\nexit codes over", len(FILES), "files:")
    for (name, code), n in sorted(table.items(), key=str):
        print(f"  {name:32} {code!s:10} {n}")
    assert not failures, "\n".join(failures[:20])
    assert table[("analyze", 0)] > 0 and table[("analyze", 2)] > 0  # both kinds are in there


def test_special_files_are_refused_before_open(tmp_path: Path) -> None:
    """A FIFO (nothing writes to it: open() would wait forever), devices, a socket, a directory,
    symlink loops, a dangling path: each is exit 2 and one line, for every command, at once."""
    special = make_corpus.special_files(tmp_path / "special")
    out = tmp_path / "out"
    out.mkdir()
    for kind, path in special.items():
        for name, argv in _commands(str(path), out).items():
            code, _, err = run(argv, seconds=10)
            assert code == 2, (kind, name, code, err[-1500:])
            line = err.strip()
            assert "\n" not in line and line.startswith("beamalloc: "), (kind, name, err)


def test_leading_blank_lines_are_still_a_recon_file(tmp_path: Path) -> None:
    """Issue 16: a valid recon file after 70 newlines was "empty file"."""
    f = CORPUS / "bad" / "recon__leading_newlines.txt"
    code, _, err = run(["analyze", str(f), "--json"])
    assert code == 0, err


def test_upload_never_500(tmp_path: Path) -> None:
    """Every corpus file uploaded to the web UI: 400 with the reason, or the snapshot's page;
    never a 500, whatever is in it."""
    from beamalloc.webui.app import create_app

    client = create_app(str(tmp_path / "store.db")).test_client()
    codes: collections.Counter[int] = collections.Counter()
    for f in FILES:
        r = client.post("/upload", data={"file": (io.BytesIO(f.read_bytes()), f.name)})
        codes[r.status_code] += 1
        assert r.status_code in (303, 400), (f.name, r.status_code, r.data[-500:])
        if r.status_code == 303:
            page = client.get(r.headers["Location"])
            assert page.status_code == 200, (f.name, page.status_code)
        else:
            page = r.data.decode("utf-8", "replace").replace(f.name, "")
            assert _secret_shown(page) is None, f.name
    print("\nupload status codes:", dict(codes))
    assert codes[303] > 0 and codes[400] > 0


@pytest.mark.parametrize("secret", make_corpus.SECRETS)
def test_cookie_file_as_source_shows_none_of_it(secret: str, tmp_path: Path) -> None:
    """A cookie file passed where a snapshot goes: the parse error shows no byte of it, in the
    CLI (a subprocess, as a user runs it) and on the upload page."""
    cookie = tmp_path / ".erlang.cookie"
    cookie.write_text(secret)
    res = subprocess.run([sys.executable, "-m", "beamalloc.cli", "analyze", str(cookie)],
                         capture_output=True, timeout=60)
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 2 and len(err.strip().splitlines()) == 1, err
    shown = (err + res.stdout.decode("utf-8", "replace")).replace(str(cookie), "")
    assert _secret_shown(shown) is None, err


FUZZ_FINDS = sorted((CORPUS / "fuzz").glob("*/*"))


@pytest.mark.parametrize("path", FUZZ_FINDS, ids=[f"{p.parent.name}/{p.name}" for p in FUZZ_FINDS])
def test_reader_fuzzer_finds_stay_fixed(path: Path) -> None:
    """Each input a reader fuzzer (tests/fuzz/atheris_readers.py) once failed on, through the
    same property: a result or the reader's own one-line error."""
    sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
    import reader_props

    reader_props.CHECKS[path.parent.name](path.read_bytes())
