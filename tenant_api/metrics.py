"""The API's Prometheus metrics, in a registry of the app's own (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["ApiMetrics"]


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("gpubill_api_requests_total", "Requests answered, per route and status",
                                ["route", "status"], registry=registry)
        self.seconds = Histogram("gpubill_api_request_seconds", "Time to answer, per route", ["route"],
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=registry)
        self.download_bytes = Counter("gpubill_api_download_bytes_total", "Bytes of reports and invoices sent",
                                      registry=registry)
        self.records_pending = Gauge("gpubill_api_access_records_pending",
                                     "Access records not yet written to ClickHouse", registry=registry)
        self.records_dropped = Gauge("gpubill_api_access_records_dropped",
                                     "Access records dropped after the database refused them too long", registry=registry)
        self.connection_guard = Gauge("gpubill_api_connection_guard", "1 while the request-head deadline and the "
                                      "connection cap hold (0: uvicorn did not fit the adapter, see the log)",
                                      registry=registry)
        self.connections_closed = Counter("gpubill_api_connections_closed_total", "Connections closed by the "
                                          "guard: at the cap, or for no request head or body in time", ["why"],
                                          registry=registry)
        self.ready = Gauge("gpubill_api_up", "1 while the API serves", registry=registry)

    def records(self, pending: int, dropped: int) -> None:
        self.records_pending.set(pending)
        self.records_dropped.set(dropped)

    def connection_closed(self, why: str) -> None:
        self.connections_closed.labels(why).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
