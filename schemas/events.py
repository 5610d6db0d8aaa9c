"""The v1 readings of SPEC §3: what a node agent sends, and how it is checked.

`parse_reading` turns one message value into a `UsageReading` or `PowerReading`, or raises
`InvalidReading` with a one-line reason that becomes the dead-letter reason. It is pure:
the set of known sites and models and the current time are passed in.

Numbers are parsed as `Decimal` (never float) so that `power_w` quantizes to whole
milliwatts exactly (round half up) and `util_pct` keeps its digits. A key given twice in
one object is refused (`duplicate key "tenant"`), never "last one wins"; an empty batch
`[]` is refused too; a `tenant` must be an id (schemas/ids.py).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from collections.abc import Collection
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator, model_validator

from schemas.errors import InvalidReading
from schemas.ids import is_id

MAX_FUTURE_S = 600  # SPEC §3: a timestamp more than 10 minutes ahead is refused
MAX_POWER_W = Decimal(5000)
MIN_SECOND = 946684800  # 2000-01-01T00:00:00Z: older readings are not billable data (and break UInt32 columns if < 1970)
MAX_MEM_MIB = 1 << 40  # far above any card; keeps the value inside ClickHouse's UInt64
UTIL_STEP = Decimal("0.0001")  # util_pct is kept to 4 decimals (ClickHouse Decimal(9, 4))
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})?$")

Text = Annotated[StrictStr, Field(min_length=1, max_length=256)]
MAX_COUNTER_MJ = (1 << 63) - 1  # a card's energy counter, as a signed 64-bit integer of mJ
COUNTER_NOT_WHOLE = "energy_mj and energy_epoch come together: send both or neither"
TENANT_NOT_ID = "must be an id: a letter or digit, then up to 63 letters, digits, '.', '_' or '-'"


def tenant_or_none(value: str | None) -> str | None:
    """A reading's or correction's `tenant`: None (not rented) or an id (schemas/ids.py); ValueError else."""
    if value is not None and not is_id(value):
        raise ValueError(TENANT_NOT_ID)
    return value


def _exact_number(value: Any) -> Decimal:
    """Accept JSON integers and decimals (parsed as Decimal); refuse bools, strings, floats."""
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise ValueError("must be a number")
    number = Decimal(value)
    if not number.is_finite():
        raise ValueError("must be a finite number")
    return number


class _Reading(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    event_id: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    ts: StrictStr
    site: Text
    node: Text
    gpu_uuid: Text

    @field_validator("ts")
    @classmethod
    def _rfc3339_with_offset(cls, value: str) -> str:
        parse_ts(value)
        return value

    @property
    def second(self) -> int:
        """The UTC epoch second this reading covers: floor(ts)."""
        return parse_ts(self.ts)


class UsageReading(_Reading):
    """One second of one card's use (topic gpu.usage.v1)."""

    kind: Literal["usage"]
    gpu_model: Text
    tenant: StrictStr | None
    instance: Annotated[StrictStr, Field(min_length=1, max_length=256)] | None
    util_pct: Decimal
    mem_used_mib: Annotated[StrictInt, Field(ge=0, le=MAX_MEM_MIB)]

    @field_validator("tenant")
    @classmethod
    def _tenant_id(cls, value: str | None) -> str | None:
        return tenant_or_none(value)

    @field_validator("util_pct", mode="before")
    @classmethod
    def _util_range(cls, value: Any) -> Decimal:
        number = _exact_number(value)
        if not Decimal(0) <= number <= Decimal(100):
            raise ValueError("must be between 0 and 100")
        return number.quantize(UTIL_STEP, rounding=ROUND_HALF_UP)


class PowerReading(_Reading):
    """One second of one card's electrical draw (topic gpu.power.v1), with the card's
    cumulative energy counter and its counting run when the card reports them (both or
    neither; billing_rules/counters.py says what they measure)."""

    kind: Literal["power"]
    power_w: Decimal
    energy_mj: Annotated[StrictInt, Field(ge=0, le=MAX_COUNTER_MJ)] | None = None
    energy_epoch: Annotated[StrictStr, Field(min_length=1, max_length=128)] | None = None

    @model_validator(mode="after")
    def _counter_whole(self) -> "PowerReading":
        if (self.energy_mj is None) != (self.energy_epoch is None):
            raise ValueError(COUNTER_NOT_WHOLE)
        return self

    @field_validator("power_w", mode="before")
    @classmethod
    def _power_range(cls, value: Any) -> Decimal:
        number = _exact_number(value)
        if not Decimal(0) <= number <= MAX_POWER_W:
            raise ValueError("must be between 0 and 5000")
        return number

    @property
    def power_mw(self) -> int:
        """Draw in whole milliwatts, rounded half up; one second at P mW is P millijoules."""
        # scaleb is exact in a context wide enough for every digit sent: one rounding only.
        with localcontext() as context:
            context.prec = max(28, len(self.power_w.as_tuple().digits) + 8)
            return int(self.power_w.scaleb(3).quantize(Decimal(1), rounding=ROUND_HALF_UP))


Reading = UsageReading | PowerReading


