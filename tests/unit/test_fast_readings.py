"""The fast path of validation agrees with the definition (schemas.events.parse_reading).

`QuickParser` may decline anything (None: the slow path then judges), but what it
accepts must be accepted by `parse_reading` with the same values, and it must accept the
plain readings a fleet sends, or it is no fast path at all.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.errors import InvalidReading
from schemas.events import parse_reading
from schemas.quick_parser import QuickParser

RULES = load_rules(DEFAULT_RULES_DIR)
SITES = frozenset(RULES.site_ids)
MODELS = frozenset(RULES.model_ids)
T5 = 1_772_323_205  # 2026-03-01T00:00:05Z (worked out in test_events.py)
NOW_S = T5 - 5 + 3600

FIELDS = ("kind", "event_id", "ts", "second", "site", "node", "gpu_uuid", "gpu_model", "tenant", "instance",
          "util_pct", "mem_used_mib", "power_mw")


def usage(**changes: Any) -> dict[str, Any]:
    doc = {
        "kind": "usage", "event_id": "u-1", "ts": "2026-03-01T00:00:05Z", "site": "gz-guian", "node": "node-01",
        "gpu_uuid": "GPU-0001", "gpu_model": "A800-80G", "tenant": "acme", "instance": "i-1",
        "util_pct": 87.5, "mem_used_mib": 40960,
    }
    return doc | changes


def power(**changes: Any) -> dict[str, Any]:
    doc = {
        "kind": "power", "event_id": "p-1", "ts": "2026-03-01T00:00:05Z", "site": "gz-guian", "node": "node-01",
        "gpu_uuid": "GPU-0001", "power_w": 300,
    }
    return doc | changes


def judge(raw: bytes, expect_kind: str | None = None):
    """(fast result, slow result or the refusal)."""
    fast = QuickParser(SITES, MODELS)(raw, NOW_S, expect_kind)  # a fresh parser: no cached numbers
    try:
        slow = parse_reading(raw, known_sites=SITES, known_models=MODELS, now_s=NOW_S, expect_kind=expect_kind)
    except InvalidReading as exc:
        slow = exc
    return fast, slow


def assert_agree(raw: bytes, expect_kind: str | None = None) -> None:
    fast, slow = judge(raw, expect_kind)
    if fast is None:
        return
    assert not isinstance(slow, InvalidReading), f"fast path accepted what the definition refuses: {slow}"
    for name in FIELDS:
        if hasattr(slow, name) or hasattr(fast, name):
            assert getattr(fast, name) == getattr(slow, name), name
            assert type(getattr(fast, name)) is type(getattr(slow, name)), name


def test_plain_readings_take_the_fast_path_with_the_same_values() -> None:
    fast, slow = judge(json.dumps(usage(util_pct=87.5)).encode())
    assert fast is not None and fast.second == T5 and fast.util_pct == Decimal("87.5000") and fast.tenant == "acme"
    assert_agree(json.dumps(usage()).encode())
    fast, _ = judge(json.dumps(power(power_w=312.4567)).encode())
    assert fast is not None and fast.power_mw == 312_457  # 312 456.7 mW, half up
    fast, _ = judge(json.dumps(power(power_w=0.0026)).encode())
    assert fast is not None and fast.power_mw == 3  # 2.6 mW
    fast, _ = judge(json.dumps(usage(util_pct=12.34566)).encode())
    assert fast is not None and fast.util_pct == Decimal("12.3457")
    fast, _ = judge(json.dumps(usage(util_pct=0.0)).encode())
    assert fast is not None and fast.util_pct == 0  # an idle card


@pytest.mark.parametrize("number, why", [
    ("0.0025", "2.5 mW: on a rounding boundary, a longer text could lie just below it"),
    ("-0.0", "a tiny negative number also reads as -0.0"),
    ("5000.0", "the top of the range: 5000.00000000000000001 reads the same"),
    ("5000", None),
    ("0.0", None),
])
def test_floats_on_an_edge_go_the_slow_way(number: str, why: str | None) -> None:
    raw = _encode(power(power_w=Decimal(number)))
    fast, slow = judge(raw)
    assert (fast is None) == (why is not None), why
    assert_agree(raw)


def test_a_long_text_just_below_a_boundary_rounds_as_the_text_says() -> None:
    # 2.4999999999999999999 mW → 2 mW half up; the nearest double is 0.0025 W (2.5 mW → 3)
    fast, slow = judge(_encode(power(power_w=Decimal("0.0024999999999999999999"))))
    assert fast is None and slow.power_mw == 2
    assert_agree(json.dumps(power(power_w=312.4567)).encode())


@pytest.mark.parametrize("raw, why", [
    (b'{"kind": "power", "event_id": "p", "ts": "2026-03-01T00:00:05Z", "site": "gz-guian", "node": "n",'
     b' "gpu_uuid": "g", "power_w": 0.00049999999999999999}', "20 digits: a double would round it to 0.0005"),
    (b'{"kind": "power", "event_id": "p", "ts": "2026-03-01T00:00:05Z", "site": "gz-guian", "node": "n",'
     b' "gpu_uuid": "g", "power_w": 1, "power_w": 0.00049999999999999999}', "a repeated key"),
    (json.dumps(usage(util_pct=True)).encode(), "a bool is no number"),
    (json.dumps(usage(mem_used_mib=1.0)).encode(), "mem_used_mib must be an integer"),
    (json.dumps(usage(site="elsewhere")).encode(), "unknown site"),
    (json.dumps(usage(gpu_model="H100")).encode(), "unknown model"),
    (json.dumps(usage(extra=1)).encode(), "unknown field"),
    (json.dumps(usage(ts="2026-03-01T00:00:05")).encode(), "no offset"),
    (json.dumps(usage(ts="2026-03-02T00:00:05Z")).encode(), "a day ahead of the clock"),
    (json.dumps(usage(tenant="")).encode(), "empty tenant"),
    (json.dumps(power(power_w=5000.5)).encode(), "over 5 kW"),
    (b'[1, 2]', "an array"),
    (b'{"kind": "usage"', "not JSON"),
])
def test_the_fast_path_declines_what_it_cannot_prove(raw: bytes, why: str) -> None:
    fast, _ = judge(raw)
    assert fast is None, why


def test_long_decimals_are_judged_exactly_by_the_slow_path() -> None:
    # 0.00049999999999999999 W = 0.49999999999999999 mW → 0 mW half up (a double says 0.0005 W → 1 mW)
    raw = (b'{"kind": "power", "event_id": "p", "ts": "2026-03-01T00:00:05Z", "site": "gz-guian", "node": "n",'
           b' "gpu_uuid": "g", "power_w": 0.00049999999999999999}')
    fast, slow = judge(raw)
    assert fast is None and slow.power_mw == 0


def test_the_wrong_topic_is_left_to_the_slow_path() -> None:
    fast, slow = judge(json.dumps(power()).encode(), expect_kind="usage")
    assert fast is None and isinstance(slow, InvalidReading)


# Mostly valid values, so that the fast path has something to accept.
texts = st.one_of(st.sampled_from(["gz-guian", "A800-80G", "RTX4090-24G", "acme", "x" * 257]), st.text(max_size=3))
numbers = st.one_of(
    st.decimals(min_value=0, max_value=100, places=4),
    st.integers(min_value=-10, max_value=6000),
    st.decimals(min_value=-1, max_value=5001, allow_nan=False, allow_infinity=False, places=4),
    st.decimals(min_value=-1, max_value=5001, allow_nan=False, allow_infinity=False, places=20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(), st.none(), st.text(max_size=2),
)
timestamps = st.sampled_from(["2026-03-01T00:00:05Z", "2026-03-01T00:00:05Z", "2026-03-01T00:00:05Z", "2026-03-01T00:00:05.999+08:00", "2026-03-01 00:00:05z",
                              "1999-12-31T23:59:59Z", "2026-03-01T00:00:05", "2026-13-01T00:00:05Z", "", 5])


def _encode(doc: dict[str, Any]) -> bytes:
    """JSON with Decimals written as their exact text, as a node agent would send them."""
    return ("{" + ", ".join(f"{json.dumps(k)}: {v if isinstance(v, Decimal) else json.dumps(v)}"
                            for k, v in doc.items()) + "}").encode()


def mostly(valid, other):
    """`valid` half of the time: most generated readings should be acceptable."""
    return st.one_of(st.just(valid), other)


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(["usage", "power", "power", "other"]), site=mostly("gz-guian", texts),
       model=mostly("A800-80G", texts), tenant=st.one_of(st.none(), texts), number=numbers,
       mem=mostly(40960, numbers), ts=mostly("2026-03-01T00:00:05Z", timestamps),
       drop=mostly(None, st.sampled_from(["node", "tenant", "power_w", "util_pct"])))
def test_whatever_the_fast_path_accepts_the_definition_accepts_the_same(kind, site, model, tenant, number, mem, ts, drop):
    base = usage(site=site, gpu_model=model, tenant=tenant, util_pct=number, mem_used_mib=mem, ts=ts) if kind == "usage" \
        else power(site=site, power_w=number, ts=ts, kind=kind)
    if drop:
        base.pop(drop, None)
    assert_agree(_encode(base))


exact_decimals = st.integers(min_value=0, max_value=8).flatmap(
    lambda places: st.decimals(min_value=0, max_value=5000, places=places))


@settings(max_examples=300, deadline=None)
@given(watts=exact_decimals, util=exact_decimals.filter(lambda d: d <= 100))
def test_numbers_of_valid_readings_are_exact_on_the_fast_path(watts: Decimal, util: Decimal) -> None:
    for doc in (power(power_w=watts), usage(util_pct=util)):
        raw = _encode(doc)
        fast, slow = judge(raw)
        number, step, top = (watts, Decimal("0.001"), 5000) if doc["kind"] == "power" else (util, Decimal("0.0001"), 100)
        on_edge = (number / step) % 1 == Decimal("0.5") or number == top
        if len(number.as_tuple().digits) <= 15 and not on_edge:  # then the fast path must take it
            assert fast is not None
        assert_agree(raw)


# issue 13: a key given twice, and tenants outside the id syntax -------------------------


@pytest.mark.parametrize("raw", [
    # the attacker's own tenant last: orjson would keep it
    _encode(usage(tenant="victim"))[:-1] + b', "tenant": "attacker"}',
    b'{"tenant": "attacker", ' + _encode(usage(tenant="victim"))[1:],
    _encode(usage())[:-1] + b', "tenant" :"acme"}',  # the same value, spaced differently
    _encode(usage())[:-1] + b',"util_pct":100}',
    _encode(usage(tenant=None, instance=None))[:-1] + b', "tenant": null}',
    _encode(power(power_w=1))[:-1] + b', "power_w": 4999}',
    _encode(power())[:-1] + b', "kind": "power"}',
    _encode(power(node='n"1'))[:-1] + b', "site": "gz-guian"}',  # an escaped quote among them
])
def test_a_key_given_twice_is_refused_never_last_one_wins(raw: bytes) -> None:
    fast, slow = judge(raw)
    assert fast is None
    assert isinstance(slow, InvalidReading) and str(slow).startswith('duplicate key "'), slow


@pytest.mark.parametrize("tenant", ["a/b", "..", "acme\x00", "acme\n", "\u202eemca", "\u0430cme", "-acme", ".acme",
                                    "a" * 65, "ac me", "acme\u200b", "ＡＣＭＥ"])
def test_a_tenant_outside_the_id_syntax_is_refused_by_both(tenant: str) -> None:
    for raw in (json.dumps(usage(tenant=tenant)).encode(), json.dumps(usage(tenant=tenant), ensure_ascii=False).encode()):
        fast, slow = judge(raw)
        assert fast is None
        assert isinstance(slow, InvalidReading) and str(slow).startswith("tenant: must be an id"), slow


@pytest.mark.parametrize("tenant", ["acme", "tenant-01", "A", "9", "a.b_c-d", "x" * 64])
def test_tenants_in_the_id_syntax_take_the_fast_path(tenant: str) -> None:
    fast, slow = judge(json.dumps(usage(tenant=tenant)).encode())
    assert fast is not None and fast.tenant == slow.tenant == tenant


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["usage", "power"]), data=st.data(), space=st.sampled_from(["", " ", "\n\t"]),
       value=st.sampled_from(['"attacker"', "null", "4999", '"gz-guian"', '"2026-03-01T00:00:05Z"', '"a\\"b"', "0"]))
def test_any_key_twice_is_never_taken_by_the_fast_path(kind, data, space, value) -> None:
    doc = usage() if kind == "usage" else power()
    items = [f"{json.dumps(k)}{space}:{space}{json.dumps(v)}" for k, v in doc.items()]
    name = data.draw(st.sampled_from(sorted(doc)))
    items.insert(data.draw(st.integers(0, len(items))), f'"{name}"{space}:{space}{value}')
    raw = ("{" + space + ("," + space).join(items) + "}").encode()
    fast, slow = judge(raw)
    assert fast is None
    assert isinstance(slow, InvalidReading) and str(slow) == f'duplicate key "{name}"', slow
