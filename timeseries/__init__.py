"""The time series of a watched node: which gauges a sample yields (series.py), the sampling loop
(watch.py), the SQLite store (store.py) and the Prometheus exporter (prometheus.py). The web UI's
charts read the same gauges."""
