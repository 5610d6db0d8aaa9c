"""Billing events produced outside the spend tracker: the dunning pass's (billing/dunning.py, issue 38).

    EventsProducer(settings)     a context manager; .send(events) returns once the broker acknowledged all

Each event goes to gpu.billing-events.v1 keyed by its tenant, on the tenant's partition — the
one the spend tracker places the tenant's events on (schemas.spend.spend_partition over the
topic's partitions) — so a webhook receiver gets a tenant's events in one order. The topic is
made when missing, as the tracker makes it (streams/kafka/admin.py: kept for 400 days).
The producer is idempotent with acks=all: a retry of the client never duplicates a message;
a pass that produces again after a crash does, with the same event_id (consumers deduplicate
on it). Kafka's errors are translated here: KafkaUnreachable, one line.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from schemas.billing_events import BillingEvent, encode_event
from schemas.spend import spend_partition
from schemas.topics import TOPIC_BILLING_EVENTS
from streams.errors import KafkaUnreachable
from streams.kafka.admin import EVENTS_TOPIC_CONFIG, ensure_topics, nothing_listens
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, client_options

__all__ = ["EventsProducer"]


class EventsProducer:
    """Produces billing events to gpu.billing-events.v1; see the module docstring."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._producer: KafkaProducer | None = None
        self._partitions = 0

    def __enter__(self) -> "EventsProducer":
        if nothing_listens(self.settings.kafka):  # definite at once, before a client retries for TIMEOUT_MS
            raise KafkaUnreachable(self.settings.kafka, "billing events cannot be produced: nothing was sent")
        options = client_options(self.settings, client="kafka-python")
        counts = ensure_topics(self.settings.kafka, {TOPIC_BILLING_EVENTS: self.settings.partitions}, options=options,
                               configs={TOPIC_BILLING_EVENTS: EVENTS_TOPIC_CONFIG})
        self._partitions = counts[TOPIC_BILLING_EVENTS]
        try:
            self._producer = KafkaProducer(bootstrap_servers=self.settings.kafka.split(","), acks="all", linger_ms=0,
                                           enable_idempotence=True, max_block_ms=TIMEOUT_MS,
                                           request_timeout_ms=TIMEOUT_MS, bootstrap_timeout_ms=TIMEOUT_MS,
                                           allow_auto_create_topics=False, **options)
        except KafkaError as exc:
            raise KafkaUnreachable(self.settings.kafka, f"the billing events' producer cannot start: {exc}") from exc
        return self

    def send(self, events: list[BillingEvent]) -> None:
        """Produce `events`, each on its tenant's partition; returns once every one is acknowledged
        (acks=all), else KafkaUnreachable (some may be on the topic: produce them again)."""
        if self._producer is None:
            raise RuntimeError("EventsProducer.send outside its `with` block")
        try:
            futures = [self._producer.send(TOPIC_BILLING_EVENTS, key=event.tenant.encode(), value=encode_event(event),
                                           partition=spend_partition(event.tenant, self._partitions))
                       for event in events]
            self._producer.flush(timeout=TIMEOUT_MS / 1000)
            for future in futures:
                future.get(timeout=TIMEOUT_MS / 1000)
        except KafkaError as exc:
            raise KafkaUnreachable(self.settings.kafka, f"billing events not acknowledged: {exc}") from exc

    def __exit__(self, *exc: Any) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=5)
            self._producer = None
