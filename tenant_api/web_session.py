"""The web page's sign-in sessions and the CSRF checks of its forms.

What a browser holds is a random session id (256 bits) in an HttpOnly, SameSite=Strict
cookie (Secure over https); the API key it was opened with stays here, in the server's
memory, and every page and download re-verifies it through ``Service.authenticate``, so a
revoked or expired key ends its sessions within the service's key cache (5 s).

- Sessions live in this process only (the embedded database is held by one process too):
  a restart signs everybody out, which is the safe failure. They end after
  :data:`IDLE_S` without a request, :data:`LIFETIME_S` after sign-in, at sign-out, or — the
  least recently used first — past :data:`MAX_PER_KEY` of one key, :data:`MAX_PER_TENANT` of
  one tenant, or :data:`MAX_SESSIONS` in all; the last never ends another tenant's session
  (the tenant's own goes, or the sign-in is refused: :class:`SessionsFull`).
- Ids are looked up by their SHA-256, so the table never holds a usable cookie value.
- Sign-in always opens a *new* session (no fixation); sign-out deletes it here, so a copied
  cookie is worthless afterwards.

CSRF: every POST must come from this origin (``Origin``, or ``Referer`` when a browser
sends no Origin; neither → refused; see :func:`same_origin` for a TLS proxy in front) and carry a form token: the session's own random token
once signed in, or, for the sign-in form itself (login CSRF), a random token that is also in
a short-lived SameSite=Strict cookie (double submit). Tokens compare in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["IDLE_S", "LIFETIME_S", "MAX_PER_KEY", "MAX_PER_TENANT", "MAX_SESSIONS", "Session", "Sessions",
           "SessionsFull", "new_token", "same_origin", "tokens_match"]

IDLE_S = 30 * 60
LIFETIME_S = 12 * 3600
MAX_SESSIONS = 10_000
MAX_PER_KEY = 16
MAX_PER_TENANT = 500


class SessionsFull(Exception):
    """No room for a new session: the table is full of other tenants' sessions (sign-in refused;
    nobody else's session is ever pushed out)."""


def new_token() -> str:
    """256 random bits, URL-safe (43 characters)."""
    return secrets.token_urlsafe(32)


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()


@dataclass
class Session:
    """One signed-in browser: the key it signed in with (never sent back to the browser), that
    key's id and tenant ('' for an operator key), the token its forms carry, and an operator
    key's chosen tenant."""

    token: str
    csrf: str
    started_s: float
    seen_s: float
    tenant: str | None = None
    key_id: str = ""
    owner: str = ""


class Sessions:
    """The open sessions of this process; safe to use from the server's threads.

    Room is made within what signs in: past `max_per_key` sessions of a key its least recently
    used one ends, past `max_per_tenant` of a tenant (its keys together) the tenant's, and when
    the whole table is full the tenant's own least recently used one — or, when it has none,
    the sign-in is refused (SessionsFull). So one tenant's keys, however many, never end
    another tenant's session."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, idle_s: float = IDLE_S,
                 lifetime_s: float = LIFETIME_S, max_sessions: int = MAX_SESSIONS, max_per_key: int = MAX_PER_KEY,
                 max_per_tenant: int = MAX_PER_TENANT) -> None:
        self._clock = clock
        self._idle_s = idle_s
        self._lifetime_s = lifetime_s
        self._max = max_sessions
        self._max_per_key = max_per_key
        self._max_per_tenant = max_per_tenant
        self._open: OrderedDict[bytes, Session] = OrderedDict()  # least recently used first
        self._of_key: dict[str, OrderedDict[bytes, None]] = {}
        self._of_tenant: dict[str, OrderedDict[bytes, None]] = {}
        self._lock = threading.Lock()

    def start(self, token: str, *, key_id: str = "", tenant: str = "") -> tuple[str, Session]:
        """A new session for a verified key (`key_id` of `tenant`, '' for an operator key): its
        id (for the cookie) and the session. SessionsFull when there is no room (see the class)."""
        session_id = new_token()
        now = self._clock()
        session = Session(token=token, csrf=new_token(), started_s=now, seen_s=now, key_id=key_id, owner=tenant)
        digest = _digest(session_id)
        with self._lock:
            self._make_room(key_id, tenant, now)
            self._open[digest] = session
            self._of_key.setdefault(key_id, OrderedDict())[digest] = None
            self._of_tenant.setdefault(tenant, OrderedDict())[digest] = None
        return session_id, session

    def find(self, session_id: str | None) -> Session | None:
        """The open session of a cookie value, its idle clock restarted; None when there is none
        (never was, signed out, idle too long, too old)."""
        if not session_id or len(session_id) > 128:
            return None
        digest = _digest(session_id)
        now = self._clock()
        with self._lock:
            session = self._open.get(digest)
            if session is None:
                return None
            if self._over(session, now):
                self._drop(digest)
                return None
            session.seen_s = now
            self._open.move_to_end(digest)
            self._of_key[session.key_id].move_to_end(digest)
            self._of_tenant[session.owner].move_to_end(digest)
            return session

    def end(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._drop(_digest(session_id))

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def _make_room(self, key_id: str, tenant: str, now: float) -> None:
        """Under the lock: end sessions so that one more of `key_id` of `tenant` fits."""
        for group, cap in ((self._of_key.get(key_id), self._max_per_key), (self._of_tenant.get(tenant), self._max_per_tenant)):
            while group and len(group) >= cap:
                self._drop(next(iter(group)))
        if len(self._open) < self._max:
            return
        for digest in [d for d, s in self._open.items() if self._over(s, now)]:  # the expired go first
            self._drop(digest)
        if len(self._open) < self._max:
            return
        own = self._of_tenant.get(tenant)
        if not own:
            raise SessionsFull(f"{len(self._open)} sessions are open, the most this server keeps")
        self._drop(next(iter(own)))

    def _over(self, session: Session, now: float) -> bool:
        return now - session.seen_s > self._idle_s or now - session.started_s > self._lifetime_s

    def _drop(self, digest: bytes) -> None:
        session = self._open.pop(digest, None)
        if session is None:
            return
        for index, name in ((self._of_key, session.key_id), (self._of_tenant, session.owner)):
            group = index[name]
            del group[digest]
            if not group:
                del index[name]


def tokens_match(expected: str | None, given: str | None) -> bool:
    """Whether a form's token is the expected one (constant time; a missing one never matches)."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode("utf-8", "surrogatepass"), given.encode("utf-8", "surrogatepass"))


def same_origin(headers: Mapping[str, str], scheme: str, netloc: str) -> bool:
    """Whether a POST says it comes from this page, served at `scheme://netloc`. ``Origin:
    null``, a foreign origin, or no Origin and no Referer: not ours.

    Seen over http, ``https://netloc`` is ours too: behind a TLS proxy (``gpubill serve``
    reads no forwarded headers) the browser is on https while we see http. The other way
    round is refused: a page on http cannot post into an https session."""
    expected = {f"https://{netloc}".lower()} | ({f"http://{netloc}".lower()} if scheme == "http" else set())
    origin = headers.get("origin")
    if origin is None:
        referer = headers.get("referer")
        if not referer:
            return False
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return origin.lower() in expected
