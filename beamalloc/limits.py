"""Bounds, defaults and choices the command line states, homed in the core so that building
the `beamalloc` parser imports no stage (startup: each cli/commands/NAME.py imports its stages
inside its `run`). The stages that apply them import them from here."""

from __future__ import annotations

#: Scheduler counts beamalloc accepts anywhere (`--schedulers`): the VM's own limit (erl +S), as
#: trace headers check. Options, replays and snapshots all take it from here.
MAX_SCHEDULERS = 1024
#: Carriers a live snapshot reads at most (`--max-carriers`). Whole instances are read, those with
#: the most carrier bytes first, until the next would pass the cap; the rest are counted in
#: `Snapshot.carriers_skipped` and named in a note. A carrier costs about 33 words of the
#: target's heap while its answer is built and sent (20,000: ~5 MB) and about 22 us of wall
#: time (100,000 read whole took 2.3 s more than a snapshot without them on this 2-core machine,
#: tests/bench/bench_carriers.py); the cap keeps that under half a second.
MAX_CARRIERS = 20_000
#: `watch` reads carriers on every Nth sample of a node (`--carriers-every`; the first sample
#: included): a carrier scan walks every block on the target's schedulers, which the counters
#: of the other samples do not, and a sample with carriers is always stored whole.
CARRIERS_EVERY = 10
#: Processes a scan reads at most (`--max-processes`). Beyond, registered processes and a fair
#: (systematic) sample of the rest are read, and `complete` is false.
MAX_PROCESSES = 1_000_000
#: `watch` scans a node's processes every this many seconds (`--processes-every`; its first
#: sample included, 0: never): who holds the memory on its snapshot pages
#: (timeseries/scans.py). A scan is bounded by its budget (collector/processes.py BUDGET_MS).
PROCESSES_EVERY = 300.0
#: The paste formats of a recommendation (`--format`): their one home is beamalloc/pastes.py.
from beamalloc.pastes import FORMATS as FORMATS  # noqa: E402
