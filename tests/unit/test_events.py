"""The v1 readings of SPEC §3: what is accepted, what it means, and why the rest is refused.

Epoch arithmetic used below, worked by hand:
    days 1970-01-01 → 2026-01-01 = 56 × 365 + 14 leap days (1972 … 2024) = 20 454
    + January (31) + February 2026 (28, not a leap year)                 = 20 513 days
    2026-03-01T00:00:00Z = 20 513 × 86 400                              = 1 772 323 200
    2026-03-01T00:00:05Z                                                 = 1 772 323 205
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.errors import InvalidReading
from schemas.events import (
    PowerReading,
    UsageReading,
    parse_reading,
    parse_ts,
    split_message,
)

RULES = load_rules(DEFAULT_RULES_DIR)
SITES = frozenset(RULES.site_ids)
MODELS = frozenset(RULES.model_ids)

MAR_1_UTC = 1_772_323_200  # 2026-03-01T00:00:00Z
T5 = MAR_1_UTC + 5  # 2026-03-01T00:00:05Z = 1 772 323 205
NOW_S = MAR_1_UTC + 3600  # the clock of these tests: 2026-03-01T01:00:00Z


def usage(**changes: Any) -> dict[str, Any]:
    doc = {
        "kind": "usage", "event_id": "u-1", "ts": "2026-03-01T00:00:05Z", "site": "gz-guian", "node": "node-01",
        "gpu_uuid": "GPU-0001", "gpu_model": "A800-80G", "tenant": "acme", "instance": "i-1",
        "util_pct": 87.5, "mem_used_mib": 40960,
    }
    doc.update(changes)
    return doc


def power(**changes: Any) -> dict[str, Any]:
    doc = {
        "kind": "power", "event_id": "p-1", "ts": "2026-03-01T00:00:05Z", "site": "gz-guian", "node": "node-01",
        "gpu_uuid": "GPU-0001", "power_w": 300,
    }
    doc.update(changes)
    return doc


def without(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != name}


def encode(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def parse(raw: bytes, expect_kind: str | None = None):
    return parse_reading(raw, known_sites=SITES, known_models=MODELS, now_s=NOW_S, expect_kind=expect_kind)


def refusal(raw: bytes, expect_kind: str | None = None) -> str:
    with pytest.raises(InvalidReading) as caught:
        parse(raw, expect_kind)
    return str(caught.value)


# timestamps --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ts", "second"),
    [
        ("2026-03-01T00:00:05Z", T5),
        ("2026-03-01T00:00:05.999Z", T5),  # floor, never rounded up to :06
        ("2026-03-01T00:00:05.999999999Z", T5),  # nanoseconds: still floor
        ("2026-03-01T00:00:05.000Z", T5),
        ("2026-03-01T08:00:05+08:00", T5),  # 08:00 in UTC+8 is 00:00Z
        ("2026-03-01T08:00:05.75+08:00", T5),
        ("2026-02-28T19:00:05.25-05:00", T5),  # 19:00 in UTC−5 is 00:00Z the next day
        ("2026-03-01t00:00:05z", T5),  # RFC 3339 allows lower-case t and z
        ("2026-03-01 00:00:05Z", T5),  # ... and a space for the T
        ("2026-03-01T00:00:04.000001Z", T5 - 1),
        ("2026-03-01T07:59:59.9+08:00", MAR_1_UTC - 1),  # 2026-02-28T23:59:59.9Z
        ("2026-03-01T00:00:00Z", MAR_1_UTC),
    ],
)
def test_timestamp_covers_the_floor_second(ts: str, second: int) -> None:
    assert parse_ts(ts) == second
    assert parse(encode(usage(ts=ts))).second == second
    assert parse(encode(power(ts=ts))).second == second


def test_epoch_constant_by_calendar() -> None:
    # 56 years, 14 of them leap (1972, 1976, …, 2024), then Jan + Feb 2026.
    assert MAR_1_UTC == (56 * 365 + 14 + 31 + 28) * 86_400


# valid readings ----------------------------------------------------------------------


def test_usage_reading_keeps_its_fields_exactly() -> None:
    reading = parse(encode(usage()), expect_kind="usage")
    assert isinstance(reading, UsageReading)
    assert (reading.kind, reading.event_id, reading.ts, reading.site, reading.node, reading.gpu_uuid) == (
        "usage", "u-1", "2026-03-01T00:00:05Z", "gz-guian", "node-01", "GPU-0001",
    )
    assert (reading.gpu_model, reading.tenant, reading.instance) == ("A800-80G", "acme", "i-1")
    assert reading.util_pct == Decimal("87.5") and isinstance(reading.util_pct, Decimal)
    assert reading.mem_used_mib == 40960


@pytest.mark.parametrize(
    "changes",
    [
        {"tenant": None, "instance": None},  # an idle card
        {"util_pct": 0, "mem_used_mib": 0},  # both lower bounds included
        {"util_pct": 100},  # upper bound included
        {"gpu_model": "RTX4090"},
        {"gpu_model": "H800-80G"},
        {"event_id": "e" * 128},  # 128 characters is still allowed
        {"ts": "2026-03-01T01:10:00Z"},  # exactly 10 minutes ahead of NOW_S is allowed
        {"ts": "2026-03-01T01:10:00.999Z"},  # floor is NOW_S + 600: still allowed
        {"ts": "2026-03-01T09:10:00+08:00"},  # the same instant written in UTC+8
    ],
)
def test_usage_reading_accepted(changes: dict[str, Any]) -> None:
    reading = parse(encode(usage(**changes)))
    for name, value in changes.items():
        assert getattr(reading, name) == value


@pytest.mark.parametrize("sent, kept", [
    (b"33.3333333333333333", Decimal("33.3333")),  # kept to 4 decimals, the ClickHouse column's scale
    (b"33.33335", Decimal("33.3334")),             # half up
    (b"87.5", Decimal("87.5000")),
])
def test_util_pct_is_exact_to_four_decimals(sent: bytes, kept: Decimal) -> None:
    raw = encode(usage()).replace(b"87.5", sent)
    assert parse(raw).util_pct == kept


@pytest.mark.parametrize(
    ("power_text", "power_mw"),
    [
        ("203.0005", 203_001),  # 203 000.5 mW → half up → 203 001
        ("203.0004999", 203_000),  # 203 000.4999 mW → down
        ("0.0004", 0),  # 0.4 mW → 0
        ("0.0005", 1),  # 0.5 mW → half up → 1
        ("0", 0),
        ("0.0", 0),
        ("5000", 5_000_000),  # the maximum, included
        ("5000.000", 5_000_000),
        ("300", 300_000),
        ("412.3456", 412_346),  # 412 345.6 mW → 412 346
        ("1e2", 100_000),  # JSON exponent notation: 100 W
        ("0.1", 100),  # exact decimal, no binary float residue (0.1 W = 100 mW)
    ],
)
def test_power_quantized_half_up_to_milliwatts(power_text: str, power_mw: int) -> None:
    raw = encode(power(power_w="__P__")).replace(b'"__P__"', power_text.encode())
    reading = parse(raw, expect_kind="power")
    assert isinstance(reading, PowerReading)
    assert reading.power_w == Decimal(power_text)
    assert reading.power_mw == power_mw


# refusals ----------------------------------------------------------------------------


def raw_with(doc: dict[str, Any], placeholder_field: str, json_text: str) -> bytes:
    """`doc` encoded with the value of one field replaced by literal JSON text."""
    return encode({**doc, placeholder_field: "__X__"}).replace(b'"__X__"', json_text.encode())


REFUSED = [
    # (id, raw bytes, topic kind, the reason starts with)
    ("not-json", b"not json", None, "not JSON"),
    ("truncated-json", encode(usage())[:-3], None, "not JSON"),
    ("not-utf8", b"\xff\xfe\x00{", None, "not JSON"),
    ("empty-bytes", b"", None, "not JSON"),
    ("nan-power", raw_with(power(), "power_w", "NaN"), None, "not JSON"),
    ("infinity-util", raw_with(usage(), "util_pct", "Infinity"), None, "not JSON"),
    ("array", b"[1, 2]", None, "a reading must be a JSON object"),
    ("string", b'"usage"', None, "a reading must be a JSON object"),
    ("null", b"null", None, "a reading must be a JSON object"),
    ("missing-kind", encode(without(usage(), "kind")), None, "kind:"),
    ("unknown-kind", encode(usage(kind="energy")), None, "kind:"),
    ("missing-event_id", encode(without(usage(), "event_id")), None, "event_id: missing field"),
    ("missing-ts", encode(without(power(), "ts")), None, "ts: missing field"),
    ("missing-tenant", encode(without(usage(), "tenant")), None, "tenant: missing field"),
    ("missing-mem", encode(without(usage(), "mem_used_mib")), None, "mem_used_mib: missing field"),
    ("missing-power_w", encode(without(power(), "power_w")), None, "power_w: missing field"),
    ("unknown-field", encode(usage(temperature_c=61)), None, "temperature_c: unknown field"),
    ("usage-field-on-power", encode(power(tenant="acme")), None, "tenant: unknown field"),
    ("util-bool", encode(usage(util_pct=True)), None, "util_pct:"),
    ("util-string", encode(usage(util_pct="87.5")), None, "util_pct:"),
    ("util-null", encode(usage(util_pct=None)), None, "util_pct:"),
    ("mem-bool", encode(usage(mem_used_mib=True)), None, "mem_used_mib:"),
    ("mem-string", encode(usage(mem_used_mib="40960")), None, "mem_used_mib:"),
    ("mem-fraction", raw_with(usage(), "mem_used_mib", "1.5"), None, "mem_used_mib:"),
    ("power-bool", encode(power(power_w=False)), None, "power_w:"),
    ("power-string", encode(power(power_w="300")), None, "power_w:"),
    ("tenant-number", encode(usage(tenant=42)), None, "tenant"),
    ("tenant-empty", encode(usage(tenant="")), None, "tenant"),
    ("event_id-number", encode(usage(event_id=7)), None, "event_id:"),
    ("ts-number", encode(usage(ts=T5)), None, "ts:"),
    ("util-above-100", raw_with(usage(), "util_pct", "100.01"), None, "util_pct:"),
    ("util-negative", raw_with(usage(), "util_pct", "-0.5"), None, "util_pct:"),
    ("mem-negative", encode(usage(mem_used_mib=-1)), None, "mem_used_mib:"),
    ("power-above-5000", raw_with(power(), "power_w", "5000.001"), None, "power_w:"),
    ("power-negative", raw_with(power(), "power_w", "-1"), None, "power_w:"),
    ("unknown-site-usage", encode(usage(site="mars-1")), None, "site:"),
    ("unknown-site-power", encode(power(site="mars-1")), None, "site:"),
    ("unknown-model", encode(usage(gpu_model="V100")), None, "gpu_model:"),
    ("ts-without-offset", encode(usage(ts="2026-03-01T00:00:05")), None, "ts:"),
    ("ts-fraction-without-offset", encode(power(ts="2026-03-01T00:00:05.5")), None, "ts:"),
    ("ts-date-only", encode(usage(ts="2026-03-01")), None, "ts:"),
    ("ts-words", encode(usage(ts="yesterday at noon, UTC")), None, "ts:"),
    ("ts-bad-month", encode(usage(ts="2026-13-01T00:00:05Z")), None, "ts:"),
    # NOW_S + 601: one second beyond the 10 minutes allowed
    ("ts-601s-ahead", encode(usage(ts="2026-03-01T01:10:01Z")), None, "ts:"),
    ("ts-601s-ahead-utc8", encode(power(ts="2026-03-01T09:10:01+08:00")), None, "ts:"),
    ("ts-a-day-ahead", encode(power(ts="2026-03-02T01:00:00Z")), None, "ts:"),
    ("event_id-129-chars", encode(usage(event_id="e" * 129)), None, "event_id:"),
    ("event_id-empty", encode(power(event_id="")), None, "event_id:"),
    ("usage-on-power-topic", encode(usage()), "power", "kind:"),
    ("power-on-usage-topic", encode(power()), "usage", "kind:"),
]


@pytest.mark.parametrize(("raw", "expect_kind", "reason_start"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_with_a_reason_naming_the_field(raw: bytes, expect_kind: str | None, reason_start: str) -> None:
    reason = refusal(raw, expect_kind)
    assert reason.startswith(reason_start), reason
    assert "\n" not in reason  # one line: it travels as a Kafka header


def test_future_reason_says_why() -> None:
    reason = refusal(encode(usage(ts="2026-03-01T01:10:01Z")))
    assert reason == "ts: 2026-03-01T01:10:01Z is more than 10 minutes in the future"


def test_unknown_site_and_model_reasons_name_the_value() -> None:
    assert "'mars-1'" in refusal(encode(usage(site="mars-1")))
    assert "'V100'" in refusal(encode(usage(gpu_model="V100")))


def test_a_reading_on_its_own_topic_is_accepted() -> None:
    assert parse(encode(usage()), "usage").kind == "usage"
    assert parse(encode(power()), "power").kind == "power"


def test_reason_is_short_even_for_huge_input() -> None:
    reason = refusal(b"{" + b"x" * 100_000)
    assert len(reason) <= 220


def test_ts_without_seconds_is_refused() -> None:
    # 22 characters and a 'T' at index 10 pass the length check in parse_ts, and
    # datetime.fromisoformat (Python 3.11) reads "00:00+08:00" as 00:00:00+08:00.
    assert refusal(encode(usage(ts="2026-03-01T08:00+08:00"))).startswith("ts:")


def test_mem_used_mib_beyond_uint64_is_refused() -> None:
    assert refusal(encode(usage(mem_used_mib=2**64))).startswith("mem_used_mib:")


def test_ts_is_stored_only_when_it_says_more_than_the_second():
    from schemas.events import stored_ts

    march_1 = 1_772_323_200  # 2026-03-01T00:00:00Z, by hand: 20,513 days × 86,400 s
    assert stored_ts("2026-03-01T00:00:00Z", march_1) == ""
    for kept in ("2026-03-01T08:00:00+08:00", "2026-03-01T00:00:00.250Z", "2026-03-01t00:00:00z"):
        assert stored_ts(kept, march_1) == kept
    assert stored_ts("2026-03-01T00:00:01Z", march_1) == "2026-03-01T00:00:01Z"  # not this second's text


# issue 13: duplicate keys, empty batches, tenant ids ------------------------------------


@pytest.mark.parametrize(("raw", "reason"), [
    (json.dumps(usage(tenant="victim")).encode()[:-1] + b', "tenant": "attacker"}', 'duplicate key "tenant"'),
    (json.dumps(power(power_w=1)).encode()[:-1] + b', "power_w": 4999}', 'duplicate key "power_w"'),
    (json.dumps(power()).encode()[:-1] + b', "x": {"a": 1, "a": 2}}', 'duplicate key "a"'),  # nested, too
    (json.dumps(power()).encode()[:-1] + b', "\\u0074enant": 1, "tenant": 2}', 'duplicate key "tenant"'),  # escaped twin
])
def test_a_key_given_twice_is_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidReading) as refused:
        parse(raw)
    assert str(refused.value) == reason


def test_a_key_twice_with_a_lone_surrogate_names_it_printably() -> None:
    raw = json.dumps(power()).encode()[:-1] + b', "\\ud800": 1, "\\ud800": 2}'
    with pytest.raises(InvalidReading, match=r'^duplicate key "\\ud800"$'):
        parse(raw)


@pytest.mark.parametrize("raw", [b"[]", b" [ ] ", b"[\n]"])
def test_an_empty_batch_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidReading, match="^empty batch"):
        split_message(raw)


@pytest.mark.parametrize("tenant", ["a/b", "..", "a\x00", "a\n", "\u202eemca", "\u0430cme", "a" * 65, "", " a"])
def test_a_tenant_must_be_an_id(tenant: str) -> None:
    with pytest.raises(InvalidReading, match="^tenant: must be an id"):
        parse(json.dumps(usage(tenant=tenant)).encode())


def test_a_tenant_in_the_id_syntax_and_no_tenant_are_accepted() -> None:
    assert parse(json.dumps(usage(tenant="tenant-01.cn_x")).encode()).tenant == "tenant-01.cn_x"
    assert parse(json.dumps(usage(tenant=None, instance=None)).encode()).tenant is None
