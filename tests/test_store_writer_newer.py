"""A store written by a newer beamalloc, met by the writer (`watch`): the rows it decodes to go
on writing a node (its key frame and that frame's shape, Store._node) are one StoreError line,
exit 2, as every read of them is (issue 28 item 5, point 3), and nothing is written."""

from __future__ import annotations

import copy
import io

import pytest
from support import SAMPLES, run_cli

from beamalloc.collector.sources import read_file
from beamalloc.snapshot import Snapshot
from beamalloc.timeseries.series import derive
from beamalloc.timeseries.store import Store, StoreError
from beamalloc.timeseries.watch import Watcher

T0 = 1_700_000_000.0
#: A node name `watch` cannot reach: its poller fails at once and the writer opens its gap,
#: which reads the node's key (no BEAM needed to reach the writer's path).
NODE = "nobody@nohost.invalid"
#: What each newer-format row is made of: (SQL making it, the words of the one line).
NEWER = {
    "shape": ("UPDATE shapes SET data = CAST(X'42415302' || substr(data, 5) AS BLOB)",
              r"holds a snapshot's shape of format 2 .*upgrade beamalloc"),
    "frame": ("UPDATE snapshots SET data = CAST(X'42414632' || substr(data, 5) AS BLOB)",
              r"holds a snapshot frame of format 2 .*upgrade beamalloc"),
}


def _snap(t: float) -> Snapshot:
    s = copy.deepcopy(read_file(str(SAMPLES / "raw_allocator_dump.txt")))
    s.node, s.os_pid, s.taken_at = NODE, 4242, t
    return s


def _store(path, kind: str) -> int:
    """A store of one node's kept snapshot whose `kind` row is of format 2; its row count."""
    with Store(path) as st:
        s = _snap(T0)
        st.add_sample(s, derive(s), force_keep=True)
        assert st.db.execute("SELECT data FROM snapshots").fetchone()[0].startswith(b"BAF1")
        st.db.execute(NEWER[kind][0])
        return _rows(st)


def _rows(st: Store) -> int:
    return sum(st.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
               for t in ("recent", "snapshots", "gaps", "shapes"))


@pytest.mark.parametrize("kind", sorted(NEWER))
def test_writer_says_newer_format_in_one_line(tmp_path, kind) -> None:
    path = tmp_path / "w.db"
    rows = _store(path, kind)
    with Store(path) as st:  # a new writer: it reads the node's key to write its next sample
        s = _snap(T0 + 60)
        for write in (lambda: st.add_sample(s, derive(s)),
                      lambda: st.open_gap(NODE, T0 + 60, "down")):
            with pytest.raises(StoreError, match=NEWER[kind][1]) as e:
                write()
            assert "\n" not in str(e.value) and str(path) in str(e.value)
        assert _rows(st) == rows  # its transaction undone: nothing written


@pytest.mark.parametrize("kind", sorted(NEWER))
def test_watch_writer_stops_with_the_store_error(tmp_path, kind) -> None:
    """The watcher's writer thread keeps the StoreError; `run` raises it as it is."""
    path = tmp_path / "w.db"
    _store(path, kind)
    w = Watcher([], "cookie", store_path=str(path), out=io.StringIO(), quiet=True)
    s = _snap(T0 + 60)
    w._q.put(lambda st: st.add_sample(s, derive(s)))
    w._q.put(None)
    with Store(path) as st:
        w._write(st)
    assert isinstance(w.writer_error, StoreError)
    assert "upgrade beamalloc" in str(w.writer_error) and w.stop.is_set()


# Live tier: no BEAM runs, but `watch` takes its name with this host's epmd first and starts
# epmd when none runs, as `erl -sname` would (collector/dist.py `register`); the fast tier's guard
# (tests/conftest.py) fails a test that does, and on a machine with no epmd running this one did.
@pytest.mark.live
def test_watch_command_one_line_exit_2(tmp_path) -> None:
    """`beamalloc watch` on such a store: its writer opens the unreachable node's gap, meets
    the newer shape, and the command says the store's line (not "cannot write"), exit 2."""
    path = tmp_path / "w.db"
    _store(path, "shape")
    cookie = tmp_path / "cookie"
    cookie.write_text("STORETESTCOOKIE")
    cookie.chmod(0o400)
    r = run_cli("watch", NODE, "--store", str(path), "--interval", "1", "--duration", "3",
                "--cookie-file", str(cookie), "--quiet")
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"beamalloc: the store {path} holds a snapshot's shape of format 2")
    assert "upgrade beamalloc" in last and "Traceback" not in r.stderr
