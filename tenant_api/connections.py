"""The one adapter over uvicorn's HTTP/1.1 protocol (h11): the bounds uvicorn does not keep.

uvicorn closes a connection kept alive and idle after a response (`timeout_keep_alive`), but
any byte restarts nothing more, a connection that never sends stays open for ever, and it
accepts until the process runs out of descriptors (then asyncio logs an error line per
failed accept). The adapter adds, per server:

    ConnectionGuard            at most `max_connections` open; a new one past it closes the
                               oldest connection still waiting for a request head, then the
                               oldest still sending a request body (none: the new one is
                               refused); a request head must be complete `head_timeout_s`
                               after the connection opened or after the previous response,
                               and a request body `head_timeout_s` after its head, however
                               slowly they drip (the API's bodies are small forms). No log
                               line per connection: one warning at most every `warn_every_s`.
    guarded_protocol(guard)    the protocol class for ``uvicorn.Config(http=...)``: uvicorn's
                               own H11Protocol with the guard around it, and h11's refusals
                               of a malformed request (a non-ASCII byte in the target, a head
                               over the size limit) answered as problem JSON, not plain text
    fits()                     the start-up self-check: '' when the uvicorn and h11 internals
                               used here are there, else what is missing (ApiServer then
                               serves with plain h11 and logs an error; tests/unit/
                               test_api_connections.py fails on such an upgrade)
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenant_api.problems import MEDIA_TYPE, Problem

__all__ = ["ConnectionGuard", "ConnectionLimits", "fits", "guarded_protocol"]

log = logging.getLogger("gpubill.api")

# what the adapter overrides or reads, by name: a uvicorn upgrade that drops one fails fits()
_METHODS = {"connection_made": ["self", "transport"], "connection_lost": ["self", "exc"],
            "handle_events": ["self"], "on_response_complete": ["self"], "send_400_response": ["self", "msg"]}
_ATTRIBUTES = ("conn", "transport", "loop")


@dataclass(frozen=True)
class ConnectionLimits:
    """The bounds of the server's connections (GPUBILL_API_* settings; docs/api.md)."""

    max_connections: int = 1024   # open at once; past it the oldest still waiting for a head is closed
    head_timeout_s: float = 10.0  # a request head is complete this long after connecting or a response
    keep_alive_s: float = 5.0     # uvicorn's: an idle connection after a response is closed after this

    @classmethod
    def from_settings(cls, settings: Any) -> "ConnectionLimits":
        return cls(max_connections=settings.api_max_connections, head_timeout_s=float(settings.api_head_timeout_s),
                   keep_alive_s=float(settings.api_keep_alive_s))


class ConnectionGuard:
    """The open connections of one server and which of them wait for a request head.

    Runs on the server's event loop only (asyncio callbacks), so it takes no lock."""

    def __init__(self, max_connections: int, head_timeout_s: float, *, warn_every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_close: Callable[[str], None] = lambda why: None) -> None:
        self.max_connections, self.head_timeout_s = max_connections, head_timeout_s
        self.warn_every_s, self.clock, self.on_close = warn_every_s, clock, on_close
        self.open: set[Any] = set()
        self.waiting: OrderedDict[Any, None] = OrderedDict()  # no complete head yet, oldest first
        self.receiving: OrderedDict[Any, None] = OrderedDict()  # a head in, its body not yet, oldest first
        self.most_open = 0  # the high-water mark, for tests and the warning
        self.closed = {"cap": 0, "head-timeout": 0, "body-timeout": 0}  # since the start
        self._unreported = {"cap": 0, "head-timeout": 0, "body-timeout": 0}
        self._warned_at = -float("inf")

    def admit(self, connection: Any) -> Any | None:
        """Count a new connection (already waiting for its head); the connection to close to stay
        within the cap — the oldest waiting one, possibly `connection` itself — or None."""
        self.open.add(connection)
        self.waiting[connection] = None
        self.most_open = max(self.most_open, len(self.open))
        if len(self.open) <= self.max_connections:
            return None
        # the oldest waiting for a head, then the oldest still sending a body, `connection` itself last
        victim = next((c for c in self.waiting if c is not connection), None) \
            or next(iter(self.receiving), None) or connection
        self.forget(victim)
        self.count("cap")
        return victim

    def wait_for_head(self, connection: Any) -> None:
        if connection in self.open:
            self.waiting[connection] = None
            self.waiting.move_to_end(connection)

    def head_received(self, connection: Any, *, body: bool = False) -> None:
        self.waiting.pop(connection, None)
        if body and connection in self.open:
            self.receiving[connection] = None

    def body_received(self, connection: Any) -> None:
        self.receiving.pop(connection, None)

    def forget(self, connection: Any) -> None:
        self.open.discard(connection)
        self.waiting.pop(connection, None)
        self.receiving.pop(connection, None)

    def count(self, why: str) -> None:
        """One connection closed by the guard: counted, and at most one warning per `warn_every_s`."""
        self.closed[why] += 1
        self._unreported[why] += 1
        self.on_close(why)
        now = self.clock()
        if now - self._warned_at >= self.warn_every_s:
            self._warned_at = now
            cap, slow, slow_body = (self._unreported[why] for why in ("cap", "head-timeout", "body-timeout"))
            self._unreported = {"cap": 0, "head-timeout": 0, "body-timeout": 0}
            log.warning("API connections: %d closed at the cap of %d open, %d for not sending a request head "
                        "and %d a request body within %g s (this line at most every %g s)", cap,
                        self.max_connections, slow, slow_body, self.head_timeout_s, self.warn_every_s)


