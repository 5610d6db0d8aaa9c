"""API keys: who may read the tenant API and the web page, and as whom (migration 0014).

A key is shown once, when it is created, as ``gpb_<id>_<secret>``:

- ``<id>`` is public: ``k_`` and 16 lowercase base32 letters (80 random bits), shown by
  `gpubill key list`, written in every access record;
- ``<secret>`` is 32 random bytes (256 bits) as unpadded URL-safe base64, 43 characters;
- only the SHA-256 of the secret's text is stored. A slow password hash (argon2, bcrypt)
  protects secrets people choose; nobody can search 2^256 secrets, so a fast hash loses
  nothing and keeps every request's check in microseconds.

A tenant key reads its tenant only, which must be registered (billing/tenants.py); an
operator key (role ``operator``, tenant ``''``) reads any tenant, for the support desk.
`--expires DATE` means the key works through the end of that day in UTC: ``expires_at`` is
the next midnight UTC, and from that instant on the key is refused.

`verify_key` parses a token strictly (length, prefix, alphabets, canonical base64) before
any query, compares the hash in constant time, and says why it refused, in this order:
malformed, unknown (no such id, or a wrong secret: the two are not told apart), revoked,
expired. Revoked and expired are only said to the holder of the right secret.

Nothing is deleted: revoking writes the whole row again with a later ``updated_at`` and the
latest row is the key.

    ApiError                       (tenant_api/errors.py)
    ├── UnknownKeyId                   revoke of a well-formed id that does not exist
    ├── InvalidKeyRequest              a create or revoke that may not be carried out: role,
    │                                  label, expiry, unregistered tenant, malformed id
    └── KeyRefused                     verify_key: .reason is malformed | unknown | revoked | expired
    (InvalidTenant, billing/tenants.py: a tenant id outside the id syntax)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from billing import books
from billing.tenants import InvalidTenant, check_tenant_id, checked_text, find_tenant, utc_ms
from schemas.books import ApiKeyFact, ApiKeyRow
from tenant_api.errors import ApiError, UnknownKeyId

__all__ = [
    "ACTIVE", "EXPIRED", "MALFORMED", "OPERATOR", "REASONS", "REVOKED", "ROLES", "TENANT", "UNKNOWN",
    "ApiKey", "InvalidKeyRequest", "KeyRefused", "check_key_id", "check_label", "check_request", "check_role",
    "create_key", "expiry_instant", "find_key", "key_id_of", "list_keys", "parse_token", "revoke_key", "verify_key",
]

TENANT, OPERATOR = "tenant", "operator"
ROLES = (TENANT, OPERATOR)
ACTIVE, REVOKED, EXPIRED = "active", "revoked", "expired"
MALFORMED, UNKNOWN = "malformed", "unknown"
REASONS = (MALFORMED, UNKNOWN, REVOKED, EXPIRED)
MAX_LABEL_CHARS = 100
MAX_EXPIRY_DAYS = 3660  # about ten years: a key meant to last longer should be rotated instead

TOKEN_PREFIX = "gpb_"
KEY_ID = re.compile(r"k_[a-z2-7]{16}")
_SECRET_BYTES = 32
_SECRET_CHARS = 43  # 32 bytes as unpadded base64
TOKEN_CHARS = len(TOKEN_PREFIX) + 18 + 1 + _SECRET_CHARS  # 66
_TOKEN = re.compile(rf"{TOKEN_PREFIX}(k_[a-z2-7]{{16}})_([A-Za-z0-9_-]{{{_SECRET_CHARS}}})")
# Compared against when the id is unknown, so an unknown id costs what a known one does.
_NO_HASH = "0" * 64  # a hex SHA-256, as secret_sha256 writes one

COLUMNS = ("id", "tenant", "role", "label", "secret_sha256", "created_at", "expires_at", "revoked_at",
           "updated_at")
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM api_keys FINAL"


class InvalidKeyRequest(ApiError):
    """A key that may not be created or revoked as asked; the message says what to change."""


class KeyRefused(ApiError):
    """A token that does not open the API; `reason` is one of REASONS, the message a person's
    one line (it never quotes the token)."""

    _MESSAGES = {
        MALFORMED: "the key is not a gpubill API key (gpb_ then the key id and its secret): copy it whole",
        UNKNOWN: "the key is not known: check it was copied whole, or ask the operator for a new one",
        REVOKED: "the key was revoked: ask the operator for a new one",
        EXPIRED: "the key has expired: ask the operator for a new one",
    }

    def __init__(self, reason: str, key_id: str = "") -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown refusal reason {reason!r}")
        self.reason = reason
        self.key_id = key_id  # the id the token named, '' when malformed
        super().__init__(self._MESSAGES[reason])


@dataclass(frozen=True)
class ApiKey:
    """One key, as its latest row says; never its secret."""

    id: str  # public: k_ and 16 lowercase base32 letters
    tenant: str  # '' for an operator key
    role: str  # tenant | operator
    label: str
    created_at: datetime  # UTC
    expires_at: datetime | None  # UTC; refused from this instant on (the midnight after --expires DATE)
    revoked_at: datetime | None  # UTC

    def state(self, now: datetime | None = None) -> str:
        """active, revoked or expired at `now`."""
        if self.revoked_at is not None:
            return REVOKED
        if self.expires_at is not None and utc_ms(now) >= self.expires_at:
            return EXPIRED
        return ACTIVE


# ------------------------------------------------------------------------- checks (pure)


def check_role(role: object) -> str:
    if role not in ROLES:
        shown = ascii(role[:40]) if isinstance(role, str) else type(role).__name__
        raise InvalidKeyRequest(f"role {shown} is not one of {', '.join(ROLES)}")
    return role  # type: ignore[return-value]


def check_label(label: object) -> str:
    """The label as stored: checked like a tenant's note (any script, no control or invisible
    formatting characters), NFC, stripped, at most MAX_LABEL_CHARS characters, may be empty."""
    try:
        return checked_text("label", label, MAX_LABEL_CHARS, empty_ok=True)  # type: ignore[arg-type]
    except InvalidTenant as exc:
        raise InvalidKeyRequest(str(exc)) from exc


def check_key_id(key_id: object) -> str:
    """`key_id` when it is a key id (k_ and 16 letters a-z, 2-7); InvalidKeyRequest otherwise."""
    if isinstance(key_id, str) and KEY_ID.fullmatch(key_id):
        return key_id
    shown = ascii(key_id[:40]) if isinstance(key_id, str) else type(key_id).__name__
    raise InvalidKeyRequest(f"key id {shown} is not a key id: k_ and 16 letters a-z or digits 2-7, "
                            "as `gpubill key list` shows")


def expiry_instant(expires: date | None, now: datetime | None = None) -> datetime | None:
    """When a key given `--expires expires` stops working: the midnight UTC after that day.

    The day may be today (the key works until midnight UTC), not before, and at most
    MAX_EXPIRY_DAYS ahead."""
    if expires is None:
        return None
    if not isinstance(expires, date) or isinstance(expires, datetime):
        raise InvalidKeyRequest("expiry must be a date (YYYY-MM-DD)")
    today = utc_ms(now).date()
    if expires < today:
        raise InvalidKeyRequest(f"expiry {expires.isoformat()} is in the past (today is {today.isoformat()} UTC)")
    if expires > today + timedelta(days=MAX_EXPIRY_DAYS):
        raise InvalidKeyRequest(f"expiry {expires.isoformat()} is more than {MAX_EXPIRY_DAYS} days ahead: "
                                "give a nearer date and create a new key then")
    return datetime.combine(expires + timedelta(days=1), time(0), tzinfo=UTC)


def check_request(*, tenant: str | None, role: str, label: str, expires: date | None,
                  now: datetime | None = None) -> tuple[str, str, str, datetime | None]:
    """(tenant, role, label, expires_at) of a key as create_key would store it, or the first
    refusal; pure, so the command line checks everything before opening the database."""
    role, label = check_role(role), check_label(label)
    expires_at = expiry_instant(expires, now)
    if role == OPERATOR:
        if tenant:
            raise InvalidKeyRequest("an operator key reads every tenant: give no tenant with role operator")
        return "", role, label, expires_at
    if not tenant:
        raise InvalidKeyRequest("a tenant key needs its tenant (--tenant ID); for the support desk use "
                                "--role operator")
    return check_tenant_id(tenant), role, label, expires_at


def parse_token(token: object) -> tuple[str, str]:
    """(key id, secret) of a token in the exact shape create_key makes; KeyRefused(malformed)
    otherwise. Checks the length first, so a huge value costs nothing more."""
    if not isinstance(token, str) or len(token) != TOKEN_CHARS:
        raise KeyRefused(MALFORMED)
    match = _TOKEN.fullmatch(token)
    if not match:
        raise KeyRefused(MALFORMED)
    key_id, secret = match.groups()
    # Canonical base64 only: the last letter of 32 bytes carries 2 bits, so 3 in 4 spellings
    # of it decode to the same bytes; one secret has one spelling.
    try:
        raw = base64.urlsafe_b64decode(secret + "=")
    except (binascii.Error, ValueError):
        raise KeyRefused(MALFORMED) from None
    if len(raw) != _SECRET_BYTES or base64.urlsafe_b64encode(raw).decode().rstrip("=") != secret:
        raise KeyRefused(MALFORMED)
    return key_id, secret


def secret_sha256(secret: str) -> str:
    """The stored form of a secret: hex SHA-256 of its text."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def new_key_id() -> str:
    return "k_" + base64.b32encode(secrets.token_bytes(10)).decode().lower()  # 80 bits: 16 letters, no padding


