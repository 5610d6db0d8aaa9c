"""Billing events, version 1: what gpubill tells the rest of the cloud about a tenant's money
(issue 15; topic `gpu.billing-events.v1`, keyed by tenant).

    budget_threshold    month-to-date spend crossed a share of the tenant's monthly budget
                        (threshold: the percent, "50", "80", "100" by default)
    balance_low         the prepaid balance fell below a configured amount (threshold
                        "amount:<CNY>") or its runway below a number of hours at the last
                        hour's burn rate (threshold "runway:<hours>h")
    balance_exhausted   the balance reached zero (threshold "0"): the signal an orchestrator
                        uses to stop the tenant's instances
    invoice_overdue     an issued invoice is still unpaid `threshold` days past its due date
                        (a day of billing.toml's [dunning] overdue_days: "1", "7", "14"; issue 38)
    suspend_new_rentals an invoice is unpaid [dunning] suspend_new_rentals_days past its due date
                        (threshold: those days): the signal to refuse the tenant new rentals;
                        never sent for a prepaid tenant

The two dunning kinds (billing_rules/dunning.py) name their invoice and carry `invoice` (its
number), `due_date` (YYYY-MM-DD, billing time zone), `days_overdue` (days past due when seen,
≥ threshold) and `outstanding` (what the invoice still asks); `period` is the invoice's. The
other kinds carry none of these, and the dunning kinds none of `spend`, `budget`, `balance`.

An event is emitted once per (kind, tenant, period, threshold) — per (kind, tenant, period,
threshold, invoice) for the dunning kinds — and its `event_id` is a function of exactly
those, so an event produced again after a crash or a rebalance carries the same id and a
consumer deduplicates on it. Money is a decimal string with two decimals (CNY), never a JSON
number; times are UTC RFC 3339 with milliseconds and `Z`.

`SCHEMA_V1` is the JSON Schema (2020-12) of the message, published for consumers;
`parse_event` enforces the same rules (tests/unit/test_billing_events.py holds the two to
each other) without a JSON Schema library, and `encode_event` writes the one canonical form.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from schemas.errors import SchemaError
from schemas.ids import ID_PATTERN, is_id

__all__ = ["BillingEvent", "DUNNING_KINDS", "INVOICE_OVERDUE", "InvalidBillingEvent", "KINDS", "SCHEMA_V1",
           "SUSPEND_NEW_RENTALS", "encode_event", "event_id", "parse_event"]

INVOICE_OVERDUE, SUSPEND_NEW_RENTALS = "invoice_overdue", "suspend_new_rentals"
DUNNING_KINDS = (INVOICE_OVERDUE, SUSPEND_NEW_RENTALS)
KINDS = ("budget_threshold", "balance_low", "balance_exhausted", *DUNNING_KINDS)
VERSION = 1
PERIOD_PATTERN = r"^[0-9]{4}-(0[1-9]|1[0-2])$"
DAYS_PATTERN = r"^(36[0-5]|3[0-5][0-9]|[12][0-9]{2}|[1-9][0-9]?)$"  # a dunning threshold: 1 to 365
THRESHOLD_PATTERN = r"^(0|[1-9][0-9]{0,2}|amount:[0-9]{1,12}\.[0-9]{2}|runway:[1-9][0-9]{0,4}h)$"
MONEY_PATTERN = r"^-?[0-9]{1,15}\.[0-9]{2}$"
TIME_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
EVENT_ID_PATTERN = r"^be_[0-9a-f]{32}$"
INVOICE_PATTERN = r"^GB-[0-9]{4}-[0-9]{6,9}$"
DATE_PATTERN = r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"
DAYS_OVERDUE_PATTERN = r"^(0|[1-9][0-9]{0,5})$"
OUTSTANDING_PATTERN = r"^[0-9]{1,15}\.[0-9]{2}$"  # money, never negative
MONEY_FIELDS = ("spend", "budget", "balance")
DUNNING_FIELDS = ("invoice", "due_date", "days_overdue", "outstanding")  # the dunning kinds', each required
THRESHOLDS_OF = {  # which thresholds each kind may carry
    "budget_threshold": r"^(100|[1-9][0-9]?)$",
    "balance_low": r"^(amount:[0-9]{1,12}\.[0-9]{2}|runway:[1-9][0-9]{0,4}h)$",
    "balance_exhausted": r"^0$",
    INVOICE_OVERDUE: DAYS_PATTERN,
    SUSPEND_NEW_RENTALS: DAYS_PATTERN,
}
_THRESHOLDS_OF = {kind: re.compile(pattern) for kind, pattern in THRESHOLDS_OF.items()}
_PATTERNS = {"period": PERIOD_PATTERN, "observed_at": TIME_PATTERN, "event_id": EVENT_ID_PATTERN,
             "invoice": INVOICE_PATTERN, "due_date": DATE_PATTERN, "days_overdue": DAYS_OVERDUE_PATTERN,
             "outstanding": OUTSTANDING_PATTERN, **dict.fromkeys(MONEY_FIELDS, MONEY_PATTERN)}

SCHEMA_V1: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://gpubill.dev/schemas/billing-events.v1.json",
    "title": "gpubill billing event, version 1",
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "event_id", "kind", "tenant", "period", "threshold", "observed_at"],
    "properties": {
        "version": {"const": VERSION},
        "event_id": {"type": "string", "pattern": EVENT_ID_PATTERN,
                     "description": "the same for the same kind, tenant, period and threshold (and invoice, for "
                                    "the dunning kinds): deduplicate on it"},
        "kind": {"enum": list(KINDS)},
        "tenant": {"type": "string", "pattern": ID_PATTERN},
        "period": {"type": "string", "pattern": PERIOD_PATTERN, "description": "billing period YYYY-MM"},
        "threshold": {"type": "string", "pattern": THRESHOLD_PATTERN},
        "observed_at": {"type": "string", "pattern": TIME_PATTERN,
                        "description": "when the crossing was seen (UTC)"},
        **{name: {"type": "string", "pattern": MONEY_PATTERN, "description": f"{name} in CNY at that moment"}
           for name in MONEY_FIELDS},
        "invoice": {"type": "string", "pattern": INVOICE_PATTERN, "description": "the unpaid invoice's number"},
        "due_date": {"type": "string", "pattern": DATE_PATTERN,
                     "description": "the invoice's due date (YYYY-MM-DD, billing time zone)"},
        "days_overdue": {"type": "string", "pattern": DAYS_OVERDUE_PATTERN,
                         "description": "days past the due date when seen (at least the threshold)"},
        "outstanding": {"type": "string", "pattern": OUTSTANDING_PATTERN,
                        "description": "what the invoice still asks, in CNY with VAT, when seen"},
    },
    "allOf": [
        # each kind its own thresholds
        *({"if": {"properties": {"kind": {"const": kind}}}, "then": {"properties": {"threshold": {"pattern": pattern}}}}
          for kind, pattern in THRESHOLDS_OF.items()),
        # the dunning kinds name their invoice (and carry no spend, budget or balance); the others never do
        {"if": {"properties": {"kind": {"enum": list(DUNNING_KINDS)}}},
         "then": {"required": list(DUNNING_FIELDS), "properties": dict.fromkeys(MONEY_FIELDS, False)},
         "else": {"properties": dict.fromkeys(DUNNING_FIELDS, False)}},
    ],
}


class InvalidBillingEvent(SchemaError):
    """Bytes that are not a valid v1 billing event; str() says what is wrong."""


@dataclass(frozen=True)
class BillingEvent:
    kind: str
    tenant: str
    period: str
    threshold: str
    observed_at: str
    spend: str | None = None
    budget: str | None = None
    balance: str | None = None
    invoice: str | None = None  # the dunning kinds' four (DUNNING_FIELDS)
    due_date: str | None = None
    days_overdue: str | None = None
    outstanding: str | None = None

    @property
    def event_id(self) -> str:
        return event_id(self.kind, self.tenant, self.period, self.threshold, self.invoice or "")


def event_id(kind: str, tenant: str, period: str, threshold: str, invoice: str = "") -> str:
    """The event's id: a hash of what makes it one event, nothing else (not the time seen, nor
    what a dunning event says of its invoice then). `invoice` only for the dunning kinds: the
    ids of the other kinds are what they always were."""
    text = f"billing-event/v{VERSION}\x1f{kind}\x1f{tenant}\x1f{period}\x1f{threshold}"
    if kind in DUNNING_KINDS:
        text += f"\x1f{invoice}"
    return "be_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def observed(moment: datetime) -> str:
    """`moment` as an event's observed_at: UTC, milliseconds, `Z`."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def encode_event(event: BillingEvent) -> bytes:
    """The canonical JSON of `event` (checked first: an invalid event is never produced)."""
    document = {"version": VERSION, "event_id": event.event_id, "kind": event.kind, "tenant": event.tenant,
                "period": event.period, "threshold": event.threshold, "observed_at": event.observed_at}
    document |= {name: getattr(event, name) for name in (*MONEY_FIELDS, *DUNNING_FIELDS)
                 if getattr(event, name) is not None}
    _check(document)
    return json.dumps(document, separators=(",", ":"), sort_keys=True, ensure_ascii=True).encode()


