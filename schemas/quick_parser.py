"""The fast path of SPEC §3 validation: plain readings checked in a few microseconds.

`parse_reading` (schemas/events.py) is the definition of a valid reading: exact JSON
decimals and pydantic models, ≈ 25 µs a reading. A worker carrying tens of thousands of
cards cannot spend that, so `QuickParser` checks the common case with orjson and plain
comparisons and returns a `Usage` or `Power` — or None whenever anything is unusual
(a bad field, an unknown site, a number it cannot prove exact, a key it does not
expect), and the caller then asks `parse_reading`, which accepts or refuses with its
reason. The fast path therefore never refuses anything and never accepts anything the
definition would refuse; tests/unit/test_fast_readings.py checks both on many inputs.

Duplicate keys: orjson keeps the last of a key given twice, the definition refuses the
reading. The fast path counts the `"` of the message: every key and every string value
brings two, an escaped quote one more, nothing else any. A message whose count is more than
its decoded keys and string values account for has a key twice (or an escape), and goes to
the definition.

Exactness: orjson reads decimals as binary floats. The pipeline never needs the number
itself, only the number rounded to whole milliwatts (or util_pct to 4 decimals) and
checked against its range; `_exact` says when the float decides both exactly as the text
would. Conversions are cached per distinct number: a fleet sends few distinct values.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Collection

import orjson

from schemas.events import MAX_COUNTER_MJ, MAX_FUTURE_S, MAX_MEM_MIB, UTIL_STEP, parse_ts
from schemas.ids import is_id

_USAGE_KEYS = frozenset(
    ("kind", "event_id", "ts", "site", "node", "gpu_uuid", "gpu_model", "tenant", "instance", "util_pct", "mem_used_mib")
)
_POWER_KEYS = frozenset(("kind", "event_id", "ts", "site", "node", "gpu_uuid", "power_w"))
_CACHE_LIMIT = 1 << 16
_SHARED_LIMIT = 1 << 20  # cards, nodes, tenants, instances, timestamps of a large fleet
_UNSEEN = object()
_ONE = Decimal(1)
_HUNDRED = Decimal(100)
_MAX_WATTS = Decimal(5000)
_MILLIWATT = Decimal("0.001")
_HALF = Decimal("0.5")


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

    __slots__ = ("event_id", "ts", "second", "site", "node", "gpu_uuid", "power_mw", "energy_mj", "energy_epoch")
    kind = "power"

    def __init__(self, event_id, ts, second, site, node, gpu_uuid, power_mw, energy_mj=None, energy_epoch=None):
        self.event_id, self.ts, self.second, self.site, self.node = event_id, ts, second, site, node
        self.gpu_uuid, self.power_mw = gpu_uuid, power_mw
        self.energy_mj, self.energy_epoch = energy_mj, energy_epoch


class QuickParser:
    """The fast path for one rule set's sites and models: `parser(raw, now_s, expect_kind)` is
    the reading in `raw` if it is plainly valid, else None (ask schemas.events.parse_reading).
    It caches what repeats in a fleet's readings: texts, and the few thousand distinct numbers."""

    def __init__(self, known_sites: Collection[str], known_models: Collection[str]) -> None:
        # A known id longer than the field's limit would be refused by the definition.
        self.sites = frozenset(s for s in known_sites if 0 < len(s) <= 256)
        self.models = frozenset(m for m in known_models if 0 < len(m) <= 256)
        self.utils: dict = {}  # JSON number → util_pct, quantized (None: out of range)
        self.watts: dict = {}  # JSON number → whole milliwatts (None: out of range)
        self.shared: dict[str, str] = {}  # each distinct text once (see __call__)
        self.tenants: set[str] = set()  # tenants seen in the id syntax (a set look-up, not a regex)

    def _tenant_id(self, tenant: object) -> bool:
        """Whether `tenant` is an id (schemas/ids.py); the ones that are are remembered."""
        if not is_id(tenant):
            return False
        if len(self.tenants) >= _SHARED_LIMIT:
            self.tenants.clear()
        self.tenants.add(tenant)
        return True

    def __call__(self, raw: bytes, now_s: int, expect_kind: str | None = None) -> Usage | Power | None:
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if document.__class__ is not dict:
            return None
        kind = document.get("kind")
        if kind != expect_kind and expect_kind is not None:
            return None
        try:  # with the right number of keys, finding each expected one means no other is there
            if kind == "power" and len(document) == 7:
                number, cache, convert = document["power_w"], self.watts, _milliwatts
                quotes = 26  # 7 keys, 6 strings: kind, event_id, ts, site, node, gpu_uuid
                counter = epoch = None
            elif kind == "power" and len(document) == 9:  # with the card's counter
                number, cache, convert = document["power_w"], self.watts, _milliwatts
                counter, epoch = document["energy_mj"], document["energy_epoch"]
                quotes = 32  # 9 keys, 7 strings: the six above and energy_epoch
                if (counter.__class__ is not int or not 0 <= counter <= MAX_COUNTER_MJ
                        or epoch.__class__ is not str or not 0 < len(epoch) <= 128):
                    return None
            elif kind == "usage" and len(document) == 11:
                number, cache, convert = document["util_pct"], self.utils, _util
                model, tenant, instance, mem = (document["gpu_model"], document["tenant"], document["instance"],
                                                document["mem_used_mib"])
                # 11 keys, 7 strings (the power ones and gpu_model), tenant and instance unless null
                quotes = 36 + (tenant is not None) * 2 + (instance is not None) * 2
            else:
                return None
            event_id, ts, site, node, gpu = (document["event_id"], document["ts"], document["site"],
                                             document["node"], document["gpu_uuid"])
        except KeyError:
            return None
        if raw.count(b'"') != quotes:  # a key given twice (or an escape): the definition judges
            return None
        cls = number.__class__
        if cls is not float and cls is not int:  # bool, str, None, …
            return None
        value = cache.get(number, _UNSEEN)
        if value is _UNSEEN:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            value = cache[number] = convert(number)
        if value is None:
            return None
        if (event_id.__class__ is not str or not 0 < len(event_id) <= 128 or site.__class__ is not str
                or site not in self.sites or node.__class__ is not str or not 0 < len(node) <= 256
                or gpu.__class__ is not str or not 0 < len(gpu) <= 256 or ts.__class__ is not str):
            return None
        try:
            second = parse_ts(ts)
        except ValueError:
            return None
        if second > now_s + MAX_FUTURE_S:
            return None
        # One str object per distinct card, node, site…: the rater keeps readings of a whole
        # horizon (millions for a large fleet), and orjson makes a new str for every value.
        shared = self.shared
        if len(shared) >= _SHARED_LIMIT:
            shared.clear()
        gpu, node, site, ts = (shared.setdefault(gpu, gpu), shared.setdefault(node, node),
                               shared.setdefault(site, site), shared.setdefault(ts, ts))
        if kind == "power":
            if epoch is not None:
                epoch = shared.setdefault(epoch, epoch)
            return Power(event_id, ts, second, site, node, gpu, value, counter, epoch)
        if (model.__class__ is not str or model not in self.models or mem.__class__ is not int
                or not 0 <= mem <= MAX_MEM_MIB
                or (tenant is not None and (tenant.__class__ is not str
                                            or (tenant not in self.tenants and not self._tenant_id(tenant))))
                or (instance is not None and (instance.__class__ is not str or not 0 < len(instance) <= 256))):
            return None
        model = shared.setdefault(model, model)
        tenant = shared.setdefault(tenant, tenant) if tenant is not None else None
        instance = shared.setdefault(instance, instance) if instance is not None else None
        return Usage(event_id, ts, second, site, node, gpu, model, tenant, instance, value, mem)


