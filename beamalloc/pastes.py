"""Where `+M` flags really go: the one table of paste formats (`recommend --format`).

Each format names the file (or the environment) an install reads its emulator flags from, how
the block is written there, and why there. The reporters render a recommendation through
`render()`, docs/recommend.md "Paste formats" shows the same table (tests/test_pastes.py
compares them), and tests/live/test_pastes_live.py pastes each block where its format says,
starts the real program (an erl with an args file, a mix release, rabbitmq-server, ejabberd) and
reads the flags back in force.

Why "after what is already there" works in every format: erts takes the last value it reads of
a parameter, and each place below is read after the flags its program sets by default
(docs/erts/tuning.md §0.2 item 7), so the block wins over them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

#: How a block is written: `line` the flags on one line, as on erl's command line; `lines` one
#: flag per line (an erl args file: `#` starts a comment); `shell` an assignment that appends to
#: a variable, in a file a shell sources or in the environment.
Kind = Literal["line", "lines", "shell"]


class PasteFormat(NamedTuple):
    """One `--format`: where the flags go and how the block is written there. (A NamedTuple:
    cli/main.py's parser imports this module through beamalloc/limits.py, and dataclasses
    would add 10 ms to `beamalloc --version`, tests/bench/bench_startup.py.)"""

    name: str  # the `--format` value
    kind: Kind
    where: str  # the file or place, as an operator finds it
    how: str  # where in it, and why the flags win there (docs/recommend.md's table)
    head: str  # the block's first line, a comment in the file's own syntax
    variable: str | None = None  # `shell`: the variable the flags are appended to
    export: bool = False  # `shell`: an environment variable (`export`), not a sourced file's


#: The formats, in the order `--format` lists them (vm.args is the default).
PASTES: dict[str, PasteFormat] = {p.name: p for p in (
    PasteFormat(
        "vm.args", "lines",
        "vm.args of a release (relx/rebar3: releases/VSN/vm.args), or any file erl reads with "
        "`-args_file`",
        "at the end, after any +M flags already there: erl reads the file in place, in order",
        "## beamalloc: add to vm.args, after any +M flags already there"),
    PasteFormat(
        "erl_flags", "shell", "the environment of the command that starts the node",
        "erl adds `ERL_FLAGS` at the end of its command line, after the flags of the command "
        "and of its args files",
        "# beamalloc: in the environment that starts the node (erl reads ERL_FLAGS last)",
        variable="ERL_FLAGS", export=True),
    PasteFormat(
        "rabbitmq", "shell", "/etc/rabbitmq/rabbitmq-env.conf",
        "at the end; rabbitmq-server puts `SERVER_ADDITIONAL_ERL_ARGS` after its own "
        "allocator defaults (`+MBas ageffcbf +MBlmbcs 512` ...). In a container's environment "
        "the name is `RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS`, and it replaces the file's value",
        "# beamalloc: append to /etc/rabbitmq/rabbitmq-env.conf (env: RABBITMQ_ prefix)",
        variable="SERVER_ADDITIONAL_ERL_ARGS"),
    PasteFormat(
        "ejabberd", "shell", "/etc/ejabberd/ejabberdctl.cfg",
        "at the end, after the file's own `ERL_OPTIONS=` line (Debian's sets "
        "`-env ERL_CRASH_DUMP_BYTES 0`), which it extends; ejabberdctl passes `ERL_OPTIONS` "
        "before /etc/ejabberd/vm.args, whose +M flags, if any, would win",
        "# beamalloc: append to /etc/ejabberd/ejabberdctl.cfg, after its ERL_OPTIONS line",
        variable="ERL_OPTIONS"),
    PasteFormat(
        "mix", "lines", "rel/vm.args.eex of a mix release (`mix release.init` creates it)",
        "at the end; `mix release` copies it to releases/VSN/vm.args, which the release's "
        "start script hands to erl with `-args_file`",
        "## beamalloc: add to rel/vm.args.eex (mix release), after any +M flags there"),
    PasteFormat(
        "flags", "line", "the erl (or `iex --erl`) command line",
        "after any +M flags already there", ""),
)}

#: The `--format` choices (beamalloc/limits.py states them to the parser).
FORMATS: tuple[str, ...] = tuple(PASTES)


def render(parts: Sequence[str], fmt: str, note: str | None = None) -> str:
    """The block to paste for `fmt`, from the flags one by one (`+MBas ageffcbf`) in the order
    erts must read them. No flags give a comment saying so (and `note`: why a setting the lint
    calls wrong is not reverted); `flags` gives the bare line, empty for none."""
    p = PASTES.get(fmt)
    if p is None:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    flags = " ".join(parts)
    if p.kind == "line":
        return flags
    if not flags:
        return "# beamalloc: no +M flags to set" + (f"\n# {note}" if note else "")
    if p.kind == "lines":
        return "\n".join([p.head, *parts])
    assert p.variable is not None
    return f'{p.head}\n{"export " if p.export else ""}{p.variable}="${p.variable} {flags}"'