@lru_cache(maxsize=1 << 16)
def parse_ts(value: str) -> int:
    """RFC 3339 timestamp with an offset → UTC epoch second (floor). Raises ValueError.

    Cached: a fleet's readings of one second share their timestamp text.
    """
    if not RFC3339.match(value):
        raise ValueError("must be an RFC 3339 timestamp such as 2026-03-01T00:00:05Z")
    try:
        moment = datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
    except ValueError:
        raise ValueError("must be an RFC 3339 timestamp such as 2026-03-01T00:00:05Z") from None
    if moment.tzinfo is None:
        raise ValueError("must carry a UTC offset (Z or +08:00)")
    # Exact floor, also for fractions: no float arithmetic on the timestamp.
    whole = int(moment.replace(microsecond=0).timestamp())
    if whole < MIN_SECOND:
        raise ValueError("must not be before 2000-01-01T00:00:00Z")
    return whole


def stored_ts(ts: str, second: int) -> str:
    """What the raw tables keep of a reading's `ts`: "" when it says no more than `second`
    (exactly YYYY-MM-DDTHH:MM:SSZ of that second: the column `second` holds it), else the
    text as sent (a fraction, an offset, lower case). Read it back as
    `if(ts = '', formatDateTime(second, '%Y-%m-%dT%H:%i:%SZ', 'UTC'), ts)`."""
    return "" if len(ts) == 20 and ts == _plain_utc(second) else ts


@lru_cache(maxsize=4096)
def _plain_utc(second: int) -> str:
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def decode_json(raw: bytes) -> Any:
    """Parse JSON with exact decimals. Raises InvalidReading on bytes that are not JSON, and
    on an object with a key given twice (`duplicate key "tenant"`)."""
    try:
        return json.loads(raw, parse_float=Decimal, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError, InvalidOperation) as exc:
        raise InvalidReading(f"not JSON: {_short(str(exc))}") from None
    except RecursionError:
        raise InvalidReading("not JSON: nested too deeply") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as a dict; a key given twice is refused (never "last one wins":
    `{"tenant": "victim", …, "tenant": "attacker"}` would otherwise bill the attacker)."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidReading(f"duplicate key {_short(json.dumps(key), 80)}")
            seen.add(key)
    return document


def split_message(raw: bytes) -> list[bytes] | None:
    """The readings of a batched message: the exact bytes of each element of a top-level JSON
    array, or None when the message is not an array (a single reading).

    Raises InvalidReading when the array itself is not valid JSON, or is empty (the whole
    message is bad: an empty batch is refused, not dropped in silence).
    """
    if raw.lstrip()[:1] != b"[":
        return None
    decoder = json.JSONDecoder(parse_float=Decimal, parse_constant=_refuse_constant)
    elements: list[bytes] = []
    try:
        text = raw.decode("utf-8", "strict")
        position = _skip_space(text, text.index("[") + 1)
        if text[position : position + 1] == "]":
            raise InvalidReading("empty batch: a batch must hold at least one reading")
        while True:
            _, end = decoder.raw_decode(text, position)
            elements.append(text[position:end].encode())
            position = _skip_space(text, end)
            if text[position : position + 1] == ",":
                position = _skip_space(text, position + 1)
                continue
            if text[position : position + 1] == "]":
                position += 1
                break
            raise ValueError(f"expected ',' or ']' at character {position}")
        if _skip_space(text, position) != len(text):
            raise ValueError(f"extra data at character {position}")
    except (ValueError, InvalidOperation) as exc:
        raise InvalidReading(f"not JSON: {_short(str(exc))}") from None
    except RecursionError:
        raise InvalidReading("not JSON: nested too deeply") from None
    return elements


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def read_kind(document: Any) -> str | None:
    """The `kind` of a decoded reading, or None when it cannot be read."""
    if isinstance(document, dict):
        kind = document.get("kind")
        if kind in ("usage", "power"):
            return kind
    return None


def validate_reading(
    document: Any,
    *,
    known_sites: Collection[str],
    known_models: Collection[str],
    now_s: int,
) -> Reading:
    """Check one decoded reading against SPEC §3. Raises InvalidReading(reason)."""
    kind = read_kind(document)
    if kind is None:
        if not isinstance(document, dict):
            raise InvalidReading("a reading must be a JSON object")
        raise InvalidReading("kind: must be 'usage' or 'power'")
    model = UsageReading if kind == "usage" else PowerReading
    try:
        reading = model.model_validate(document)
    except ValidationError as exc:
        raise InvalidReading(_first_error(exc)) from None
    if reading.site not in known_sites:
        raise InvalidReading(f"site: unknown site {reading.site!r}")
    if isinstance(reading, UsageReading) and reading.gpu_model not in known_models:
        raise InvalidReading(f"gpu_model: unknown model {reading.gpu_model!r}")
    if reading.second > now_s + MAX_FUTURE_S:
        raise InvalidReading(f"ts: {reading.ts} is more than 10 minutes in the future")
    return reading


def parse_reading(
    raw: bytes,
    *,
    known_sites: Collection[str],
    known_models: Collection[str],
    now_s: int,
    expect_kind: str | None = None,
) -> Reading:
    """Decode and validate one message value; `expect_kind` is the kind its topic carries."""
    reading = validate_reading(decode_json(raw), known_sites=known_sites, known_models=known_models, now_s=now_s)
    if expect_kind is not None and reading.kind != expect_kind:
        raise InvalidReading(f"kind: a {reading.kind} reading on the {expect_kind} topic")
    return reading


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    place = ".".join(str(part) for part in error["loc"]) or "reading"
    if error["type"] == "missing":
        return f"{place}: missing field"
    if error["type"] == "extra_forbidden":
        return f"{place}: unknown field"
    message = error["msg"].removeprefix("Value error, ")
    return f"{place}: {_short(message)}"


def _short(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
