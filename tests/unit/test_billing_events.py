"""Billing events v1 (schemas/billing_events.py): one canonical form, ids that make a
re-emitted event the same event, and hostile messages refused with a reason."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from schemas.billing_events import (
    DUNNING_KINDS, KINDS, SCHEMA_V1, BillingEvent, InvalidBillingEvent, encode_event, event_id, observed, parse_event,
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
    assert len({event_id(k, "tenant-01", "2026-11", "80") for k in KINDS}) == len(KINDS) == 5
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


# ------------------------------------------------------------------ the dunning kinds (issue 38)

OVERDUE = BillingEvent(kind="invoice_overdue", tenant="beta", period="2026-03", threshold="7",
                       observed_at="2026-04-25T02:00:00.000Z", invoice="GB-2026-000002", due_date="2026-04-17",
                       days_overdue="8", outstanding="252.60")


def test_a_dunning_event_id_is_the_hash_with_its_invoice():
    # computed here independently: the four of every kind, then the invoice number
    text = "billing-event/v1\x1finvoice_overdue\x1fbeta\x1f2026-03\x1f7\x1fGB-2026-000002"
    assert OVERDUE.event_id == "be_" + hashlib.sha256(text.encode()).hexdigest()[:32]
    # seen again a day later, with less outstanding: the same event
    later = BillingEvent(**{**OVERDUE.__dict__, "observed_at": "2026-04-26T02:00:00.000Z", "days_overdue": "9",
                            "outstanding": "100.00"})
    assert later.event_id == OVERDUE.event_id
    # another invoice of the same tenant and period, another step, the suspension: other events
    others = {BillingEvent(**{**OVERDUE.__dict__, **change}).event_id for change in (
        {"invoice": "GB-2026-000003"}, {"threshold": "14"}, {"kind": "suspend_new_rentals"})}
    assert len(others) == 3 and OVERDUE.event_id not in others
    # the ids of the other kinds are what they were before invoices existed (an invoice is not part of them)
    assert event_id("budget_threshold", "tenant-01", "2026-11", "80", "GB-2026-000002") == EVENT.event_id


def test_a_dunning_event_is_canonical_and_parses_back():
    raw = encode_event(OVERDUE)
    assert raw == (b'{"days_overdue":"8","due_date":"2026-04-17","event_id":"' + OVERDUE.event_id.encode()
                   + b'","invoice":"GB-2026-000002","kind":"invoice_overdue","observed_at":"2026-04-25T02:00:00.000Z",'
                   b'"outstanding":"252.60","period":"2026-03","tenant":"beta","threshold":"7","version":1}')
    assert parse_event(raw) == OVERDUE
    suspend = BillingEvent(**{**OVERDUE.__dict__, "kind": "suspend_new_rentals", "threshold": "30",
                              "days_overdue": "30"})
    assert parse_event(encode_event(suspend)) == suspend


def _dunning_doc(**changes):
    document = json.loads(encode_event(OVERDUE))
    document.update(changes)
    for name, value in list(document.items()):
        if value is None:
            del document[name]
    return json.dumps(document).encode()


@pytest.mark.parametrize(("raw", "reason"), [
    (_dunning_doc(invoice=None), "missing field 'invoice'"), (_dunning_doc(outstanding=None), "missing field 'outstanding'"),
    (_dunning_doc(due_date=None), "missing field 'due_date'"), (_dunning_doc(days_overdue=None), "missing field 'days_overdue'"),
    (_dunning_doc(spend="1.00"), "field 'spend' is not one of invoice_overdue's"),
    (_dunning_doc(balance="1.00"), "field 'balance' is not one of"),
    (_doc(invoice="GB-2026-000002"), "field 'invoice' is only for invoice_overdue and suspend_new_rentals"),
    (_doc(outstanding="1.00"), "field 'outstanding' is only for"),
    (_dunning_doc(threshold="0"), "threshold '0' is not one of invoice_overdue's"),
    (_dunning_doc(threshold="366"), "threshold '366' is not one of"), (_dunning_doc(threshold="07"), "threshold"),
    (_dunning_doc(threshold="runway:24h"), "threshold"), (_dunning_doc(invoice="GB-26-1"), "invoice"),
    (_dunning_doc(invoice="../etc/passwd"), "invoice"), (_dunning_doc(invoice="GB-2026-000002\n"), "invoice"),
    (_dunning_doc(outstanding="-1.00"), "outstanding"), (_dunning_doc(outstanding="1.5"), "outstanding"),
    (_dunning_doc(outstanding=252.6), "outstanding must be a string"), (_dunning_doc(days_overdue=8), "days_overdue must"),
    (_dunning_doc(days_overdue="-1"), "days_overdue"), (_dunning_doc(days_overdue="08"), "days_overdue"),
    (_dunning_doc(due_date="2026-4-17"), "due_date"), (_dunning_doc(due_date="2026-13-01"), "due_date"),
    (_dunning_doc(event_id=OVERDUE.event_id.replace("be_", "be_0")[:35]), "event_id is not the hash of kind, tenant, "
                                                                           "period and threshold and invoice"),
])
def test_hostile_dunning_messages_are_refused_with_a_reason(raw, reason):
    with pytest.raises(InvalidBillingEvent, match=reason.replace("(", r"\(")):
        parse_event(raw)


def test_a_dunning_event_with_another_invoice_s_id_is_refused():
    other = BillingEvent(**{**OVERDUE.__dict__, "invoice": "GB-2026-000003"})
    with pytest.raises(InvalidBillingEvent, match="event_id is not the hash"):
        parse_event(_dunning_doc(event_id=other.event_id))


# ------------------------------------------------------------------ the schema and the parser, held to each other


def _schema_valid(schema, value) -> bool:
    """The part of JSON Schema 2020-12 that SCHEMA_V1 uses, written here from the specification
    (boolean schemas, type, const, enum, pattern — ECMA-262: `$` is the end, never before a
    newline —, required, properties, additionalProperties, allOf, if/then/else)."""
    if schema is True or schema is False:
        return schema
    kind = schema.get("type")
    if kind == "object" and not isinstance(value, dict):
        return False
    if kind == "string" and not isinstance(value, str):
        return False
    if "const" in schema and not (value == schema["const"] and type(value) is type(schema["const"])
                                  or isinstance(value, float) and value == schema["const"]):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "pattern" in schema and isinstance(value, str):
        pattern = schema["pattern"][:-1] + r"\Z" if schema["pattern"].endswith("$") else schema["pattern"]
        if re.search(pattern, value) is None:
            return False
    if isinstance(value, dict):
        if any(name not in value for name in schema.get("required", ())):
            return False
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                if not _schema_valid(properties[name], item):
                    return False
            elif schema.get("additionalProperties", True) is False:
                return False
    for part in schema.get("allOf", ()):
        if not _schema_valid(part, value):
            return False
    if "if" in schema:
        branch = schema.get("then", True) if _schema_valid(schema["if"], value) else schema.get("else", True)
        if not _schema_valid(branch, value):
            return False
    return True


def _documents():
    """Every kind's valid event, and each mutated: a field removed, a field of the other family added,
    hostile values; event_id recomputed where it can be (the schema cannot check a hash)."""
    bases = [json.loads(encode_event(e)) for e in (
        EVENT, OVERDUE, BillingEvent(**{**OVERDUE.__dict__, "kind": "suspend_new_rentals", "threshold": "30"}),
        BillingEvent(kind="balance_low", tenant="t1", period="2026-11", threshold="runway:24h",
                     observed_at="2026-11-01T00:00:00.000Z", balance="12.00"),
        BillingEvent(kind="balance_exhausted", tenant="t1", period="2026-11", threshold="0",
                     observed_at="2026-11-01T00:00:00.000Z", balance="-0.01"))]
    values = {"threshold": ["0", "7", "80", "100", "101", "365", "366", "amount:5.00", "runway:24h", "07"],
              "kind": list(KINDS) + ["refund"], "invoice": ["GB-2026-000001", "GB-2026-1", "gb-2026-000001"],
              "due_date": ["2026-04-17", "2026-4-17", "2026-04-17\n"], "days_overdue": ["0", "8", "08", "-1", 8],
              "outstanding": ["0.00", "252.60", "-1.00", "1.5"], "spend": ["1.00"], "budget": ["2.00"],
              "balance": ["-3.00"], "tenant": ["acme", "../x"], "period": ["2026-03", "2026-13"],
              "observed_at": ["2026-04-25T02:00:00.000Z", "2026-04-25 02:00:00"], "version": [1, 2, True, "1"]}
    for base in bases:
        yield base
        for name in base:
            if name != "event_id":
                yield {k: v for k, v in base.items() if k != name}
        for name, options in values.items():
            for value in options:
                yield {**base, name: value}


def _with_id(document):
    names = ("kind", "tenant", "period", "threshold")
    if all(isinstance(document.get(n), str) for n in names) and isinstance(document.get("invoice", ""), str):
        document = {**document, "event_id": event_id(*(document[n] for n in names), document.get("invoice", ""))}
    return document


def test_the_published_schema_accepts_exactly_what_the_parser_accepts():
    outcomes = []
    for document in map(_with_id, _documents()):
        try:
            parse_event(json.dumps(document).encode())
            parsed = True
        except InvalidBillingEvent:
            parsed = False
        assert _schema_valid(SCHEMA_V1, document) == parsed, document
        outcomes.append(parsed)
    assert outcomes.count(True) > 20 and outcomes.count(False) > 150  # both answers, many times


def test_the_schema_checker_here_is_not_blind():
    # the checker above refuses what it must (else the test above proves nothing)
    good = json.loads(encode_event(OVERDUE))
    assert _schema_valid(SCHEMA_V1, good)
    assert not _schema_valid(SCHEMA_V1, {**good, "spend": "1.00"})
    assert not _schema_valid(SCHEMA_V1, {k: v for k, v in good.items() if k != "invoice"})
    assert not _schema_valid(SCHEMA_V1, {**good, "invoice": "GB-2026-000002\n"})
    assert not _schema_valid(SCHEMA_V1, {**json.loads(encode_event(EVENT)), "threshold": "0"})
    assert not _schema_valid(SCHEMA_V1, {**json.loads(encode_event(EVENT)), "invoice": "GB-2026-000002"})
    assert SCHEMA_V1["allOf"][-1]["if"]["properties"]["kind"]["enum"] == list(DUNNING_KINDS)