def _exact(number: int | float, step: Decimal, top: Decimal) -> Decimal | None:
    """The number sent, for rounding to `step` and checking against [0, top] — or None when
    its float cannot vouch for the text it came from.

    orjson rounds the decimal text t correctly to the double f, and `repr(f)` is the
    shortest decimal d that rounds to f. Rounded to `step` (half up), t and d give the same
    result, and both lie inside or outside [0, top] alike — unless a rounding boundary or an
    end of the range lies between them. Such a point is a short decimal that rounds to f
    too, and two decimals of ≤ 15 significant digits never round to the same double, so it
    would be d itself. Hence: d of ≤ 15 digits, on no boundary and at no end → exact enough.
    """
    if number.__class__ is int:
        return Decimal(number)
    d = Decimal(repr(number))
    if not d.is_finite() or len(d.as_tuple().digits) > 15 or not 0 <= d <= top:
        return None  # out of range: the slow path refuses it with its reason
    if (d == 0 and d.is_signed()) or d == top or (d / step) % 1 == _HALF:
        return None  # -0.0 may stand for a tiny negative number; +0.0 only for zero or more
    return d


def _util(number: int | float) -> Decimal | None:
    d = _exact(number, UTIL_STEP, _HUNDRED)
    return d.quantize(UTIL_STEP, rounding=ROUND_HALF_UP) if d is not None and 0 <= d <= _HUNDRED else None


def _milliwatts(number: int | float) -> int | None:
    d = _exact(number, _MILLIWATT, _MAX_WATTS)
    if d is None or not 0 <= d <= _MAX_WATTS:
        return None
    # Whole milliwatts, half up: ≤ 15 digits, so the default 28-digit context is exact.
    return int(d.scaleb(3).quantize(_ONE, rounding=ROUND_HALF_UP))
