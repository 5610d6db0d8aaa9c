"""Faults: every one counted, one log line a minute per kind and key (streams/agent/metrics.py)."""

from __future__ import annotations

import logging

from prometheus_client import generate_latest

from streams.agent.metrics import FAULT_KINDS, AgentMetrics, Faults
from tests.unit.agent_fakes import FakeClock


def test_every_fault_counts_and_a_line_a_minute_says_how_many_since(caplog):
    clock = FakeClock(0.0)
    metrics = AgentMetrics()
    faults = Faults(metrics, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gpubill.agent"):
        for _ in range(100):  # the broker away for 100 s, a round a second
            faults.report("kafka", "Kafka away", key="kafka")
            clock.now += 1
        faults.report("nvml", "card A", key="GPU-a")
        faults.report("nvml", "card B", key="GPU-b")  # another card: its own line
    lines = [(r.getMessage(), getattr(r, "more_since_last_line", 0)) for r in caplog.records]
    # kafka at 0 s, then at 60 s with the 59 met at 1..59 s; nvml once per card
    assert lines == [("Kafka away", 0), ("Kafka away", 59), ("card A", 0), ("card B", 0)]
    assert metrics.errors.labels("kafka")._value.get() == 100
    assert metrics.errors.labels("nvml")._value.get() == 2


def test_every_kind_is_exported_before_its_first_fault():
    page = generate_latest(AgentMetrics().registry).decode()
    for kind in FAULT_KINDS:
        assert f'gpubill_agent_errors_total{{kind="{kind}"}} 0.0' in page
