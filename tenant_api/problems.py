"""Errors of the HTTP API as RFC 9457 problem details (``application/problem+json``).

Every answer that is not a success is a :class:`Problem`: the service raises it, the app
renders it, the access log records it. A problem says what a person can do about it
(``detail``) and, for a bad parameter, which one (``param``).

    Problem(status, detail, *, title, param, headers)
        400  a parameter is malformed, missing, repeated or unknown (``param`` names it)
        401  no key, or one that is malformed, unknown, revoked or expired
        404  nothing there — including another tenant's invoice (the same answer, byte for byte)
        429  too many requests for the key, downloads in flight, or failed sign-ins (tenant_api/limits.py)
        431  a request head over 16 KiB (answered by tenant_api/connections.py, before the app)
        503  the database or the rules cannot be read now
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Mapping

import orjson

MEDIA_TYPE = "application/problem+json"


class Problem(Exception):
    """An answer other than success: HTTP `status`, a `title` (the status phrase unless given),
    a `detail` a person can act on, the `param` it is about, and extra response `headers`
    (Retry-After, WWW-Authenticate). `reason` is a short word for the access log."""

    def __init__(self, status: int, detail: str, *, title: str | None = None, param: str | None = None,
                 headers: Mapping[str, str] | None = None, reason: str = "") -> None:
        super().__init__(detail)
        self.status = int(status)
        self.title = title or HTTPStatus(self.status).phrase
        self.detail = detail
        self.param = param
        self.headers = dict(headers or {})
        self.reason = reason or reason_of(self.status, param)

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        """The problem's JSON members (RFC 9457 §3: type, title, status, detail; extensions: param)."""
        body: dict[str, Any] = {"type": "about:blank", "title": self.title, "status": self.status, "detail": self.detail}
        if self.param is not None:
            body["param"] = self.param
        if instance is not None:
            body["instance"] = instance
        return body

    def body(self, instance: str | None = None) -> bytes:
        return orjson.dumps(self.to_dict(instance))

    def __repr__(self) -> str:
        return f"Problem({self.status}, {self.detail!r}, param={self.param!r})"


def bad_param(param: str, detail: str) -> Problem:
    """400 about one parameter: the detail names it and says what would be accepted."""
    return Problem(400, f"{param}: {detail}", param=param, reason="bad-param")


def reason_of(status: int, param: str | None = None) -> str:
    """A short word for the access log, from the status alone."""
    return {400: "bad-param" if param else "bad-request", 401: "unauthenticated", 403: "forbidden", 404: "not-found",
            405: "method", 429: "limited", 503: "unavailable"}.get(status, f"status-{status}")
