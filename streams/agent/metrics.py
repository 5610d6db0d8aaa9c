"""The agent's Prometheus metrics and its fault lines.

Every fault (a card lost, an NVML error, a bad trace line, a clock step back, a malformed
assignments file, Kafka away, a full disk, the spool over its cap) goes through
`Faults.report`: one increment of `gpubill_agent_errors_total{kind}` each time, and one
log line per kind and key at most every `every_s` seconds (the first at once), saying
how many were met meanwhile. So a broker away for an hour is one line a minute, not
thousands, and nothing is silent. Labels are fault kinds and reading kinds only, never
a card or a tenant (anyone who writes a trace could mint those).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

log = logging.getLogger("gpubill.agent")

# The kinds of fault, each a value of the `kind` label (docs/agent.md lists what each means).
FAULT_KINDS = (
    "nvml", "card_lost", "not_reported", "unknown_model", "counter_incomplete", "counter_reset", "counter_jump",
    "out_of_range", "trace_line", "clock_back", "assignments", "spool_write", "spool_full", "spool_torn", "kafka",
)


class AgentMetrics:
    """The agent's metrics, on a registry of its own (served by `serve`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.samples = Counter("gpubill_agent_samples_total", "Card-seconds sampled (one per card and second)",
                               registry=r)
        self.readings = Counter("gpubill_agent_readings_total", "Readings written to the spool, per kind",
                                ["kind"], registry=r)
        self.acked = Counter("gpubill_agent_acked_total", "Readings Kafka acknowledged (acks=all)", registry=r)
        self.errors = Counter("gpubill_agent_errors_total", "Faults met, per kind (docs/agent.md)", ["kind"],
                              registry=r)
        self.cards = Gauge("gpubill_agent_cards", "Cards the source sees now", registry=r)
        self.spool_bytes = Gauge("gpubill_agent_spool_bytes", "Bytes of the spool's segment files", registry=r)
        self.spool_records = Gauge("gpubill_agent_spool_records", "Readings in the spool not yet acknowledged",
                                   registry=r)
        self.oldest_unacked = Gauge("gpubill_agent_spool_oldest_unacked_seconds",
                                    "Age of the oldest reading not yet acknowledged (0: none)", registry=r)
        self.send_lag = Gauge("gpubill_agent_send_lag_seconds",
                              "From spooling to Kafka's acknowledgement, for the last reading acknowledged",
                              registry=r)
        self.paused = Gauge("gpubill_agent_sampling_paused",
                            "1 while sampling is stopped: the spool is over --spool-max-mb or cannot be written",
                            registry=r)
        self.source_ok = Gauge("gpubill_agent_source_check",
                               "1 when the source passed its start-up self-check (NVML binding fits)", registry=r)
        self.last_sample = Gauge("gpubill_agent_last_sample_timestamp_seconds",
                                 "The second last sampled (Unix time)", registry=r)
        for kind in FAULT_KINDS:
            self.errors.labels(kind)  # every kind shows, at 0, before its first fault

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Serve /metrics on `address`:`port` (0: not served); MetricsPortUnavailable when it
        cannot be bound. Loopback by default; a scraper on the node's network needs --metrics-address."""
        if not port:
            return
        from prometheus_client import start_http_server

        from streams.errors import MetricsPortUnavailable

        try:
            start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            raise MetricsPortUnavailable(
                f"--metrics-port: cannot serve metrics on {address}:{port} ({exc.strerror}); "
                "choose another port or 0 to turn metrics off") from None


class Faults:
    """Counts faults into `metrics` and logs each (kind, key) at most once every `every_s`."""

    def __init__(self, metrics: AgentMetrics, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger = log) -> None:
        self.metrics = metrics
        self.every_s = every_s
        self.clock = clock
        self.log = logger
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # (kind, key) → (last line, met since)
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}  # per kind, for tests and the closing line

    def report(self, kind: str, message: str, key: str = "", level: int = logging.WARNING, **fields: object) -> None:
        """One fault of `kind`: the metric counts it; a line is logged when none was for
        (kind, key) within `every_s`, with how many were met since the last line."""
        self.metrics.errors.labels(kind).inc()
        now = self.clock()
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            last, since = self._last.get((kind, key), (None, 0))
            if last is not None and now - last < self.every_s:
                self._last[(kind, key)] = (last, since + 1)
                return
            self._last[(kind, key)] = (now, 0)
        extra = {"fault": kind, **fields}
        if since:
            extra["more_since_last_line"] = since
        self.log.log(level, message, extra=extra)