def fits() -> str:
    """'' when uvicorn's H11Protocol and h11 still have what the adapter relies on, else what not."""
    try:
        import h11
        from uvicorn.protocols.http.h11_impl import H11Protocol
    except ImportError as exc:
        return f"cannot import uvicorn's h11 protocol: {exc}"
    missing = []
    for name, params in _METHODS.items():
        method = getattr(H11Protocol, name, None)
        if method is None or list(inspect.signature(method).parameters) != params:
            missing.append(f"H11Protocol.{name}({', '.join(params[1:])})")
    source = inspect.getsource(H11Protocol.__init__)
    missing += [f"H11Protocol.{name}" for name in _ATTRIBUTES if not re.search(rf"self\.{name}\s*[:=]", source)]
    if not isinstance(getattr(h11.Connection, "trailing_data", None), property):
        missing.append("h11.Connection.trailing_data")
    for state in ("IDLE", "SEND_BODY"):
        if not hasattr(h11, state):
            missing.append(f"h11.{state}")
    return ", ".join(missing)


def guarded_protocol(guard: ConnectionGuard, max_head_bytes: int) -> type:
    """uvicorn's H11Protocol under `guard` (call only when fits() is '')."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _head_timer: Any = None
        _body_timer: Any = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            victim = guard.admit(self)
            self._arm()
            if victim is not None:
                victim._drop()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._body_done()
            guard.forget(self)
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            sending_body = self.conn.their_state is h11.SEND_BODY
            if self._head_timer is not None and self.conn.their_state is not h11.IDLE:
                self._disarm()  # the head is in: what follows is the app's time, not the client's
                guard.head_received(self, body=sending_body)
                if sending_body:  # ... once the body is in too
                    self._body_timer = self.loop.call_later(guard.head_timeout_s, self._body_overdue)
            if not sending_body and self._body_timer is not None:
                self._body_done()

        def on_response_complete(self) -> None:
            if not self.transport.is_closing():
                self._arm()  # before uvicorn's, which may go on to a pipelined request at once
                guard.wait_for_head(self)
            super().on_response_complete()

        def send_400_response(self, msg: str) -> None:
            """h11 refused what came (uvicorn logs one line, rate-limited by ApiServer): a
            problem, then close, as uvicorn does."""
            buffered = len(self.conn.trailing_data[0])
            if buffered > max_head_bytes:
                problem = Problem(431, f"the request head is larger than {max_head_bytes // 1024} KiB",
                                  reason="head-too-large")
            else:
                problem = Problem(400, "not a valid HTTP/1.1 request: the request line and headers must be "
                                       "ASCII, with a non-ASCII character in the path or query percent-encoded "
                                       "(e.g. %E4%B8%AD)", reason="bad-request")
            body = problem.body()
            head = (f"HTTP/1.1 {problem.status} {problem.title}\r\ncontent-type: {MEDIA_TYPE}\r\n"
                    f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode("ascii")
            self.transport.write(head + body)
            self.transport.close()

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(guard.head_timeout_s, self._head_overdue)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_overdue(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                guard.forget(self)
                guard.count("head-timeout")
                self.transport.abort()

        def _body_done(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None
                guard.body_received(self)

        def _body_overdue(self) -> None:
            self._body_timer = None
            if not self.transport.is_closing() and self.conn.their_state is h11.SEND_BODY:
                guard.forget(self)
                guard.count("body-timeout")
                self.transport.abort()

        def _drop(self) -> None:
            self._disarm()
            self._body_done()
            self.transport.abort()

    return GuardedH11Protocol
