"""Python's cyclic garbage collector paused around work that builds many acyclic objects at
once (a decoded reply, a Snapshot, a process scan): its passes would walk them again and again
as they pile up, and none of them can be garbage. Restored as it was, even on an exception."""

from __future__ import annotations

import gc


class paused_gc:
    """`with paused_gc(): ...`: the collector off inside, back on after if it was on."""

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()
