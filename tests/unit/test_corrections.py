"""Compensating events (schemas/corrections.py, issue 25 item 2): what a correction is, and
every hostile one refused with a one-line reason — the dead-letter reason, as for readings."""

from __future__ import annotations

import json

import pytest

from schemas.corrections import (
    MAX_SPAN_S,
    InvalidCorrection,
    Reattribute,
    VoidReadings,
    correction_event_id,
    parse_correction,
)
from schemas.events import parse_ts

NOW_S = parse_ts("2026-04-10T00:00:00Z")
REATTRIBUTE = {"kind": "reattribute", "event_id": "corr-1", "gpu_uuid": "GA1", "from": "2026-03-10T08:00:00Z",
               "to": "2026-03-10T10:00:00+00:00", "tenant": "beta", "instance": "i-beta-9",
               "reason": "agent on gz-n1 reported the wrong tenant", "author": "os:finance"}
VOID = {"kind": "void_readings", "event_id": "corr-2", "gpu_uuid": "GR1", "from": "2026-03-10T16:00:00+08:00",
        "to": "2026-03-10T17:00:00+08:00", "stream": "power", "reason": "meter fault", "author": "os:ops"}


def parsed(document: dict | bytes):
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    return parse_correction(raw, NOW_S)


def test_a_reattribution_and_a_void_read_back_with_their_span_in_utc_seconds():
    moved = parsed(REATTRIBUTE)
    assert isinstance(moved, Reattribute) and (moved.tenant, moved.instance) == ("beta", "i-beta-9")
    assert moved.to_s - moved.from_s == 2 * 3600  # [08:00, 10:00) UTC: two hours
    voided = parsed(VOID)
    assert isinstance(voided, VoidReadings) and voided.stream == "power"
    assert voided.from_s == parse_ts("2026-03-10T08:00:00Z")  # 16:00 at +08:00
    assert parsed({**REATTRIBUTE, "tenant": None, "instance": None}).tenant is None  # to nobody: not rented
    assert parsed({k: v for k, v in VOID.items() if k != "stream"}).stream == "both"


@pytest.mark.parametrize("change, reason", [
    ({"to": "2026-03-10T08:00:00Z"}, "'to' (2026-03-10T08:00:00Z) must be after 'from'"),
    ({"to": "2026-03-10T07:59:59Z"}, "must be after 'from'"),
    ({"from": "2026-02-01T00:00:00Z", "to": "2026-03-04T00:00:01Z"}, "is over 31 days: split it"),
    ({"tenant": "acme corp"}, "tenant: Value error, must be an id"),
    ({"tenant": "../etc"}, "must be an id"),
    ({"tenant": "\u0430cme"}, "must be an id"),  # a Cyrillic а
    ({"from": "2026-03-10 08:00"}, "must be an RFC 3339 timestamp"),
    ({"from": "2026-03-10T08:00:00"}, "must carry a UTC offset"),
    ({"from": "2026-04-09T00:00:00Z", "to": "2026-04-10T00:10:01Z"}, "is in the future"),
    ({"kind": "delete"}, "kind must be one of reattribute, void_readings"),
    ({"kind": None}, "kind must be one of"),
    ({"reason": ""}, "reason: String should have at least 1 character"),
    ({"reason": "fine\u202etxt.exe"}, "U+202E"),
    ({"author": "ops\nrm -rf"}, "U+000A"),
    ({"event_id": "x" * 129}, "event_id: String should have at most 128 characters"),
    ({"amount": 5}, "amount: Extra inputs are not permitted"),
    ({"stream": "power"}, "stream: Extra inputs are not permitted"),  # a reattribution has no stream
    ({"gpu_uuid": 7}, "gpu_uuid: Input should be a valid string"),
])
def test_hostile_corrections_are_refused_in_one_line(change, reason):
    with pytest.raises(InvalidCorrection) as refused:
        parsed({**REATTRIBUTE, **change})
    assert reason in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("raw, reason", [
    (b"not json", "not JSON"),
    (b"[]", "a correction is a JSON object"),
    (b'{"kind": "reattribute", "tenant": "a", "tenant": "b"}', 'duplicate key "tenant"'),
])
def test_bytes_that_are_no_correction_are_refused(raw, reason):
    with pytest.raises(InvalidCorrection, match=reason):
        parsed(raw)


def test_void_streams_are_usage_power_or_both():
    with pytest.raises(InvalidCorrection, match="stream: Input should be 'usage', 'power' or 'both'"):
        parsed({**VOID, "stream": "energy"})


def test_the_span_limit_is_31_days_inclusive():
    assert MAX_SPAN_S == 31 * 24 * 3600
    whole = parsed({**REATTRIBUTE, "from": "2026-02-01T00:00:00Z", "to": "2026-03-04T00:00:00Z"})  # 28 + 3 days
    assert whole.to_s - whole.from_s == MAX_SPAN_S


def test_the_event_id_comes_from_the_content_so_a_retried_command_is_the_same_event():
    content = {k: v for k, v in REATTRIBUTE.items() if k != "event_id"}
    first = correction_event_id(content)
    assert first == correction_event_id({**content, "event_id": "ignored"}) == correction_event_id(
        dict(reversed(list(content.items()))))
    assert first.startswith("corr-") and len(first) == 5 + 24
    assert correction_event_id({**content, "tenant": "gamma"}) != first
