"""Compensating events (issue 25, item 2): how a wrong reading is corrected without editing it.

The readings topics are the truth and are never changed; a correction is an event of its own
on `gpu.corrections.v1` (keyed by `gpu_uuid`), kept for ever:

    reattribute    the card's usage in [from, to) belongs to `tenant` (null: to nobody, the
                   seconds were not rented) and `instance`; its energy follows the usage
    void_readings  the card's readings of `stream` (usage, power or both) in [from, to) do not count

Each carries `event_id` (its identity: the same id with other content is a conflict), `reason`
and `author` (who asked for it). `parse_correction` turns one message value into a
`Reattribute` or `VoidReadings`, or raises `InvalidCorrection` with a one-line reason — the
dead-letter reason, as for readings (schemas/events.py). It is pure: the time of `to` is
checked against `now_s` passed in.

Spans: `from` < `to`, both RFC 3339 with an offset, at most MAX_SPAN_S (31 days) apart, not
before 2000 and not more than 10 minutes ahead of `now_s` (a correction of the future is a
reading that has not happened). Ids (`tenant`) are in schemas/ids.py's syntax.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator, model_validator

from schemas.errors import InvalidReading
from schemas.events import MAX_FUTURE_S, Text, decode_json, parse_ts, tenant_or_none

__all__ = [
    "Correction", "InvalidCorrection", "MAX_SPAN_S", "Reattribute", "VoidReadings", "correction_event_id",
    "parse_correction",
]

MAX_SPAN_S = 31 * 86_400
STREAMS = ("usage", "power", "both")
Reason = Annotated[StrictStr, Field(min_length=1, max_length=500)]


class InvalidCorrection(InvalidReading):
    """A correction that cannot be taken; str() is the reason (the dead-letter reason)."""


class _Correction(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    event_id: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    gpu_uuid: Text
    from_: StrictStr = Field(alias="from")
    to: StrictStr
    reason: Reason
    author: Text

    @field_validator("from_", "to")
    @classmethod
    def _rfc3339(cls, value: str) -> str:
        parse_ts(value)
        return value

    @field_validator("reason", "author", "gpu_uuid")
    @classmethod
    def _one_plain_line(cls, value: str) -> str:
        for ch in value:
            if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
                raise ValueError(f"holds the control or format character U+{ord(ch):04X}: write one plain line")
        return value

    @model_validator(mode="after")
    def _span(self) -> "_Correction":
        lo, hi = parse_ts(self.from_), parse_ts(self.to)
        if hi <= lo:
            raise ValueError(f"'to' ({self.to}) must be after 'from' ({self.from_})")
        if hi - lo > MAX_SPAN_S:
            raise ValueError(f"the span from {self.from_} to {self.to} is over 31 days: split it")
        return self

    @property
    def from_s(self) -> int:
        """[from_s, to_s): the UTC epoch seconds corrected."""
        return parse_ts(self.from_)

    @property
    def to_s(self) -> int:
        return parse_ts(self.to)


class Reattribute(_Correction):
    """The card's usage in [from, to) belongs to `tenant` (None: nobody) and `instance`."""

    kind: Literal["reattribute"]
    tenant: StrictStr | None
    instance: Annotated[StrictStr, Field(min_length=1, max_length=256)] | None = None

    @field_validator("tenant")
    @classmethod
    def _tenant_id(cls, value: str | None) -> str | None:
        return tenant_or_none(value)


class VoidReadings(_Correction):
    """The card's readings of `stream` in [from, to) do not count."""

    kind: Literal["void_readings"]
    stream: Literal["usage", "power", "both"] = "both"


Correction = Reattribute | VoidReadings
_KINDS = {"reattribute": Reattribute, "void_readings": VoidReadings}


def parse_correction(raw: bytes, now_s: int) -> Correction:
    """One message value as a correction; InvalidCorrection (one line) when it is not one."""
    try:
        document = decode_json(raw)
    except InvalidReading as exc:
        raise InvalidCorrection(str(exc)) from None
    if not isinstance(document, dict):
        raise InvalidCorrection("a correction is a JSON object")
    kind = document.get("kind")
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidCorrection(f"kind must be one of {', '.join(_KINDS)}, got {str(kind)[:40]!r}")
    try:
        correction = model.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "correction"
        raise InvalidCorrection(f"{where}: {error['msg']}"[:300]) from None
    if correction.to_s > now_s + MAX_FUTURE_S:
        raise InvalidCorrection(f"'to' ({correction.to}) is in the future: only what happened can be corrected")
    return correction


def correction_event_id(content: dict) -> str:
    """A correction's event id from its content (kind, card, span, target, reason, author): the
    same request twice is the same event, so a retried command does not correct twice."""
    canonical = json.dumps({k: v for k, v in sorted(content.items()) if k != "event_id"}, separators=(",", ":"),
                           ensure_ascii=False)
    return "corr-" + hashlib.sha256(canonical.encode()).hexdigest()[:24]