def parse_event(raw: bytes) -> BillingEvent:
    """The event in `raw`; InvalidBillingEvent naming the first thing wrong otherwise."""
    if len(raw) > 4096:
        raise InvalidBillingEvent(f"a billing event is at most 4096 bytes, this is {len(raw)}")
    try:
        document = json.loads(raw, object_pairs_hook=_unique, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidBillingEvent(f"not JSON: {exc}") from None
    _check(document)
    return BillingEvent(**{name: document[name] for name in ("kind", "tenant", "period", "threshold", "observed_at")},
                        **{name: document.get(name) for name in (*MONEY_FIELDS, *DUNNING_FIELDS)})


def _check(document: Any) -> None:
    if not isinstance(document, dict):
        raise InvalidBillingEvent("a billing event is a JSON object")
    allowed = set(SCHEMA_V1["properties"])
    unknown = sorted(set(document) - allowed)
    if unknown:
        raise InvalidBillingEvent(f"unknown field {unknown[0]!r}")
    missing = [name for name in SCHEMA_V1["required"] if name not in document]
    if missing:
        raise InvalidBillingEvent(f"missing field {missing[0]!r}")
    if document["version"] != VERSION or type(document["version"]) is not int:
        raise InvalidBillingEvent(f"version must be {VERSION}")
    for name, value in document.items():
        if name != "version" and not isinstance(value, str):
            raise InvalidBillingEvent(f"{name} must be a string")
    if document["kind"] not in KINDS:
        raise InvalidBillingEvent(f"kind must be one of {', '.join(KINDS)}")
    if not is_id(document["tenant"]):
        raise InvalidBillingEvent("tenant is not an id (letters, digits, '.', '_', '-'; at most 64)")
    for name, pattern in _PATTERNS.items():
        if name in document and not re.fullmatch(pattern.strip("^$"), document[name], flags=re.ASCII):
            raise InvalidBillingEvent(f"{name} {document[name][:40]!r} does not match {pattern}")
    kind = document["kind"]
    if not _THRESHOLDS_OF[kind].fullmatch(document["threshold"]):
        raise InvalidBillingEvent(f"threshold {document['threshold'][:40]!r} is not one of {kind}'s")
    dunning = kind in DUNNING_KINDS
    for name in DUNNING_FIELDS:
        if dunning and name not in document:
            raise InvalidBillingEvent(f"missing field {name!r} ({kind} names its invoice)")
        if not dunning and name in document:
            raise InvalidBillingEvent(f"field {name!r} is only for {' and '.join(DUNNING_KINDS)}")
    for name in MONEY_FIELDS:
        if dunning and name in document:
            raise InvalidBillingEvent(f"field {name!r} is not one of {kind}'s")
    expected = event_id(kind, document["tenant"], document["period"], document["threshold"], document.get("invoice", ""))
    if document["event_id"] != expected:
        raise InvalidBillingEvent("event_id is not the hash of kind, tenant, period and threshold"
                                  + (" and invoice" if dunning else ""))


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for name, value in pairs:
        if name in document:
            raise InvalidBillingEvent(f"duplicate key {name!r}")
        document[name] = value
    return document


def _no_constant(name: str) -> Any:
    raise InvalidBillingEvent(f"{name} is not JSON")
