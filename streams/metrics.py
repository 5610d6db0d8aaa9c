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
        self.conflicts = Counter("gpubill_conflicts_total", "Readings refused as conflicts: an already-seen (stream, gpu, second) or a reused event_id", registry=registry)
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
        # Counts only, labelled "current" / "previous" billing period: a tenant id is never a
        # label (anyone who can send a reading could mint ids, and so time series).
        self.unregistered_tenants = Gauge(
            "gpubill_unregistered_tenants",
            "Tenant ids with rated usage in the billing period that are not registered (gpubill tenant unknown)",
            ["period"], registry=registry,
        )
        self.unregistered_seconds = Gauge(
            "gpubill_unregistered_rented_seconds", "GPU-seconds rented in the billing period by those tenant ids",
            ["period"], registry=registry,
        )
        self.invoice_drafts = Gauge(
            "gpubill_invoice_drafts_waiting",
            "Invoice drafts waiting for review (billing.toml review = \"manual\"; gpubill invoice drafts)",
            registry=registry,
        )
        self.state_bytes = Gauge(
            "gpubill_dedupe_state_bytes", "Memory the readings held in the dedupe horizon take (native core)",
            registry=registry,
        )

        # liveness (issue 40, streams/liveness.py)
        self.worker_stalled = Gauge(
            "gpubill_worker_stalled",
            "1 while some assigned partition has lag and its committed offset has not moved for GPUBILL_STALL_S",
            registry=registry,
        )
        self.worker_stalled_seconds = Gauge(
            "gpubill_worker_stalled_seconds",
            "Seconds the longest-stalled partition's committed offset has not moved while it had lag (0: not stalled)",
            registry=registry,
        )
        self.worker_stalls = Counter(
            "gpubill_worker_stalls_total", "Stalls detected, by what the worker was waiting on "
            "(clickhouse, batches, kafka, rebalance)", ["waiting_on"], registry=registry,
        )
        self.worker_restarts = Counter(
            "gpubill_worker_restarts_total", "Restarts of the worker inside `gpubill up` after a stall",
            registry=registry,
        )

        # live spend (issue 15, streams/spend/)
        self.spend_freshness = Histogram(
            "gpubill_spend_freshness_seconds",
            "From the oldest reading of a batch (its Kafka timestamp) to its spend applied in the tracker's table",
            buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300), registry=registry,
        )
        self.spend_records = Counter("gpubill_spend_records_total", "Spend records produced by this worker",
                                     registry=registry)
        self.spend_refused = Counter("gpubill_spend_records_refused_total",
                                     "Spend records the tracker refused: invalid, or older than its high-water marks",
                                     ["reason"], registry=registry)
        self.billing_events = Counter("gpubill_billing_events_total", "Billing events emitted by this worker",
                                      ["kind"], registry=registry)

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

    def liveness(self, verdict) -> None:
        """Set the stall gauges from a streams.liveness `Verdict`; count a new stall once."""
        self.worker_stalled.set(int(verdict.stalled))
        self.worker_stalled_seconds.set(round(verdict.stalled_s, 1) if verdict.stalled else 0)
        if verdict.new:
            self.worker_stalls.labels(verdict.waiting_on).inc()

    def unregistered(self, counts: dict[str, tuple[int, int]], current: str, previous: str) -> None:
        """Set the unregistered-tenant gauges from `unregistered_counts` (0 for a period without any)."""
        for label, period in (("current", current), ("previous", previous)):
            tenants, seconds = counts.get(period, (0, 0))
            self.unregistered_tenants.labels(label).set(tenants)
            self.unregistered_seconds.labels(label).set(seconds)

    @staticmethod
    def serve(port: int, host: str = "127.0.0.1") -> None:
        """Serve /metrics on `host`:`port` (0: not at all); a taken port is a one-line error.

        Loopback unless told otherwise (GPUBILL_METRICS_HOST): the counters name topics and
        volumes, nothing for every interface of a laptop to show."""
        if port:
            try:
                start_http_server(port, addr=host)
            except OSError as exc:
                raise MetricsPortUnavailable(
                    f"GPUBILL_METRICS_PORT: cannot serve metrics on port {port} ({exc.strerror}); "
                    "choose another port or 0 to turn metrics off"
                ) from None


# v_unregistered_usage (migration 0011): rated usage of tenant ids that are not registered.
# `gpubill tenant unknown` applies the same filter to the invoice run's source to price it
# (billing/tenants.py `unregistered_sql`; tests/unit/test_tenants.py holds the two equal).
UNREGISTERED_SQL = (
    "SELECT period, count(), sum(rented_seconds) FROM v_unregistered_usage "
    "WHERE period IN ({current:String}, {previous:String}) GROUP BY period"
)


def unregistered_counts(database, current: str, previous: str) -> dict[str, tuple[int, int]]:
    """Period → (unregistered tenant ids with rated usage, GPU-seconds they rented), for the
    `current` and `previous` billing periods: one query, run by the worker once a minute."""
    rows = database.query(UNREGISTERED_SQL, {"current": current, "previous": previous})
    return {period: (int(tenants), int(seconds)) for period, tenants, seconds in rows}
