"""The API's access records: every download and refused request, in ClickHouse (migration 0015).

The server (tenant_api/) buffers records and writes many with one `record_access`;
`gpubill key audit` reads them back with `access_log`, newest first; finance reads the
view ``v_api_access`` (docs/finance.md).

Text in a record comes partly from outside (the path asked for, the client's address): it
is stored as received, cut to a bounded length (a megabyte of path is kept as its first
MAX_TEXT_CHARS characters) with unencodable characters (lone surrogates) replaced, and shown
through terminal_text by the command line. A record whose numbers are not numbers
(`bytes`, `status`) is a programming error: ValueError, before anything is written, so a
batch is written whole or not at all.

    ApiError                       (tenant_api/errors.py)
    └── InvalidAuditQuery              access_log asked with a limit out of range
    (InvalidTenant, billing/tenants.py; InvalidKeyRequest, tenant_api/keys.py: filters
    that are not a tenant id or a key id)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from billing.tenants import check_tenant_id
from tenant_api.errors import ApiError
from tenant_api.keys import check_key_id

MAX_TEXT_CHARS = 300  # what, client, reason, key_id, tenant
MAX_SHORT_CHARS = 16  # method, period, format
MAX_LIMIT = 10_000

# (column, field of AccessRecord): the column is `format` for finance, the field `fmt`.
_FIELDS = (("time", "time"), ("key_id", "key_id"), ("tenant", "tenant"), ("method", "method"),
           ("what", "what"), ("period", "period"), ("format", "fmt"), ("bytes", "bytes"),
           ("status", "status"), ("client", "client"), ("reason", "reason"))
COLUMNS = tuple(column for column, _ in _FIELDS)
_SHORT = frozenset({"method", "period", "fmt"})


class InvalidAuditQuery(ApiError):
    """An access_log query that cannot be answered as asked (a limit out of range)."""


@dataclass(frozen=True)
class AccessRecord:
    """One answered request of the API or the web page."""

    time: datetime  # UTC, when it was answered
    key_id: str  # the key's public id; '' when the request carried none that could be read
    tenant: str  # whose data; '' when refused before that was known
    method: str  # GET, POST …
    what: str  # the route, e.g. "/v1/usage"
    period: str  # YYYY-MM served; a refusal: what the request asked (tenant_api.records.asked); '' if nothing
    fmt: str  # csv | json | parquet | pdf served; a refusal: what was asked; '' if nothing
    bytes: int  # body bytes sent
    status: int  # HTTP status
    client: str  # the client's address
    reason: str  # '' when served, else why it was refused


def record_access(db: Any, records: Sequence[AccessRecord]) -> None:
    """Write `records` with one insert (nothing for none). Every record is checked first, so
    either all are written or (ValueError, DatabaseError) none is."""
    rows = [_row(record) for record in records]
    db.insert("api_access_log", rows, COLUMNS)


def access_log(db: Any, *, tenant: str | None = None, key_id: str | None = None,
               since: datetime | None = None, limit: int = 100) -> list[AccessRecord]:
    """The newest `limit` records (of `tenant`, of `key_id`, from `since` on), newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidAuditQuery(f"limit {limit!r} is not a whole number from 1 to {MAX_LIMIT}")
    where, params = ["1"], {"n": limit}
    if tenant is not None:
        where.append("tenant = {t:String}")
        params["t"] = check_tenant_id(tenant)
    if key_id is not None:
        where.append("key_id = {k:String}")
        params["k"] = check_key_id(key_id)
    if since is not None:
        where.append("time >= {s:DateTime64(3, 'UTC')}")
        params["s"] = _utc(since)
    sql = (f"SELECT {', '.join(COLUMNS)} FROM api_access_log WHERE {' AND '.join(where)} "
           "ORDER BY time DESC, key_id LIMIT {n:UInt32}")
    return [_record(row) for row in db.query(sql, params)]


def _row(record: AccessRecord) -> tuple:
    for name in ("bytes", "status"):
        value = getattr(record, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"access record: {name} must be a whole number ≥ 0, got {value!r}")
    if record.status > 999:
        raise ValueError(f"access record: status {record.status} is not an HTTP status")
    if not isinstance(record.time, datetime):
        raise ValueError(f"access record: time must be a datetime, got {type(record.time).__name__}")
    values = []
    for _column, field in _FIELDS:
        value = getattr(record, field)
        if field == "time":
            value = _utc(value)
        elif field not in ("bytes", "status"):
            value = _bounded(value, MAX_SHORT_CHARS if field in _SHORT else MAX_TEXT_CHARS)
        values.append(value)
    return tuple(values)


def _bounded(value: object, limit: int) -> str:
    text = "" if value is None else str(value)
    # Lone surrogates (a path decoded with surrogateescape) cannot be stored as UTF-8.
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


def _record(row: Iterable[Any]) -> AccessRecord:
    values = dict(zip((field for _, field in _FIELDS), row))
    values["time"] = _utc(values["time"])
    return AccessRecord(**values)


def _utc(moment: datetime) -> datetime:
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)
