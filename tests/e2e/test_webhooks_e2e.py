"""Webhooks on the real broker: billing events produced to gpu.billing-events.v1 with
schemas.billing_events.encode_event, `gpubill events deliver --drain` run as a user runs it,
a local receiver that fails twice before it accepts, and the attempts read back with `gpubill events deliveries`.
A second drain finds the offsets committed and sends nothing again."""

from __future__ import annotations

import json

import pytest

from schemas.billing_events import BillingEvent, encode_event
from schemas.topics import TOPIC_BILLING_EVENTS
from streams.kafka.admin import ensure_topics
from tests.unit.test_webhooks import SECRET, Receiver, answer, independent_signature_ok

pytestmark = pytest.mark.e2e

EVENTS = [
    BillingEvent(kind="budget_threshold", tenant="acme", period="2026-12", threshold="80",
                 observed_at="2026-12-01T09:00:00.000Z", spend="1600.00", budget="2000.00"),
    BillingEvent(kind="balance_exhausted", tenant="beta", period="2026-12", threshold="0",
                 observed_at="2026-12-01T09:05:00.000Z", balance="0.00"),
]


def test_events_on_the_topic_are_delivered_signed_recorded_and_committed(broker, gpubill):
    from kafka import KafkaProducer

    ensure_topics(broker.bootstrap, {TOPIC_BILLING_EVENTS: 4})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for event in EVENTS:
        producer.send(TOPIC_BILLING_EVENTS, key=event.tenant.encode(), value=encode_event(event)).get(timeout=30)
    producer.send(TOPIC_BILLING_EVENTS, key=b"acme", value=b'{"not": "an event"}').get(timeout=30)
    producer.close()

    gpubill.env["GPUBILL_WEBHOOK_SECRET"] = SECRET
    with Receiver(answer(503, b"warming up"), answer(500, b"still not"), answer(200, b"ok")) as receiver:
        first = gpubill.run("events", "deliver", "--drain", "--url", receiver.url, timeout=180)
        assert first.stdout.strip() == "2 events delivered, 1 given up", first.stderr
        # 4 POSTs: one event three times (503, 500, then 200), the other once; the invalid message never
        by_id: dict[str, list] = {}
        for request in receiver.received:
            assert independent_signature_ok(request.headers, request.body, SECRET)
            by_id.setdefault(request.headers["Gpubill-Event-Id"], []).append(request.body)
        assert len(receiver.received) == 4
        assert {i: set(bodies) for i, bodies in by_id.items()} == {e.event_id: {encode_event(e)} for e in EVENTS}

        again = gpubill.run("events", "deliver", "--drain", "--url", receiver.url, timeout=180)
        assert again.stdout.strip() == "0 events delivered, 0 given up", again.stderr
        assert len(receiver.received) == 4  # committed: nothing sent twice

    rows = json.loads(gpubill.run("events", "deliveries", "--json").stdout)
    outcomes = sorted((r["event_id"], r["attempt"], r["status"], r["http_status"]) for r in rows)
    first_id = receiver.received[0].headers["Gpubill-Event-Id"]
    other_id = next(e.event_id for e in EVENTS if e.event_id != first_id)
    # one delivery recorded as three attempts
    assert outcomes == sorted([("", 0, "gave_up", None), (first_id, 1, "failed", 503), (first_id, 2, "failed", 500),
                               (first_id, 3, "delivered", 200), (other_id, 1, "delivered", 200)])
    (invalid,) = [r for r in rows if r["event_id"] == ""]
    assert invalid["error"].startswith("not a billing event at partition ") and "offset " in invalid["error"]
