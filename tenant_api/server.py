"""Running the API: `gpubill serve` (its own process) and inside `gpubill up` (a thread beside
the worker, sharing the one embedded database).

uvicorn serves the app; `proxy_headers` is off, so the client address the limits and the
access log use is the TCP peer's — behind a reverse proxy that is the proxy's (docs/api.md).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenant_api.errors import ApiError, ListenRefused

if TYPE_CHECKING:
    from tenant_api.connections import ConnectionLimits

__all__ = ["ApiServer", "RulesReloader", "parse_listen"]

log = logging.getLogger("gpubill.api")

RULES_POLL_S = 10.0
HEAD_BYTES = 16 * 1024  # the largest request head h11 takes (431 past it)
DESCRIPTORS_RESERVED = 0.5  # the share of the process's descriptor limit left to everything but connections
LOG_EVERY_S = 10.0  # uvicorn's own per-request warnings (a malformed request, ...): at most one a message this often


def parse_listen(listen: str) -> tuple[str, int]:
    """'host:port' (or ':port', '[::1]:port') → (host, port); the host defaults to loopback."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ListenRefused(f"--listen: {listen!r} is not host:port, e.g. 127.0.0.1:8080")
    return host.strip("[]") or "127.0.0.1", int(port)


class RulesReloader:
    """The rule set of a directory, reloaded when its files change (checked at most every
    RULES_POLL_S); an invalid edit keeps the last good set. The mechanism is the worker's and
    the scheduler's (billing_rules/reloading.py); this adds the throttle and a lock, for the
    API's threads."""

    def __init__(self, directory: Path, rules: Any) -> None:
        from billing_rules.reloading import RuleFiles

        self.files = RuleFiles(directory, rules)
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    @property
    def rules(self) -> Any:
        return self.files.rules

    def __call__(self) -> Any:
        if time.monotonic() - self._checked >= RULES_POLL_S and self._lock.acquire(blocking=False):
            try:
                self._checked = time.monotonic()
                self.files.reload()
            finally:
                self._lock.release()
        return self.files.rules


