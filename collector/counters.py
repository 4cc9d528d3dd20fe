"""One allocator's counters read again and again over one transport until they show what the
caller waits for: `recommend`'s second read of a node when only the turnover is asked for
(advice/reading.py), which a busy node answers in a tenth of a second and an idle one never.

On the target: `erlang:system_info({allocator, A})` only, the BIF the snapshot calls too
(collector/collect.py), and with the same one side effect: it resets the "max since the last
call" element of each statistic (docs/erts/alloc_util.md §6.1). No carriers, no processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from beamalloc.collector.access import Access
from beamalloc.collector.replies import check_reply
from beamalloc.collector.session import with_transport
from beamalloc.collector.system_info import add_system_info
from beamalloc.collector.terms import Atom
from beamalloc.collector.transport import Transport, result
from beamalloc.snapshot import Snapshot

#: Seconds between two reads of the counters: a busy node's churn shows within a few.
EVERY = 0.05


def read_until(node: str, cookie: str, allocator: str, until: Callable[[Snapshot], bool],
               seconds: float, *, timeout: float = 10.0, every: float = EVERY,
               access: Access | None = None) -> Snapshot:  # fmt: skip
    """Snapshots of `node` holding `allocator`'s instances only, read every `every` s until
    `until(read)` is true or `seconds` have passed since the call: the last read. Each read is
    stamped with the middle of its request (wall clock, as collect() stamps a snapshot).
    NodeError (exit 3) as the snapshot's, within `timeout` plus `seconds`."""
    key = (Atom("allocator"), Atom(allocator))
    start = time.monotonic()

    def work(conn: Transport, deadline: float) -> Snapshot:
        while True:
            t0 = time.time()
            info = check_reply(key, result(conn.receive(
                conn.send("erlang", "system_info", [key]), deadline)))  # fmt: skip
            snap = Snapshot(node=node, source="live", taken_at=(t0 + time.time()) / 2)
            if isinstance(info, list):
                add_system_info(snap, allocator, info)
            left = start + seconds - time.monotonic()
            if until(snap) or left <= 0:
                return snap
            time.sleep(min(every, left))

    return with_transport(node, cookie, timeout + seconds, access, work)
