"""The fast path of SPEC §3 validation: plain readings checked in a few microseconds.

`parse_reading` (schemas/events.py) is the definition of a valid reading: exact JSON
decimals and pydantic models, ≈ 25 µs a reading. A worker carrying tens of thousands of
cards cannot spend that, so `quick_reading` checks the common case with orjson and plain
comparisons and returns a `Usage` or `Power` — or None whenever anything is unusual
(a bad field, an unknown site, a number it cannot prove exact, a key it does not
expect), and the caller then asks `parse_reading`, which accepts or refuses with its
reason. The fast path therefore never refuses anything and never accepts anything the
definition would refuse; tests/unit/test_fast_readings.py checks both on many inputs.

Exactness: orjson reads decimals as binary floats. A decimal of at most 15 significant
digits survives that (IEEE 754 doubles keep 15), and `repr` gives back its shortest
form, so `Decimal(repr(x))` is exactly the number sent. Longer numbers go the slow way.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Collection

import orjson

from schemas.events import MAX_FUTURE_S, MAX_MEM_MIB, UTIL_STEP, parse_ts

_USAGE_KEYS = frozenset(
    ("kind", "event_id", "ts", "site", "node", "gpu_uuid", "gpu_model", "tenant", "instance", "util_pct", "mem_used_mib")
)
_POWER_KEYS = frozenset(("kind", "event_id", "ts", "site", "node", "gpu_uuid", "power_w"))
_NUMBER_AFTER = re.compile(rb'\s*:\s*(-?[0-9][0-9.eE+-]*)')
_MAX_TOKEN = 16  # a number token of ≤ 16 characters has ≤ 15 digits
_ONE = Decimal(1)
_HUNDRED = Decimal(100)


class Usage:
    """A valid usage reading (the same attributes as schemas.events.UsageReading)."""

    __slots__ = ("event_id", "ts", "second", "site", "node", "gpu_uuid", "gpu_model", "tenant", "instance",
                 "util_pct", "mem_used_mib")
    kind = "usage"

    def __init__(self, event_id, ts, second, site, node, gpu_uuid, gpu_model, tenant, instance, util_pct, mem_used_mib):
        self.event_id, self.ts, self.second, self.site, self.node = event_id, ts, second, site, node
        self.gpu_uuid, self.gpu_model, self.tenant, self.instance = gpu_uuid, gpu_model, tenant, instance
        self.util_pct, self.mem_used_mib = util_pct, mem_used_mib


class Power:
    """A valid power reading (the same attributes as schemas.events.PowerReading)."""

    __slots__ = ("event_id", "ts", "second", "site", "node", "gpu_uuid", "power_mw")
    kind = "power"

    def __init__(self, event_id, ts, second, site, node, gpu_uuid, power_mw):
        self.event_id, self.ts, self.second, self.site, self.node = event_id, ts, second, site, node
        self.gpu_uuid, self.power_mw = gpu_uuid, power_mw


def quick_reading(raw: bytes, *, known_sites: Collection[str], known_models: Collection[str], now_s: int,
                  expect_kind: str | None = None) -> Usage | Power | None:
    """The reading in `raw` if it is plainly valid, else None (ask schemas.events.parse_reading)."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if document.__class__ is not dict:
        return None
    kind = document.get("kind")
    if kind != expect_kind and expect_kind is not None:
        return None
    if kind == "usage":
        if document.keys() != _USAGE_KEYS:
            return None
        return _usage(raw, document, known_sites, known_models, now_s)
    if kind == "power":
        if document.keys() != _POWER_KEYS:
            return None
        return _power(raw, document, known_sites, now_s)
    return None


def _common(document: dict, known_sites: Collection[str], now_s: int) -> tuple | None:
    event_id, ts, site, node, gpu = (document["event_id"], document["ts"], document["site"], document["node"],
                                     document["gpu_uuid"])
    if not (_text(event_id, 128) and _text(site, 256) and _text(node, 256) and _text(gpu, 256)):
        return None
    if ts.__class__ is not str or site not in known_sites:
        return None
    try:
        second = parse_ts(ts)
    except ValueError:
        return None
    if second > now_s + MAX_FUTURE_S:
        return None
    return event_id, ts, second, site, node, gpu


def _usage(raw: bytes, document: dict, known_sites, known_models, now_s: int) -> Usage | None:
    common = _common(document, known_sites, now_s)
    model, tenant, instance = document["gpu_model"], document["tenant"], document["instance"]
    mem, util = document["mem_used_mib"], _exact(raw, b'"util_pct"', document["util_pct"])
    if (common is None or util is None or not _text(model, 256) or model not in known_models
            or not (tenant is None or _text(tenant, 256)) or not (instance is None or _text(instance, 256))
            or mem.__class__ is not int or not 0 <= mem <= MAX_MEM_MIB or not 0 <= util <= _HUNDRED):
        return None
    return Usage(*common, model, tenant, instance, util.quantize(UTIL_STEP, rounding=ROUND_HALF_UP), mem)


def _power(raw: bytes, document: dict, known_sites, now_s: int) -> Power | None:
    common = _common(document, known_sites, now_s)
    watts = _exact(raw, b'"power_w"', document["power_w"])
    if common is None or watts is None or not 0 <= watts <= 5000:
        return None
    # Whole milliwatts, half up: ≤ 15 digits, so the default 28-digit context is exact.
    return Power(*common, int(watts.scaleb(3).quantize(_ONE, rounding=ROUND_HALF_UP)))


def _text(value, limit: int) -> bool:
    return value.__class__ is str and 0 < len(value) <= limit


def _exact(raw: bytes, key: bytes, value) -> Decimal | None:
    """`value` as the exact Decimal that was sent, or None when that cannot be proved cheaply."""
    if value.__class__ is int:
        return Decimal(value)
    if value.__class__ is not float:
        return None
    start = raw.find(key)
    if start < 0 or raw.find(key, start + 1) >= 0:  # escaped or repeated key: let the slow path judge
        return None
    token = _NUMBER_AFTER.match(raw, start + len(key))
    if token is None or len(token.group(1)) > _MAX_TOKEN:
        return None
    return Decimal(repr(value))