def new_secret() -> str:
    return secrets.token_urlsafe(_SECRET_BYTES)


# ------------------------------------------------------------------------- reads and writes


def create_key(db: Any, *, tenant: str | None, role: str = TENANT, label: str = "",
               expires: date | None = None, now: datetime | None = None) -> tuple[ApiKey, str]:
    """Create a key; returns (the key, its token). The token exists only in this return value.

    A tenant key needs `tenant` registered (any status: a suspended tenant still reads its
    invoices); an operator key takes no tenant. Everything is checked before the write."""
    at = utc_ms(now)
    tenant, role, label, expires_at = check_request(tenant=tenant, role=role, label=label, expires=expires, now=at)
    if role == TENANT:
        if find_tenant(db, tenant) is None:
            raise InvalidKeyRequest(f"tenant {tenant} is not registered: register it first with "
                                    f"`gpubill tenant add {tenant} --name NAME`")
    key = ApiKey(new_key_id(), tenant, role, label, at, expires_at, None)
    secret = new_secret()
    _write(db, key, secret_sha256(secret), at, "api_key_created")
    return key, f"{TOKEN_PREFIX}{key.id}_{secret}"


def find_key(db: Any, key_id: str) -> ApiKey | None:
    """The key `key_id` (a well-formed id), or None."""
    row = _row(db, check_key_id(key_id))
    return None if row is None else _key(row)


