"""Billing events v1 (schemas/billing_events.py): one canonical form, ids that make a
re-emitted event the same event, and hostile messages refused with a reason."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from schemas.billing_events import (
    KINDS, SCHEMA_V1, BillingEvent, InvalidBillingEvent, encode_event, event_id, observed, parse_event,
)
from schemas.topics import TOPIC_BILLING_EVENTS

EVENT = BillingEvent(kind="budget_threshold", tenant="tenant-01", period="2026-11", threshold="80",
                     observed_at="2026-11-20T08:15:00.250Z", spend="8000.00", budget="10000.00")


def test_topic_is_versioned():
    assert TOPIC_BILLING_EVENTS == "gpu.billing-events.v1"


def test_event_id_is_the_hash_of_kind_tenant_period_threshold_only():
    # computed here independently: sha256 of the four with the version, the first 128 bits in hex
    text = "billing-event/v1\x1fbudget_threshold\x1ftenant-01\x1f2026-11\x1f80"
    assert EVENT.event_id == "be_" + hashlib.sha256(text.encode()).hexdigest()[:32]
    later = BillingEvent(**{**EVENT.__dict__, "observed_at": "2026-11-21T00:00:00.000Z", "spend": "8100.00"})
    assert later.event_id == EVENT.event_id  # seen again after a restart: the same event
    assert len({event_id(k, "tenant-01", "2026-11", "80") for k in KINDS}) == 3
    assert event_id("budget_threshold", "tenant-01", "2026-12", "80") != EVENT.event_id
    assert event_id("budget_threshold", "tenant-0", "12026-11", "80") != event_id("budget_threshold", "tenant-01", "2026-11", "80")


def test_encode_is_canonical_and_parses_back():
    raw = encode_event(EVENT)
    assert raw == (b'{"budget":"10000.00","event_id":"' + EVENT.event_id.encode() + b'","kind":"budget_threshold",'
                   b'"observed_at":"2026-11-20T08:15:00.250Z","period":"2026-11","spend":"8000.00",'
                   b'"tenant":"tenant-01","threshold":"80","version":1}')
    assert parse_event(raw) == EVENT


@pytest.mark.parametrize(("kind", "threshold"), [
    ("budget_threshold", "50"), ("budget_threshold", "100"), ("balance_low", "amount:500.00"),
    ("balance_low", "runway:24h"), ("balance_exhausted", "0"),
])
def test_each_kind_takes_its_own_thresholds(kind, threshold):
    event = BillingEvent(kind=kind, tenant="t1", period="2026-11", threshold=threshold,
                         observed_at="2026-11-01T00:00:00.000Z", balance="-0.01")
    assert parse_event(encode_event(event)) == event


def _doc(**changes):
    document = json.loads(encode_event(EVENT))
    document.update(changes)
    for name, value in list(document.items()):
        if value is None:
            del document[name]
    return json.dumps(document).encode()


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", "not JSON"), (b"[]", "JSON object"), (b'{"a":1,"a":2}', "duplicate key"), (b"NaN", "not JSON"),
    (b" " * 5000, "at most 4096"), (_doc(extra="x"), "unknown field 'extra'"), (_doc(tenant=None), "missing field 'tenant'"),
    (_doc(version=2), "version must be 1"), (_doc(version=True), "version must be 1"), (_doc(version=1.0), "version must be 1"),
    (_doc(kind="refund"), "kind must be one of"), (_doc(tenant="../etc"), "tenant is not an id"),
    (_doc(tenant="t\u0301"), "tenant is not an id"), (_doc(period="2026-13"), "period"), (_doc(period="２０２６-11"), "period"),
    (_doc(spend=8000.0), "spend must be a string"), (_doc(spend="8000"), "spend"), (_doc(spend="1e3"), "spend"),
    (_doc(spend="8000.00\n"), "spend"), (_doc(observed_at="2026-11-20 08:15:00"), "observed_at"),
    (_doc(threshold="amount:5.00"), "threshold"), (_doc(threshold="101"), "threshold"),
    (_doc(event_id="be_" + "0" * 32), "event_id is not the hash"),
])
def test_hostile_messages_are_refused_with_a_reason(raw, reason):
    with pytest.raises(InvalidBillingEvent, match=reason.replace("(", r"\(")):
        parse_event(raw)


def test_an_invalid_event_is_never_encoded():
    with pytest.raises(InvalidBillingEvent):
        encode_event(BillingEvent(kind="balance_exhausted", tenant="t1", period="2026-11", threshold="50",
                                  observed_at="2026-11-01T00:00:00.000Z"))


def test_observed_is_utc_milliseconds():
    shanghai = timezone(timedelta(hours=8))
    assert observed(datetime(2026, 11, 20, 16, 15, 0, 250999, tzinfo=shanghai)) == "2026-11-20T08:15:00.250Z"
    assert observed(datetime(2026, 11, 20, 8, 15, tzinfo=UTC)) == "2026-11-20T08:15:00.000Z"


def test_the_published_schema_says_what_the_parser_enforces():
    assert SCHEMA_V1["properties"]["kind"]["enum"] == list(KINDS)
    assert set(SCHEMA_V1["required"]) == {"version", "event_id", "kind", "tenant", "period", "threshold", "observed_at"}
    assert SCHEMA_V1["additionalProperties"] is False
    json.dumps(SCHEMA_V1)  # a plain JSON document
