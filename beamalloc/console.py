"""The terminal every reporter writes to: its width, its colours, and what goes to stderr.

Width: $COLUMNS when set (a terminal or a pipe alike, so `COLUMNS=80 beamalloc analyze X | less`
is 80 wide), else the terminal's own width, else DEFAULT_WIDTH for a pipe or a file. Colour: off
with --no-color, with $NO_COLOR set (https://no-color.org), and whenever the stream is not a
terminal. --quiet silences what is not the answer: notes, progress and "wrote FILE" lines on
stderr (errors are still said, in one line).

These settings are one run's: a `Terminal`, built once by the CLI (cli/main.py) and carried by
its Context to the commands, the stages that say something and the reporters; the module holds
constants and functions only (tests/test_module_state.py).
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import threading

#: Width of output that goes to a pipe or a file when $COLUMNS is not set.
DEFAULT_WIDTH = 100
#: Progress shows only for work that has run this long (seconds): quick commands stay silent.
#: $BEAMALLOC_PROGRESS_AFTER overrides it (the tests set 0, so that they do not hang on timing).
PROGRESS_AFTER = 1.0


def _progress_after() -> float:
    try:
        v = float(os.environ.get("BEAMALLOC_PROGRESS_AFTER", PROGRESS_AFTER))
    except ValueError:
        return PROGRESS_AFTER
    return v if 0 <= v <= 3600 else PROGRESS_AFTER


#: The longest line we print that holds text from outside (a peer's reply, a file's name,
#: epmd's list): epmd's name list once made one line of 436,956 bytes (issue 25).
MAX_LINE = 1000
# C0 controls, DEL, C1 controls (ESC and CSI start terminal escape sequences), the Unicode
# bidirectional marks, embeddings, overrides and isolates that reorder what the reader sees,
# and the zero-width and invisible characters (and the line and paragraph separators) that
# hide or split it.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                      "\u2060-\u2069\ufeff]")


def _escaped(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean(text: str, limit: int = MAX_LINE, keep: str = "") -> str:
    """`text` safe to print on a terminal as one line: every control character (escape
    sequences, line breaks, bidi overrides) shown as `\\xNN`, at most `limit` characters (cut
    with "..." and how many more); `keep`: control characters left as they are (the web UI's
    line breaks). The one home of this rule: error lines, notes, anything a peer, a file or the
    store said, and every value a page shows (webui/filters.py) go through it
    (docs/robustness.md, "Messages")."""
    cut = bool(limit) and len(text) > limit
    part = text[:limit] if cut else text
    out = (_CONTROL.sub(_escaped, part) if not keep else
           _CONTROL.sub(lambda m: m.group() if m.group() in keep else _escaped(m), part))
    return out + f"... ({len(text) - limit:,} more characters)" if cut else out


def width_for(stream: TextIO) -> int:
    """The columns output to `stream` may use (see the module's docstring)."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return DEFAULT_WIDTH


class Terminal:
    """The terminal of one run, built once by the CLI from --quiet and --no-color (cli/main.py)
    and carried by its Context to the commands, their stages and their reporters: where output
    goes, its colours, whether notes and progress are said, and the progress lines being drawn
    (innermost last), which a line said meanwhile erases first. A plain class: every command
    imports this module, and dataclasses' import alone costs a third of Python's startup
    (cli/main.py, "Startup")."""

    __slots__ = ("_active", "no_color", "quiet", "stderr", "stdout")

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None, *,
                 quiet: bool = False, no_color: bool = False) -> None:
        self.stdout = sys.stdout if stdout is None else stdout
        self.stderr = sys.stderr if stderr is None else stderr
        self.quiet, self.no_color = quiet, no_color
        self._active: list[Progress] = []

    def color_wanted(self) -> bool:
        return not self.no_color and not os.environ.get("NO_COLOR")

    def console(self, stderr: bool = False) -> Any:
        """A rich Console on stdout (or stderr) of the width and colours above."""
        from rich.console import Console

        stream = self.stderr if stderr else self.stdout
        color = self.color_wanted()
        return Console(file=stream, width=width_for(stream), no_color=not color,
                       color_system="auto" if color else None, highlight=False)

    def note(self, text: str) -> None:
        """A line on stderr that is not the answer ("wrote FILE", a note): silent with --quiet."""
        if not self.quiet:
            self.say(text)

    def say(self, text: str) -> None:
        """A line on stderr that must be said even with --quiet (an action that changes a
        node). A progress line being drawn is erased first, and drawn again under it at its
        next tick. Control characters are escaped (`clean`): a note may quote a file or a
        peer."""
        text = clean(text, limit=0)
        active = self._active[-1] if self._active else None
        if active is None:
            print(text, file=self.stderr, flush=True)
            return
        with active._lock:
            self.stderr.write(("\r\x1b[K" if active._shown else "") + text + "\n")
            self.stderr.flush()

    def progress(self, what: str, interval: float = 0.2) -> Progress:
        """`with term.progress("replaying 3 flag sets") as p: ... p.step("flag set 2 of 3")`."""
        return Progress(self, what, interval)

    def stderr_is_terminal(self) -> bool:
        try:
            return self.stderr.isatty()
        except (ValueError, AttributeError):
            return False


def short(source: str) -> str:
    """A source as a progress line names it: a file by its name, a node as given."""
    return source if "@" in source else os.path.basename(source) or source


class Progress:
    """One line on stderr, refreshed in place, once the work has run PROGRESS_AFTER seconds;
    erased when it ends (Terminal.progress). Silent when stderr is not a terminal (a log file
    must not fill with carriage returns) or with --quiet."""

    def __init__(self, term: Terminal, what: str, interval: float = 0.2) -> None:
        self.what = what
        self.detail = ""
        self._term = term
        self._interval = interval
        self._on = term.stderr_is_terminal() and not term.quiet
        import threading  # here: `--version` and `--help` show no progress (bench_startup.py)

        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False
        self._t0 = 0.0
        self._lock = threading.Lock()

    def step(self, detail: str) -> None:
        self.detail = detail
        if self._shown:  # a new step shows at once, not at the next refresh
            self._draw()

    def __enter__(self) -> Progress:
        self._t0 = time.monotonic()
        self._term._active.append(self)
        if self._on:
            if _progress_after() <= 0:
                self._draw()
            import threading

            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()
        return self

    def _draw(self) -> None:
        with self._lock:
            if not self._stop.is_set():
                self._term.stderr.write("\r\x1b[K" + self._line())
                self._term.stderr.flush()
                self._shown = True

    def __exit__(self, *exc: object) -> None:
        self._term._active.remove(self)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._shown:
                self._term.stderr.write("\r\x1b[K")
                self._term.stderr.flush()

    def _line(self) -> str:
        spent = f" ({time.monotonic() - self._t0:.0f} s)"
        line = f"beamalloc: {self.what}" + (f": {self.detail}" if self.detail else "")
        room = width_for(self._term.stderr) - 1 - len(spent)  # the time spent always shows whole
        return (line if len(line) <= room else line[:max(0, room - 3)] + "...") + spent

    def _run(self) -> None:
        if self._stop.wait(_progress_after()):
            return
        while True:
            self._draw()
            if self._stop.wait(self._interval):
                return
