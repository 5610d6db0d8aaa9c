"""The access records of the API: every download and every refused request, into
ClickHouse's api_access_log (tenant_api/access_log.py), in batches.

    request ─► RequestInfo (a context variable; the app's middleware opens it per request,
               the service fills in key, tenant, period, format, bytes)
            ─► at the response's end: a download or a status ≥ 400 → AccessRecorder.add
            ─► the flush thread: one insert of everything pending, at least every second

What the records promise: (1) a record is written within about a second of its answer
(FLUSH_S), (2) a failed insert keeps the records and retries them on the next flush (it is
logged, /readyz says "behind", /metrics counts the pending records), (3) a stop flushes
what is pending before the database is closed, (4) when the backlog passes `max_pending`
(the database unreachable for a long time) the oldest records are dropped, and that is
logged at ERROR with the count and counted in /metrics — never silently.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["AccessRecorder", "RequestInfo", "asked", "current_request"]

log = logging.getLogger("gpubill.api")

FLUSH_S = 0.5
MAX_PENDING = 200_000


@dataclass
class RequestInfo:
    """What the access record of one request says; filled in while it is answered."""

    method: str = ""
    what: str = ""
    client: str = ""
    key: Any = None  # the ApiKey, once verified
    key_id: str = ""  # the id a refused token named
    tenant: str = ""
    period: str = ""
    fmt: str = ""
    download: bool = False
    bytes: int = 0
    reason: str = ""
    extra: dict = field(default_factory=dict)


ASKED_CHARS = 16  # what the access log keeps of a period or format (tenant_api.access_log.MAX_SHORT_CHARS)


def asked(query_string: bytes) -> tuple[str, str]:
    """The `period` and `format` a request's query string asks for, as it asks (the first of
    each; '' when not given), so that a refused request's record says what was asked — the
    service replaces them with what it served. Anything unprintable becomes `?`; a value
    longer than ASKED_CHARS is cut to its first ASKED_CHARS − 1 characters and `…`."""
    from urllib.parse import parse_qsl

    found: dict[str, str] = {}
    try:
        pairs = parse_qsl(query_string.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=64)
    except ValueError:  # more fields than that: the app refuses it; the record says nothing asked
        pairs = []
    for name, value in pairs:
        if name in ("period", "format") and name not in found:
            text = "".join(c if c.isprintable() else "?" for c in value[:ASKED_CHARS])
            found[name] = text if len(value) <= ASKED_CHARS else text[:ASKED_CHARS - 1] + "…"
    return found.get("period", ""), found.get("format", "")


_CURRENT: ContextVar[RequestInfo | None] = ContextVar("gpubill_api_request", default=None)


def current_request() -> RequestInfo:
    """The record of the request being answered (a throwaway one outside a request)."""
    info = _CURRENT.get()
    if info is None:
        info = RequestInfo()
        _CURRENT.set(info)
    return info


def open_request(info: RequestInfo):
    """Make `info` the current request's record; returns the token to reset it with."""
    return _CURRENT.set(info)


def close_request(token) -> None:
    _CURRENT.reset(token)


class AccessRecorder:
    """Buffers access records and writes them in batches from one thread.

    `write(records)` inserts them (tenant_api.access_log.record_access through the API's reads)."""

    def __init__(self, write: Callable[[Sequence[Any]], None], *, flush_s: float = FLUSH_S,
                 max_pending: int = MAX_PENDING, on_change: Callable[[int, int], None] | None = None) -> None:
        self.write = write
        self.flush_s = flush_s
        self.max_pending = max_pending
        self.on_change = on_change or (lambda pending, dropped: None)
        self.pending: deque = deque()
        self.dropped = 0
        self.written = 0
        self.last_error = ""
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def downloaded(self, size: int) -> None:
        """Mark the current request as a download of `size` bytes (it is recorded when answered)."""
        info = current_request()
        info.download, info.bytes = True, size

    def add(self, record: Any) -> None:
        with self._lock:
            self.pending.append(record)
            over = len(self.pending) - self.max_pending
            for _ in range(max(0, over)):
                self.pending.popleft()
            if over > 0:
                self.dropped += over
                log.error("access log: %d records dropped (%d in all): the database has not taken them for a long "
                          "time (%s)", over, self.dropped, self.last_error)
            self.on_change(len(self.pending), self.dropped)

    def record(self, info: RequestInfo, status: int, *, now: datetime | None = None) -> None:
        """Add the record of a finished request."""
        from tenant_api.access_log import AccessRecord

        key = info.key
        self.add(AccessRecord(
            time=now or datetime.now(UTC), key_id=key.id if key is not None else info.key_id,
            tenant=info.tenant or (key.tenant if key is not None else ""), method=info.method[:16],
            what=info.what[:256], period=info.period, fmt=info.fmt, bytes=int(info.bytes), status=int(status),
            client=info.client[:64], reason=info.reason[:64] if status >= 400 else ""))

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpubill-api-access-log", daemon=True)
            self._thread.start()

    def flush(self) -> bool:
        """Write everything pending now; False (records kept) when the insert failed."""
        with self._flush_lock:
            with self._lock:
                batch = list(self.pending)
            if not batch:
                return True
            try:
                self.write(batch)
            except Exception as exc:  # noqa: BLE001 - kept and retried; the reason is logged and shown
                first = self.last_error == ""
                self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                (log.error if first else log.debug)("access log: cannot write %d records, keeping them: %s",
                                                    len(batch), self.last_error)
                return False
            with self._lock:
                # drop exactly what was written (records added meanwhile stay; drops counted above)
                written = min(len(batch), len(self.pending))
                for _ in range(written):
                    self.pending.popleft()
                self.written += written
                self.on_change(len(self.pending), self.dropped)
            if self.last_error:
                log.warning("access log: writing again (%d records caught up)", len(batch))
                self.last_error = ""
            return True

    def health(self) -> str:
        """"ok", or why records are waiting."""
        with self._lock:
            waiting = len(self.pending)
        if self.last_error:
            return f"behind: {waiting} records not yet written ({self.last_error})"
        return "ok"

    def close(self, *, attempts: int = 3) -> None:
        """Stop the thread, then flush what is pending (a few tries); log what could not be written."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        for _ in range(attempts):
            if self.flush():
                return
        with self._lock:
            left = len(self.pending)
        if left:
            log.error("access log: %d records could not be written before the stop (%s)", left, self.last_error)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.flush()
