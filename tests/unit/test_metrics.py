"""The worker's metrics: counters from a batch, the horizon's size, and a taken port as a one-line error."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.errors import MetricsPortUnavailable
from streams.metrics import Metrics
from streams.rating.native import NativeRater, process_batch_native
from streams.kafka.message import Message


def test_a_taken_metrics_port_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortUnavailable, match=f"GPUBILL_METRICS_PORT: cannot serve metrics on port {port}"):
            Metrics.serve(port)


def test_lag_is_high_water_minus_position_never_negative():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.lag({("gpu.usage.v1", 0): 100, ("gpu.usage.v1", 1): 5}, {("gpu.usage.v1", 0): 60, ("gpu.usage.v1", 1): 9})
    assert registry.get_sample_value("gpubill_consumer_lag", {"topic": "gpu.usage.v1", "partition": "0"}) == 40
    assert registry.get_sample_value("gpubill_consumer_lag", {"topic": "gpu.usage.v1", "partition": "1"}) == 0


@pytest.mark.skipif(not NativeRater.available(), reason="gpubill_native is not built")
def test_the_horizon_is_reported_in_readings_and_bytes():
    usage = (b'{"kind": "usage", "event_id": "u1", "ts": "2026-03-01T00:00:00Z", "site": "gz-guian", '
             b'"node": "node-01", "gpu_uuid": "GPU-a", "gpu_model": "A800-80G", "tenant": null, '
             b'"instance": null, "util_pct": 0, "mem_used_mib": 0}')
    power = (b'{"kind": "power", "event_id": "p1", "ts": "2026-03-01T00:00:00Z", "site": "gz-guian", '
             b'"node": "node-01", "gpu_uuid": "GPU-a", "power_w": 300}')
    rater = NativeRater(load_rules(DEFAULT_RULES_DIR))
    result = process_batch_native([Message(TOPIC_USAGE, 0, 0, b"GPU-a", usage, (), 0),
                                   Message(TOPIC_POWER, 0, 0, b"GPU-a", power, (), 0)],
                                  rater, now=datetime(2026, 3, 1, 0, 1, tzinfo=UTC))
    assert not result.deadletters
    registry = CollectorRegistry()
    Metrics(registry).batch(result, rater)
    assert registry.get_sample_value("gpubill_dedupe_state_entries") == 2
    # one (gpu, second) record, in a first chunk of 4,096 records × 104 bytes = 425,984
    # bytes, plus the three indexes
    held = registry.get_sample_value("gpubill_dedupe_state_bytes")
    assert held == rater.state_bytes and 425_984 < held < 425_984 + 4_096
