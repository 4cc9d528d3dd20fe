"""An uploaded crash dump is read once (issue 28 item 1, as the CLI reads it: cli/inputs.py):
its =proc sections are gathered in the pass that reads its allocators, and its page shows the
holders procdump's own read of the file gives."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from support import SAMPLES

from beamalloc.advice.holders import processes_json
from beamalloc.collector import crashdump, dumpscan, procdump
from beamalloc.webui.app import create_app

DUMP = SAMPLES / "erl_crash.dump"


def _counting(passes: list[str], name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def spy(*args: Any, **kwargs: Any) -> Any:
        passes.append(name)  # one pass over a dump: its sections, from the start
        return real(*args, **kwargs)

    return spy


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The passes over a dump's sections, by any reader (each module's own name of the two
    section readers of collector/dumpscan.py, the real ones underneath)."""
    out: list[str] = []
    for mod in (crashdump, procdump):
        for name in ("scan", "line_sections"):
            real = getattr(dumpscan, name)
            monkeypatch.setattr(mod, name, _counting(out, f"{mod.__name__}.{name}", real))
    return out


def test_an_uploaded_dump_is_read_once(passes: list[str]) -> None:
    app = create_app(None, upload_limit=1 << 22)
    client = app.test_client()
    r = client.post("/upload", data={"file": (io.BytesIO(DUMP.read_bytes()), "erl_crash.dump")})
    assert r.status_code == 303, r.status_code
    assert passes == ["beamalloc.collector.crashdump.scan"]  # the allocators' pass, alone
    ref = r.headers["Location"].rsplit("/", 1)[-1]
    page = client.get(f"/snapshot/{ref}").get_data(as_text=True)
    assert passes == ["beamalloc.collector.crashdump.scan"]  # the page reads no dump either
    alone = procdump.read_procdump(DUMP)  # procdump's own read of the file: the same holders
    assert alone.scanned > 0 and f"read all {alone.scanned} processes" in page
    held = app.extensions["beamalloc"].upload_processes[ref]
    assert json.dumps(held, sort_keys=True, default=vars) == \
        json.dumps(processes_json(alone), sort_keys=True, default=vars)


def test_a_cut_dump_says_partial_as_a_note() -> None:
    """The PARTIAL line is styled as a note by the analysis' Coverage.partial, passed to the
    template as data (issue 27 item 1), and only that line: the holder line is not a note."""
    client = create_app(None, upload_limit=1 << 22).test_client()
    pages = {}
    for name, data in (("whole.dump", DUMP.read_bytes()), ("cut.dump", DUMP.read_bytes()[:20_000])):
        r = client.post("/upload", data={"file": (io.BytesIO(data), name)})
        assert r.status_code == 303, r.status_code
        pages[name] = client.get(r.headers["Location"]).get_data(as_text=True)
    # the read lines: between the verdict's box and the node's name
    read = pages["cut.dump"].split('<div class="verdict')[1].split("</div>", 1)[1]
    read = read.split('<h1 class="node">')[0]
    assert read.lstrip().startswith('<p class="note">PARTIAL: the input is cut short')
    assert read.count("<p") == read.count("PARTIAL") + read.count("<p>") == 1 + read.count("<p>")
    assert "PARTIAL" not in pages["whole.dump"]
