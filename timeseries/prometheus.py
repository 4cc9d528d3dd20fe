"""The Prometheus endpoint of `beamalloc watch --prometheus HOST:PORT` (docs/metrics.md).

A few derived gauges per node and allocator type, computed from each node's latest sample (the
same numbers the store keeps, timeseries/series.py), rather than one series per raw statistic:
prometheus.erl's allocator collector exports hundreds per node, and users end up dropping them.
Beside them: every erlang:memory() category labelled with the allocator that holds it (a join
with the per-allocator gauges sets each category against its carriers), counters of the
node's calls (to rate()), and a gauge per rule or lint check that holds, so alerts say what the
rule base says (deploy/prometheus/). Who holds the memory: the largest process groups (by
initial call) and ETS tables of each node's latest scan, a few per node so that the series stay
bounded (HOLDER_GROUPS).
Values are the latest sample's; a node that stopped answering keeps its last values with
beamalloc_up 0, and beamalloc_sample_timestamp_seconds tells how old they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from beamalloc.analyzer.categories import HOMES, OWN
from beamalloc.errors import InputError
from beamalloc.timeseries.series import (
    NODE_COUNTERS,
    NODE_GAUGES,
    TYPE_COUNTERS,
    TYPE_GAUGES,
    view,
)

if TYPE_CHECKING:
    from beamalloc.collector.processes import ProcessTable

#: erlang:memory() categories of a sample, as analyzer/categories.py names them.
NAMED = ("atom", "binary", "code", "ets")
#: Process groups and ETS tables exported per node, the largest by memory: a label per
#: initial call or table is bounded this way, whatever the node spawns or creates.
HOLDER_GROUPS = 5


def categories(point: dict[str, int]) -> dict[str, int]:
    """erlang:memory() by category (docs/erts/memory-categories.md §1): those the sample holds,
    and the rest of system (system minus atom, binary, code and ets) where it is not negative
    (counters read at different moments can make it so: then it is left out, not shown as 0)."""
    out = {c: point[f"mem_{c}"] for c in HOMES if f"mem_{c}" in point}
    if "mem_system" in point and all(f"mem_{c}" in point for c in NAMED):
        rest = point["mem_system"] - sum(point[f"mem_{c}"] for c in NAMED)
        if rest >= 0:
            out["other_system"] = rest
    return out


class WatchCollector(Collector):
    """Builds the metrics at scrape time from `latest()`: node -> its NodeStatus (watch.py):
    `up`, `last_t` (time of the last good sample), `point` (its derived numbers, or None),
    `findings` and `lint` (the labels of the rules and lint checks that hold); and the holder
    gauges from `scans()`, node -> its latest process scan, and `ets()`, node -> the ETS
    tables read with it (timeseries/scans.py)."""

    def __init__(self, latest: Callable[[], dict[str, Any]],
                 scans: Callable[[], dict[str, ProcessTable]] | None = None,
                 ets: Callable[[], dict[str, dict[str, Any]]] | None = None) -> None:
        self.latest = latest
        self.scans = scans or dict
        self.ets = ets or dict

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        nodes = self.latest()
        up = GaugeMetricFamily("beamalloc_up", "1 if the node's last sample succeeded.",
                               labels=["node"])
        ts = GaugeMetricFamily("beamalloc_sample_timestamp_seconds",
                               "Unix time of the node's last good sample.", labels=["node"])
        finding = GaugeMetricFamily(
            "beamalloc_finding", "1 while a rule of beamalloc's rule base holds on the node "
            "(rule, allocator, level: the rule's own; `beamalloc recommend NODE` explains it).",
            labels=["node", "rule", "allocator", "level"])  # fmt: skip
        lint = GaugeMetricFamily(
            "beamalloc_lint_in_force", "1 while a +M flag in force fails beamalloc's lint "
            "(check: lmbcs-sbct, migration-off, ...).", labels=["node", "check", "allocator"])
        per_type = {n: GaugeMetricFamily(n, h, labels=["node", "allocator"])
                     for n, h, _ in TYPE_GAUGES}
        per_node = {n: GaugeMetricFamily(n, h, labels=["node"]) for n, h, _ in NODE_GAUGES}
        category = GaugeMetricFamily(
            "beamalloc_memory_category_bytes", "erlang:memory() by category (other_system: "
            "system minus atom, binary, code, ets); allocator: the one that holds (nearly) only "
            "it, empty where several share it, to join beamalloc_allocated_bytes on.",
            labels=["node", "category", "allocator"])  # fmt: skip
        type_counters = {n: CounterMetricFamily(n, h, labels=["node", "allocator", "op"])
                         for n, h, _ in TYPE_COUNTERS}  # fmt: skip
        node_counters = {n: CounterMetricFamily(n, h, labels=["node", "call"] if len(k) > 1
                                                else ["node"])
                         for n, h, k in NODE_COUNTERS}  # fmt: skip
        holders = _Holders()
        for node, table in sorted(self.scans().items()):
            holders.add(node, table)
        for node, tables in sorted(self.ets().items()):
            holders.add_ets(node, tables)
        for node, st in sorted(nodes.items()):
            up.add_metric([node], 1.0 if st.up else 0.0)
            point = st.point
            if point is None or st.last_t is None:
                continue
            ts.add_metric([node], st.last_t)
            v = view(point)
            for name, _, key in NODE_GAUGES:
                if v[key] is not None:
                    per_node[name].add_metric([node], float(v[key]))
            for cat, n in categories(point).items():
                category.add_metric([node, cat, OWN.get(cat, "")], float(n))
            for alloc, row in v["types"].items():
                for name, _, key in TYPE_GAUGES:
                    per_type[name].add_metric([node, alloc], float(row[key]))
                for name, _, keys in TYPE_COUNTERS:
                    for key in keys:
                        if f"{alloc}.{key}" in point:
                            type_counters[name].add_metric(
                                [node, alloc, key.removeprefix("calls_")],
                                float(point[f"{alloc}.{key}"]))  # fmt: skip
            for name, _, keys in NODE_COUNTERS:
                for key in keys:
                    if key in point:
                        labels = [node, key.removeprefix("calls_")] if len(keys) > 1 else [node]
                        node_counters[name].add_metric(labels, float(point[key]))
            for rule, alloc, level in st.findings:
                finding.add_metric([node, rule, alloc, level], 1.0)
            for check, alloc in st.lint:
                lint.add_metric([node, check, alloc], 1.0)
        yield up
        yield ts
        yield from per_node.values()
        yield category
        yield from per_type.values()
        yield from type_counters.values()
        yield from node_counters.values()
        yield finding
        yield lint
        yield from holders.families()


class _Holders:
    """The holder gauges: per node, its scan's time, the largest process groups' memory,
    processes and referenced binaries, and the largest ETS tables (docs/metrics.md)."""

    def __init__(self) -> None:
        self.ts = GaugeMetricFamily(
            "beamalloc_process_scan_timestamp_seconds", "Unix time of the node's latest "
            "process scan (watch --processes-every).", labels=["node"])  # fmt: skip
        labels = ["node", "initial_call"]
        self.memory = GaugeMetricFamily(
            "beamalloc_process_group_memory_bytes", "process_info memory summed over the "
            f"processes spawned by one initial call, the node's {HOLDER_GROUPS} largest groups "
            "in its latest process scan.", labels=labels)  # fmt: skip
        self.count = GaugeMetricFamily(
            "beamalloc_process_group_processes", "Processes in the group (as "
            "beamalloc_process_group_memory_bytes).", labels=labels)  # fmt: skip
        self.binary = GaugeMetricFamily(
            "beamalloc_process_group_binary_bytes", "Refc binaries the group's processes "
            "reference, counted once per process (as beamalloc_process_group_memory_bytes).",
            labels=labels)  # fmt: skip
        self.ets = GaugeMetricFamily(
            "beamalloc_ets_table_bytes", f"Memory of the node's {HOLDER_GROUPS} largest ETS "
            "tables in its latest scan (ets:info memory; table: its name, id: its id, as "
            "unnamed tables share a name).", labels=["node", "table", "id", "type"])
        self.ets_all = GaugeMetricFamily(
            "beamalloc_ets_tables_bytes", "Memory of every ETS table the latest scan read "
            "(ets:info memory summed; erlang:memory(ets) adds ETS' own structures).",
            labels=["node"])

    def add_ets(self, node: str, ets: dict[str, Any]) -> None:
        self.ets_all.add_metric([node], float(ets.get("bytes") or 0))
        tables = [t for t in ets.get("tables") or [] if isinstance(t.get("bytes"), int)]
        for t in sorted(tables, key=lambda t: -t["bytes"])[:HOLDER_GROUPS]:
            self.ets.add_metric([node, t["name"], t["table"], t["type"]], float(t["bytes"]))

    def add(self, node: str, table: ProcessTable) -> None:
        if table.taken_at is not None:
            self.ts.add_metric([node], table.taken_at)
        for g in sorted(table.groups, key=lambda g: -g.memory)[:HOLDER_GROUPS]:
            self.memory.add_metric([node, g.initial_call], float(g.memory))
            self.count.add_metric([node, g.initial_call], float(g.count))
            if g.binary_bytes is not None:
                self.binary.add_metric([node, g.initial_call], float(g.binary_bytes))

    def families(self) -> Iterator[GaugeMetricFamily]:
        yield from (self.ts, self.memory, self.count, self.binary, self.ets, self.ets_all)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError(f"--prometheus wants HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve(address: str, latest: Callable[[], dict[str, Any]],
          scans: Callable[[], dict[str, ProcessTable]] | None = None,
          ets: Callable[[], dict[str, dict[str, Any]]] | None = None) -> tuple[Any, int]:
    """Start /metrics in a daemon thread; returns (server, port actually bound)."""
    host, port = parse_address(address)
    registry = CollectorRegistry()  # ours only: no process_/python_ series of the watcher
    registry.register(WatchCollector(latest, scans, ets))
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise InputError(f"cannot listen on {address}: {e.strerror}") from None
    return server, server.server_address[1]
