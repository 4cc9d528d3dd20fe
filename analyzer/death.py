"""Why a node died: a crash dump's slogan read for what it means (docs/erts/memory-categories.md
§4), with the holder from the dump's own tables when it ran out of memory.

The cause of death comes before the allocator state in every output (issue 24): a node that
died at boot is not HEALTHY, and one that ran out of memory names the process that asked for
it. `death_of(snap)` returns None for sources that did not die (a live node, a recon file).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from beamalloc.snapshot import Snapshot
from beamalloc.units import human

Kind = Literal["out_of_memory", "boot_failure", "crash", "requested", "unknown"]

_CANNOT = re.compile(r"^(\w{1,40}): Cannot (?:re)?allocate (\d{1,20}) bytes of memory"
                     r"(?: \(of type \"([^\"]{1,60})\"\))?")
#: Slogans of a node that never finished booting (init.erl, erl_init.c; §4).
_BOOT = ("init terminating in do_boot", "runtime terminating during boot",
         "could not start kernel pid", "{application_start_failure")
_REQUESTED = ("crash dump requested by user", "received sigusr1")


@dataclass(frozen=True)
class Holder:
    """A process of the dump's =proc sections (bytes; None where the dump does not say)."""

    pid: str
    name: str | None
    initial_call: str | None
    current_function: str | None
    state: str | None
    memory: int
    total_heap: int | None
    binary: int | None
    message_queue_len: int
    #: why this one: it was allocating (running or collecting) or only the largest
    role: Literal["allocating", "largest"]

    def label(self) -> str:
        who = self.name or self.initial_call or "?"
        return f"{self.pid} ({who})"


@dataclass(frozen=True)
class Death:
    """The cause of death of a crash dump's node."""

    kind: Kind
    slogan: str
    #: one sentence: what the slogan means, the first line of every output
    meaning: str
    allocator: str | None = None
    size: int | None = None
    block_type: str | None = None
    holder: Holder | None = None
    #: erlang:memory(total) at the dump, when the dump got that far
    memory_total: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Death:
        """The record back from `to_json()` (the analysis' `death`), for advice/wording.py."""
        h = d.get("holder")
        return cls(**{**d, "holder": Holder(**h) if isinstance(h, dict) else None})


def classify(slogan: str) -> Kind:
    low = slogan.strip().lower()
    if _CANNOT.match(slogan.strip()):
        return "out_of_memory"
    if low.startswith(_REQUESTED):
        return "requested"
    if low.startswith(_BOOT) or "{application_start_failure" in low:
        return "boot_failure"
    return "crash" if low else "unknown"


def _holder(snap: Snapshot) -> Holder | None:
    dp = snap.extra.get("dump_procs")
    if not isinstance(dp, dict) or not dp.get("procs"):
        return None
    procs = [p for p in dp["procs"] if isinstance(p, dict)]
    active = [p for p in procs if p.get("active")]
    pick, role = ((max(active, key=lambda p: p["memory"]), "allocating") if active
                  else (max(procs, key=lambda p: p["memory"]), "largest"))
    return Holder(pid=pick["pid"], name=pick.get("name"), initial_call=pick.get("initial_call"),
                  current_function=pick.get("current_function"), state=pick.get("state"),
                  memory=pick["memory"], total_heap=pick.get("total_heap"),
                  binary=pick.get("binary"), message_queue_len=pick.get("message_queue_len", 0),
                  role=role)  # type: ignore[arg-type]


def death_of(snap: Snapshot) -> Death | None:
    if snap.source != "crashdump":
        return None
    slogan = snap.extra.get("slogan")
    if not isinstance(slogan, str):
        return Death("unknown", "", "The dump names no cause of death (no Slogan line was read).")
    kind = classify(slogan)
    total = snap.memory.get("total")
    # the slogan is the dying program's text: printable characters only, in a sentence's length
    text = "".join(c if c.isprintable() else "?" for c in slogan)
    short = text if len(text) <= 160 else text[:157] + "..."
    if kind == "out_of_memory":
        m = _CANNOT.match(slogan.strip())
        assert m is not None
        alloc, size, typ = m.group(1), int(m.group(2)), m.group(3)
        holder = _holder(snap)
        meaning = (f"The node died out of memory: {alloc} could not get {human(size)}"
                   + (f" for a {typ} block" if typ else "")
                   + (f" while the node held {human(total)} (erlang:memory(total))"
                      if total else "") + ".")
        if holder is not None:
            verb = ("was collecting its garbage" if holder.state == "garbing"
                    else "was running") if holder.role == "allocating" else "was the largest"
            parts = [f"heap {human(holder.total_heap)}" if holder.total_heap is not None
                     else "", f"binaries {human(holder.binary)}" if holder.binary is not None
                     else "", f"{holder.message_queue_len} messages queued"]
            meaning += (f" Process {holder.label()} {verb}, holding {human(holder.memory)} ("
                        + ", ".join(p for p in parts if p) + ")"
                        + (f" in {holder.current_function}" if holder.current_function else "")
                        + ".")
        return Death(kind, slogan, meaning, alloc, size, typ, holder, total)
    if kind == "boot_failure":
        meaning = ("The node died while booting, not of memory: " + short + ". The allocator "
                   "state below is that of a node that never ran its load.")
    elif kind == "requested":
        meaning = ("The dump was requested by hand (SIGUSR1 or erlang:halt/1 with a "
                   "slogan): the node did not crash; its state is a sample like any other.")
    elif kind == "crash":
        meaning = (f"The node stopped for a reason that is not memory: {short}. The allocator "
                   "state below is secondary.")
    else:
        meaning = "The dump's slogan is empty: it does not say why the node stopped."
    return Death(kind, slogan, meaning, memory_total=total)
