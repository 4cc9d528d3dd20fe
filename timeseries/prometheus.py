"""The Prometheus endpoint of `beamalloc watch --prometheus HOST:PORT` (docs/metrics.md).

A few derived gauges per node and allocator type, computed from each node's latest sample (the
same numbers the store keeps, timeseries/series.py), rather than one series per raw statistic:
prometheus.erl's allocator collector exports hundreds per node, and users end up dropping them.
Values are the latest sample's; a node that stopped answering keeps its last values with
beamalloc_up 0, and beamalloc_sample_timestamp_seconds tells how old they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from beamalloc.errors import InputError
from beamalloc.timeseries.series import NODE_GAUGES, TYPE_GAUGES, view


class WatchCollector(Collector):
    """Builds the gauges at scrape time from `latest()`: node -> (up, time, Point | None)."""

    def __init__(self, latest: Callable[[], dict[str, tuple[bool, float | None, Any]]]) -> None:
        self.latest = latest

    def collect(self) -> Iterator[GaugeMetricFamily]:
        nodes = self.latest()
        up = GaugeMetricFamily("beamalloc_up", "1 if the node's last sample succeeded.",
                               labels=["node"])
        ts = GaugeMetricFamily("beamalloc_sample_timestamp_seconds",
                               "Unix time of the node's last good sample.", labels=["node"])
        per_type = {n: GaugeMetricFamily(n, h, labels=["node", "allocator"])
                     for n, h, _ in TYPE_GAUGES}
        per_node = {n: GaugeMetricFamily(n, h, labels=["node"]) for n, h, _ in NODE_GAUGES}
        for node, (is_up, t, point) in sorted(nodes.items()):
            up.add_metric([node], 1.0 if is_up else 0.0)
            if point is None or t is None:
                continue
            ts.add_metric([node], t)
            v = view(point)
            for name, _, key in NODE_GAUGES:
                if v[key] is not None:
                    per_node[name].add_metric([node], float(v[key]))
            for alloc, row in v["types"].items():
                for name, _, key in TYPE_GAUGES:
                    per_type[name].add_metric([node, alloc], float(row[key]))
        yield up
        yield ts
        yield from per_node.values()
        yield from per_type.values()


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError(f"--prometheus wants HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve(address: str, latest: Callable[[], dict[str, tuple[bool, float | None, Any]]]
          ) -> tuple[Any, int]:
    """Start /metrics in a daemon thread; returns (server, port actually bound)."""
    host, port = parse_address(address)
    registry = CollectorRegistry()  # ours only: no process_/python_ series of the watcher
    registry.register(WatchCollector(latest))
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise InputError(f"cannot listen on {address}: {e.strerror}") from None
    return server, server.server_address[1]
