"""Prometheus metrics of the worker (served by `gpubill worker` / `gpubill up`)."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from streams.errors import MetricsPortUnavailable


class Metrics:
    """The worker's counters; one instance per process."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.readings_in = Counter("gpubill_readings_in_total", "Messages read, per topic", ["topic"], registry=registry)
        self.deadletters = Counter("gpubill_deadletters_total", "Messages dead-lettered", registry=registry)
        self.duplicates = Counter("gpubill_duplicates_total", "Readings dropped as duplicates (same event_id)", registry=registry)
        self.conflicts = Counter("gpubill_conflicts_total", "Readings for an already-seen (stream, gpu, second)", registry=registry)
        self.unallocated = Counter("gpubill_unallocated_seconds_total", "Energy seconds rated without a tenant (yet)", registry=registry)
        self.flush_seconds = Histogram("gpubill_flush_seconds", "Time to write one batch to ClickHouse", registry=registry)
        self.batch_rows = Histogram(
            "gpubill_batch_rows", "Rows written per batch", buckets=(10, 100, 1000, 5000, 20000, 100000), registry=registry
        )
        self.rules_invalid = Gauge(
            "gpubill_rules_invalid", "1 while the rule files on disk are invalid (the last good set is in use)",
            registry=registry,
        )
        self.consumer_lag = Gauge(
            "gpubill_consumer_lag", "Messages not yet processed, per topic and partition (high water − position)",
            ["topic", "partition"], registry=registry,
        )
        self.state_entries = Gauge("gpubill_dedupe_state_entries", "Readings held in the dedupe horizon", registry=registry)
        self.fast_record_sets = Gauge(
            "gpubill_fast_record_sets",
            "1 while fetches are handed on as whole record sets (streams/kafka/record_sets.py); 0: record by record",
            registry=registry,
        )
        self.state_bytes = Gauge(
            "gpubill_dedupe_state_bytes", "Memory the readings held in the dedupe horizon take (native core)",
            registry=registry,
        )

    def batch(self, result, rater) -> None:
        for topic, count in result.readings_in.items():
            self.readings_in.labels(topic).inc(count)
        self.deadletters.inc(len(result.deadletters))
        self.duplicates.inc(result.outcome.duplicates)
        self.conflicts.inc(len(result.outcome.conflicts))
        self.unallocated.inc(result.outcome.unallocated)
        self.state_entries.set(rater.state_size)
        if rater.state_bytes is not None:
            self.state_bytes.set(rater.state_bytes)

    def flushed(self, seconds: float, outcome, deadletters: int) -> None:
        self.flush_seconds.observe(seconds)
        self.batch_rows.observe(outcome.row_count + deadletters)

    def lag(self, highwaters: dict, positions: dict) -> None:
        """Set the lag of each assigned (topic, partition) from its high water mark."""
        for (topic, partition), highwater in highwaters.items():
            self.consumer_lag.labels(topic, str(partition)).set(max(highwater - positions.get((topic, partition), 0), 0))

    @staticmethod
    def serve(port: int) -> None:
        """Serve /metrics on `port` (0: not at all); a taken port is a one-line error."""
        if port:
            try:
                start_http_server(port)
            except OSError as exc:
                raise MetricsPortUnavailable(
                    f"GPUBILL_METRICS_PORT: cannot serve metrics on port {port} ({exc.strerror}); "
                    "choose another port or 0 to turn metrics off"
                ) from None
