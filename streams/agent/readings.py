"""A sampled card-second → the JSON bytes of its usage and power readings (SPEC §3).

The bytes are built here once and written to the spool as they are; every (re)send
sends those bytes, so a resend is a duplicate of the first, never a conflict. The event
id depends only on the kind, the card and the second (`event_id`): a reading taken
again for the same card-second (it never is: the agent does not sample a second twice)
would carry the same id.

`power_w` is written from integer milliwatts as decimal text (123456 mW → 123.456), never
through a float; `energy_mj` is the counter's integer millijoules.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal

KIND_USAGE = "usage"
KIND_POWER = "power"
MAX_EVENT_ID = 128
MAX_EPOCH_LEN = 128
MAX_COUNTER_MJ = (1 << 63) - 1
MAX_POWER_MW = 5_000_000  # SPEC §3: 0 ≤ power_w ≤ 5000


@dataclass(frozen=True, slots=True)
class CardSample:
    """What one card reported for one second; None: the card did not report that metric."""

    gpu_uuid: str
    gpu_model: str | None  # a catalog id (models.py), or the card's own name when it maps to none
    util_pct: int | Decimal | None
    mem_used_mib: int | None
    power_mw: int | None
    energy_mj: int | None = None  # the counter and its epoch come together, or neither
    energy_epoch: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    """Who rents a card: tenant and instance ids, both None for a card that is not rented."""

    tenant: str | None = None
    instance: str | None = None


NOT_RENTED = Assignment()


def event_id(kind: str, gpu_uuid: str, second: int) -> str:
    """The reading's id: `u:` or `p:`, the card, the epoch second (`p:GPU-1c2e…:1772323205`).

    Deterministic: the same (kind, card, second) gives the same id in every process. A
    uuid too long to fit 128 characters is replaced by its SHA-256 (hex), still one id per card.
    """
    card = gpu_uuid
    if len(card) + 24 > MAX_EVENT_ID:  # 2 for "u:", 1 for ":", up to 21 for a second
        card = "sha256-" + hashlib.sha256(gpu_uuid.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{kind[0]}:{card}:{second}"


def ts_text(second: int) -> str:
    """RFC 3339 UTC of a whole epoch second: `2026-03-01T00:00:05Z`."""
    return datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def power_w_text(power_mw: int) -> str:
    """Watts as a JSON number from whole milliwatts, exactly: 123456 → "123.456", 5 → "0.005",
    120000 → "120" (trailing zeros dropped: the same value)."""
    if isinstance(power_mw, bool) or not isinstance(power_mw, int) or power_mw < 0:
        raise ValueError(f"power_mw must be a whole number of milliwatts ≥ 0, got {power_mw!r}")
    watts, milli = divmod(power_mw, 1000)
    return f"{watts}.{milli:03d}".rstrip("0").rstrip(".")


def _s(value: str | None) -> str:
    return json.dumps(value)  # None → null; ASCII-only escapes, so the bytes never depend on a locale


def usage_reading(sample: CardSample, second: int, site: str, node: str, assignment: Assignment) -> bytes:
    """The usage reading of `sample` at `second`. The caller has checked that the card
    reported util_pct, mem_used_mib and a model."""
    util = sample.util_pct
    util_text = str(util) if isinstance(util, (int, Decimal)) else json.dumps(util)
    return (
        f'{{"kind":"usage","event_id":{_s(event_id(KIND_USAGE, sample.gpu_uuid, second))},'
        f'"ts":"{ts_text(second)}","site":{_s(site)},"node":{_s(node)},"gpu_uuid":{_s(sample.gpu_uuid)},'
        f'"gpu_model":{_s(sample.gpu_model)},"tenant":{_s(assignment.tenant)},"instance":{_s(assignment.instance)},'
        f'"util_pct":{util_text},"mem_used_mib":{int(sample.mem_used_mib)}}}'
    ).encode()


def power_reading(sample: CardSample, second: int, site: str, node: str) -> bytes:
    """The power reading of `sample` at `second`: power_w from power_mw, and energy_mj with
    energy_epoch when the card reported its counter. The caller has checked power_mw."""
    counter = ""
    if sample.energy_mj is not None and sample.energy_epoch is not None:
        counter = f',"energy_mj":{int(sample.energy_mj)},"energy_epoch":{_s(sample.energy_epoch)}'
    return (
        f'{{"kind":"power","event_id":{_s(event_id(KIND_POWER, sample.gpu_uuid, second))},'
        f'"ts":"{ts_text(second)}","site":{_s(site)},"node":{_s(node)},"gpu_uuid":{_s(sample.gpu_uuid)},'
        f'"power_w":{power_w_text(sample.power_mw)}{counter}}}'
    ).encode()
