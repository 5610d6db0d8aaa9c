"""The record of webhook deliveries: every attempt, in ClickHouse (migration 0017).

    record_attempts(db, attempts) -> None         one insert, all or nothing
    deliveries(db, *, tenant=None, event_id=None, failed=False, limit=100) -> [DeliveryAttempt]

The deliverer (streams/webhooks.py, run by `gpubill events deliver`) records each attempt
as it is made, before the event's offset is committed; `gpubill events deliveries` reads
them back, newest first. The rows are `schemas.webhooks.DeliveryAttempt`s; text that came
from a receiver (its answer, an error) is bounded to MAX_ERROR_CHARS and stored as received
(unencodable characters replaced), and printed through terminal_text by the command line.

    BillingError                        (billing/errors.py)
    └── InvalidDeliveryQuery            a limit out of range, or an event id that is not one
    (InvalidTenant, billing/tenants.py: a tenant filter that is not a tenant id)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from billing.errors import BillingError
from billing.tenants import check_tenant_id
from schemas.webhooks import FAILED, GAVE_UP, MAX_ERROR_CHARS, STATUSES, DeliveryAttempt

__all__ = ["COLUMNS", "MAX_LIMIT", "InvalidDeliveryQuery", "deliveries", "record_attempts"]

TABLE = "webhook_deliveries"
COLUMNS = tuple(field.name for field in fields(DeliveryAttempt))  # the table's columns, in its order
MAX_LIMIT = 10_000
MAX_TEXT_CHARS = 2_000  # a URL (after shown_url); longer ones are cut
_EVENT_ID = re.compile(r"be_[0-9a-f]{32}", flags=re.ASCII)


class InvalidDeliveryQuery(BillingError):
    """A deliveries query that cannot be answered as asked: a limit out of range, an event id that is not be_…"""


def record_attempts(db: Any, attempts: Sequence[DeliveryAttempt]) -> None:
    """Write `attempts` with one insert (nothing for none). Each is checked first (ValueError
    naming the field), so either all are written or none is."""
    rows = [_row(attempt) for attempt in attempts]
    if rows:
        db.insert(TABLE, rows, COLUMNS)


def deliveries(db: Any, *, tenant: str | None = None, event_id: str | None = None, failed: bool = False,
               limit: int = 100) -> list[DeliveryAttempt]:
    """The newest `limit` attempts (of `tenant`, of `event_id`; with `failed`, only those that
    did not deliver: failed and gave_up), newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidDeliveryQuery(f"limit {limit!r} is not a whole number from 1 to {MAX_LIMIT}")
    where, params = ["1"], {"n": limit}
    if tenant is not None:
        where.append("tenant = {t:String}")
        params["t"] = check_tenant_id(tenant)
    if event_id is not None:
        if not isinstance(event_id, str) or not _EVENT_ID.fullmatch(event_id):
            raise InvalidDeliveryQuery(f"event id {str(event_id)[:40]!r} is not be_ and 32 hex digits")
        where.append("event_id = {e:String}")
        params["e"] = event_id
    if failed:
        where.append(f"status IN ('{FAILED}', '{GAVE_UP}')")
    sql = (f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE {' AND '.join(where)} "
           "ORDER BY attempted_at DESC, attempt DESC, event_id LIMIT {n:UInt32}")
    return [_attempt(row) for row in db.query(sql, params)]


def _row(attempt: DeliveryAttempt) -> tuple:
    if attempt.status not in STATUSES:
        raise ValueError(f"delivery attempt: status {attempt.status!r} is not one of {', '.join(STATUSES)}")
    for name, top in (("attempt", 65_535), ("duration_ms", 4_294_967_295)):
        value = getattr(attempt, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise ValueError(f"delivery attempt: {name} must be a whole number from 0 to {top}, got {value!r}")
    status = attempt.http_status
    if status is not None and (isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 999):
        raise ValueError(f"delivery attempt: http_status {status!r} is not an HTTP status")
    if not isinstance(attempt.attempted_at, datetime):
        raise ValueError(f"delivery attempt: attempted_at must be a datetime, got {type(attempt.attempted_at).__name__}")
    return (_bounded(attempt.event_id, 64), _bounded(attempt.tenant, 64), _bounded(attempt.kind, 32),
            _bounded(attempt.url, MAX_TEXT_CHARS), attempt.attempt, attempt.status, status,
            _bounded(attempt.error, MAX_ERROR_CHARS), attempt.duration_ms, _utc(attempt.attempted_at))


def _bounded(value: object, limit: int) -> str:
    text = "" if value is None else str(value)
    return text[:limit].encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be stored


def _attempt(row: Iterable[Any]) -> DeliveryAttempt:
    values = dict(zip(COLUMNS, row))
    values["attempted_at"] = _utc(values["attempted_at"])
    return DeliveryAttempt(**values)


def _utc(moment: datetime) -> datetime:
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)
