"""The worker's metrics: counters from a batch, and a taken port as a one-line error."""

from __future__ import annotations

import socket

import pytest
from prometheus_client import CollectorRegistry

from gpubill.errors import ConfigError
from streams.metrics import Metrics


def test_a_taken_metrics_port_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"GPUBILL_METRICS_PORT: cannot serve metrics on port {port}"):
            Metrics.serve(port)


def test_lag_is_high_water_minus_position_never_negative():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.lag({("gpu.usage.v1", 0): 100, ("gpu.usage.v1", 1): 5}, {("gpu.usage.v1", 0): 60, ("gpu.usage.v1", 1): 9})
    assert registry.get_sample_value("gpubill_consumer_lag", {"topic": "gpu.usage.v1", "partition": "0"}) == 40
    assert registry.get_sample_value("gpubill_consumer_lag", {"topic": "gpu.usage.v1", "partition": "1"}) == 0