def list_keys(db: Any, *, tenant: str | None = None) -> list[ApiKey]:
    """Every key (of `tenant` only), by tenant, creation and id; never a secret or its hash."""
    where, params = "", None
    if tenant is not None:
        where, params = " WHERE tenant = {t:String}", {"t": check_tenant_id(tenant)}
    rows = db.query(_SELECT + where + " ORDER BY tenant, created_at, id", params)
    return [_key(row) for row in rows]


def revoke_key(db: Any, key_id: str, *, now: datetime | None = None) -> ApiKey:
    """Revoke `key_id` from `now` on; returns the key as revoked. Revoking a revoked key changes
    nothing (its first revocation time stays). UnknownKeyId for an id that does not exist."""
    key_id = check_key_id(key_id)
    row = _row(db, key_id)
    if row is None:
        raise UnknownKeyId(f"no key {key_id}: `gpubill key list` shows the keys")
    key = _key(row)
    if key.revoked_at is not None:
        return key
    # Strictly later than the row it replaces, so the revocation wins even within a millisecond.
    at = max(utc_ms(now), utc_ms(row[COLUMNS.index("updated_at")]) + timedelta(milliseconds=1))
    revoked = ApiKey(key.id, key.tenant, key.role, key.label, key.created_at, key.expires_at, at)
    _write(db, revoked, row[COLUMNS.index("secret_sha256")], at, "api_key_revoked")
    return revoked


def key_id_of(token: object) -> str:
    """The key id a token names, '' when it is not in the shape of a key (pure, no query)."""
    try:
        return parse_token(token)[0]
    except KeyRefused:
        return ""


def verify_key(db: Any, token: str, *, now: datetime | None = None) -> ApiKey:
    """The key `token` opens at `now`; KeyRefused (with its reason) otherwise.

    An unknown id costs what a known one with a wrong secret does: the same query reads one
    row either way (the id's, or its neighbour's), and the secret's hash is compared in
    constant time with the row's or with a dummy of the same kind."""
    key_id, secret = parse_token(token)
    presented = secret_sha256(secret)
    row = _row_or_neighbour(db, key_id)
    found = row is not None and row[0] == key_id
    stored = row[COLUMNS.index("secret_sha256")] if found else _NO_HASH  # type: ignore[index]
    if not hmac.compare_digest(presented, stored) or not found:
        raise KeyRefused(UNKNOWN, key_id)
    key = _key(row)
    state = key.state(now)
    if state != ACTIVE:
        raise KeyRefused(state, key_id)
    return key


def _row(db: Any, key_id: str) -> tuple | None:
    rows = db.query(_SELECT + " WHERE id = {id:String}", {"id": key_id})
    return tuple(rows[0]) if rows else None


def _row_or_neighbour(db: Any, key_id: str) -> tuple | None:
    """The row of `key_id`, else of the first id after it (else the last id): one row, read
    from one granule, whether the id exists or not — without it, an unknown id is answered from
    the primary index alone and costs the database less than a known one (issue 21)."""
    rows = db.query(_SELECT + " WHERE id >= least({id:String}, (SELECT max(id) FROM api_keys)) ORDER BY id LIMIT 1",
                    {"id": key_id})
    return tuple(rows[0]) if rows else None


def _write(db: Any, key: ApiKey, hashed: str, updated_at: datetime, kind: str) -> None:
    """Record the key's row on the books (billing/books.py): its hash, never the secret."""
    values = {"secret_sha256": hashed, "updated_at": updated_at}
    row = ApiKeyRow(**{c: values[c] if c in values else getattr(key, c) for c in COLUMNS})
    books.record(db, ApiKeyFact(kind=kind, key_row=row))


def _key(row: Iterable[Any]) -> ApiKey:
    key_id, tenant, role, label, _hash, created, expires, revoked, _updated = row
    return ApiKey(key_id, tenant, role, label, utc_ms(created), None if expires is None else utc_ms(expires),
                  None if revoked is None else utc_ms(revoked))