class ApiServer:
    """uvicorn on a socket bound at construction, before the database is opened (a taken port
    fails at once, costing nothing); `attach` gives it the app."""

    def __init__(self, listen: str) -> None:
        import socket

        host, port = parse_listen(listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets that say
        # they are TCP, and without it a small answer written in two pieces waits for the client's
        # delayed ACK (40 ms here, measured by `gpubill bench api`)
        self.socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
        except OSError as exc:
            self.socket.close()
            reason = "address already in use" if exc.errno == 98 else (exc.strerror or str(exc))
            raise ListenRefused(f"cannot listen on {host}:{port}: {reason} (set --listen or GPUBILL_HTTP_PORT)") from None
        self.host, self.port = host, self.socket.getsockname()[1]
        self.server: Any = None
        self._thread: threading.Thread | None = None

    def attach(self, app: Any, limits: "ConnectionLimits | None" = None) -> "ApiServer":
        """Serve `app` within `limits` (default: what create_app put in app.state.connection_limits,
        from the GPUBILL_API_* settings)."""
        import uvicorn

        from tenant_api.connections import ConnectionGuard, ConnectionLimits, fits, guarded_protocol

        if limits is None:
            limits = getattr(getattr(app, "state", None), "connection_limits", None) or ConnectionLimits()
        max_connections = _within_descriptors(limits.max_connections)
        metrics = getattr(getattr(app, "state", None), "metrics", None)
        misfit = fits()
        http: Any = "h11"
        self.guard = None
        if misfit:
            # serving matters more than the guard: plain h11, bounded by uvicorn's limit_concurrency only
            log.error("uvicorn %s does not fit tenant_api/connections.py (%s): serving WITHOUT the request-head "
                      "deadline and the connection cap", uvicorn.__version__, misfit)
        else:
            self.guard = ConnectionGuard(max_connections, limits.head_timeout_s,
                                         on_close=metrics.connection_closed if metrics is not None else lambda why: None)
            http = guarded_protocol(self.guard, HEAD_BYTES)
            log.info("API connections: at most %d open, request heads within %g s, kept alive %g s (uvicorn %s)",
                     max_connections, limits.head_timeout_s, limits.keep_alive_s, uvicorn.__version__)
        if metrics is not None:
            metrics.connection_guard.set(0 if misfit else 1)
        _quiet_uvicorn()
        # h11, whose header limit below holds (uvicorn's httptools protocol has none, and measured
        # no faster here); the plain asyncio loop, never uvloop, which would change the event loop
        # policy of the whole process (`gpubill up` runs the worker's loop beside this one).
        # limit_concurrency (503 past it) is one above the guard's cap, so it never fires while the
        # guard holds; without the guard it is the bound that is left. No websockets: none are served.
        config = uvicorn.Config(app, loop="asyncio", http=http, ws="none", log_config=None, access_log=False,
                                proxy_headers=False, server_header=False, limit_concurrency=max_connections + 1,
                                timeout_keep_alive=limits.keep_alive_s, backlog=512,
                                h11_max_incomplete_event_size=HEAD_BYTES, lifespan="on", timeout_graceful_shutdown=10)
        self.server = uvicorn.Server(config)
        return self

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def run(self) -> None:
        """Serve in this thread until SIGINT/SIGTERM, then exit normally (status 0).

        uvicorn catches the signals while it serves and, once stopped, raises them again to
        the handlers that were there before; quiet ones here, so that a stop asked for is a
        clean exit, not a death by the signal."""
        import signal

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: None)
        self.server.run(sockets=[self.socket])

    def start_thread(self, timeout_s: float = 30.0) -> None:
        """Serve from a thread of its own (its own event loop); returns once it listens."""
        # uvicorn leaves signal handling alone outside the main thread: the caller keeps its own
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                        name="gpubill-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ApiError(f"the API did not start on {self.url} (its log lines say why)")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop serving: requests in flight finish, the access records are flushed (lifespan)."""
        if self.server is not None:
            self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.socket.close()


def _within_descriptors(max_connections: int) -> int:
    """`max_connections`, lowered (and said so) to half of the process's descriptor limit, so
    that connections never take the descriptors the database and the log files need."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = max(16, int(soft * (1 - DESCRIPTORS_RESERVED))) if soft != resource.RLIM_INFINITY else max_connections
    if max_connections > room:
        log.warning("API connections: at most %d, not %d (GPUBILL_API_MAX_CONNECTIONS): the process may open %d "
                    "descriptors (ulimit -n) and keeps half for the rest", room, max_connections, soft)
        return room
    return max_connections


class _EveryWhile(logging.Filter):
    """Lets one record of each message through per `every_s`; the next one says how many were held back."""

    def __init__(self, every_s: float, *, errors_too: bool = False) -> None:
        super().__init__()
        self.every_s, self.errors_too = every_s, errors_too
        self._seen: dict[str, tuple[float, int]] = {}  # message → (last let through, held back since)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and not self.errors_too:
            return True  # an exception in the app: every one is worth its line
        key = str(record.msg)[:200]
        now = time.monotonic()
        with self._lock:
            last, held = self._seen.get(key, (-float("inf"), 0))
            if now - last < self.every_s:
                self._seen[key] = (last, held + 1)
                return False
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last {self.every_s:g} s)"
        return True


def _quiet_uvicorn() -> None:
    """uvicorn warns once per malformed request or connection over its limit, asyncio errs once
    per failed accept when descriptors run out: rate-limit those lines (per message)."""
    for name, errors_too in (("uvicorn.error", False), ("asyncio", True)):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _EveryWhile) for f in logger.filters):
            logger.addFilter(_EveryWhile(LOG_EVERY_S, errors_too=errors_too))
