"""Webhook deliveries of billing events: the signature, the retry schedule, the record of an
attempt, and the checks on a target URL. Pure: no HTTP, no Kafka, no clock (times are passed in).

A delivery is an HTTP POST of the event's canonical JSON (schemas/billing_events.py) with

    Content-Type: application/json
    Gpubill-Event-Id: be_…                   the event's id: receivers deduplicate on it
    Gpubill-Signature: t=<unix s>,v1=<hex>   HMAC-SHA256(secret, f"{t}.{body}"), lower-case hex

`t` is the time of that attempt (each retry signs again), so a receiver can refuse old
signatures (`verify`'s `tolerance_s`) and a captured request cannot be replayed later.

Every attempt is recorded (billing/webhook_deliveries.py, migration 0017) as one
`DeliveryAttempt` with one of three statuses:

    delivered   the receiver answered 2xx
    failed      a connection error, a timeout, or a non-2xx answer; another attempt follows
    gave_up     the last attempt failed (max attempts reached), or the message was not a
                valid billing event (attempt 0: nothing was sent); the deliverer moves on

    SchemaError                  (schemas/errors.py)
    └── InvalidWebhookTarget     a URL that is not http(s) with a host, or an unusable secret
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

from schemas.errors import SchemaError

__all__ = ["DELIVERED", "EVENT_ID_HEADER", "FAILED", "GAVE_UP", "MAX_ERROR_CHARS", "MIN_SECRET_CHARS",
           "SIGNATURE_HEADER", "STATUSES", "DeliveryAttempt", "InvalidWebhookTarget", "backoff_s", "check_secret",
           "check_url", "shown_url", "sign", "signature", "verify"]

SIGNATURE_HEADER = "Gpubill-Signature"
EVENT_ID_HEADER = "Gpubill-Event-Id"
DELIVERED, FAILED, GAVE_UP = "delivered", "failed", "gave_up"
STATUSES = (DELIVERED, FAILED, GAVE_UP)
MAX_ERROR_CHARS = 200  # of a receiver's answer (or an error's text) kept in a record
MIN_SECRET_CHARS = 16
BACKOFF_BASE_S = 1
BACKOFF_CAP_S = 60
_HEADER = re.compile(r"t=([0-9]{1,12}),v1=([0-9a-f]{64})", flags=re.ASCII)


class InvalidWebhookTarget(SchemaError):
    """A webhook URL that is not http:// or https:// with a host, or a secret too short to sign with."""


@dataclass(frozen=True)
class DeliveryAttempt:
    """One POST of one event to one URL (or, attempt 0, a message that could not be sent)."""

    event_id: str  # the event's id, '' when the message was not a valid event
    tenant: str  # '' likewise
    kind: str  # one of schemas.billing_events.KINDS (budget_threshold, …, invoice_overdue), '' likewise
    url: str  # the target as shown (`shown_url`: no password, no query)
    attempt: int  # 1, 2, … ; 0 for a message that was not sent at all
    status: str  # one of STATUSES
    http_status: int | None  # the receiver's status; None when there was no answer
    error: str  # '' when delivered, else why (at most MAX_ERROR_CHARS of the answer's body)
    duration_ms: int  # from sending to the answer (or the error), whole milliseconds
    attempted_at: datetime  # UTC, when the attempt started


def signature(secret: str | bytes, timestamp_s: int, body: bytes) -> str:
    """HMAC-SHA256 of f"{timestamp_s}.{body}" under `secret`, as lower-case hex."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, str(timestamp_s).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, timestamp_s: int, body: bytes) -> str:
    """The value of the Gpubill-Signature header: "t=<timestamp_s>,v1=<hex>"."""
    return f"t={timestamp_s},v1={signature(secret, timestamp_s, body)}"


def verify(secret: str | bytes, header: str, body: bytes, *, now_s: int, tolerance_s: int = 300) -> bool:
    """What a receiver does: the header is well formed, signs `body` under `secret`, and was
    made at most `tolerance_s` seconds before or after `now_s`. Compared in constant time."""
    match = _HEADER.fullmatch(header.strip())
    if not match:
        return False
    timestamp_s = int(match.group(1))
    if abs(now_s - timestamp_s) > tolerance_s:
        return False
    return hmac.compare_digest(match.group(2), signature(secret, timestamp_s, body))


def backoff_s(attempt: int) -> int:
    """Seconds to wait after failed attempt number `attempt` (1-based): 1 × 2^(attempt−1),
    at most 60 — 1, 2, 4, 8, 16, 32, 60, 60 …"""
    if attempt < 1:
        raise ValueError(f"attempt numbers start at 1, got {attempt}")
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(attempt - 1, 16))


def check_url(url: str) -> str:
    """`url` if it is http:// or https:// with a host and nothing odd in it; else
    InvalidWebhookTarget in one line (file:, ftp:, javascript:, a bare host … are refused)."""
    text = url.strip()
    if not text:
        raise InvalidWebhookTarget("no webhook URL: give --url or set GPUBILL_WEBHOOK_URL")
    if any(ord(c) < 0x21 or c == "\x7f" for c in text):
        raise InvalidWebhookTarget("the webhook URL contains blanks or control characters")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 — raises ValueError on a port that is not a number in range
    except ValueError as exc:
        raise InvalidWebhookTarget(f"the webhook URL {shown_url(text)!r} cannot be read: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        given = f"{parts.scheme}:" if parts.scheme else "no scheme"
        raise InvalidWebhookTarget(f"the webhook URL must start with http:// or https:// (it has {given})")
    if not parts.hostname:
        raise InvalidWebhookTarget(f"the webhook URL {shown_url(text)!r} has no host")
    return text


def check_secret(secret: str | None) -> str:
    """`secret` if it has at least MIN_SECRET_CHARS characters; InvalidWebhookTarget otherwise."""
    if not secret:
        raise InvalidWebhookTarget("set GPUBILL_WEBHOOK_SECRET: the secret webhooks are signed with "
                                   f"(at least {MIN_SECRET_CHARS} characters; never given on the command line)")
    if len(secret) < MIN_SECRET_CHARS:
        raise InvalidWebhookTarget(f"GPUBILL_WEBHOOK_SECRET is {len(secret)} characters: use at least "
                                   f"{MIN_SECRET_CHARS} (a random string, e.g. `openssl rand -hex 32`)")
    return secret


def shown_url(url: str) -> str:
    """`url` as it may be stored and printed: a password becomes ***, a query and a fragment
    (where receivers often put tokens) become ?***."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            netloc = f"{parts.username}:***@{netloc.rpartition('@')[2]}"
        return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query or parts.fragment else "", ""))
    except ValueError:
        return "(unreadable URL)"
