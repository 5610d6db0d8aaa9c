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
from typing import Any

from gpubill.errors import ConfigError

__all__ = ["ApiServer", "RulesReloader", "parse_listen"]

log = logging.getLogger("gpubill.api")

RULES_POLL_S = 10.0


def parse_listen(listen: str) -> tuple[str, int]:
    """'host:port' (or ':port', '[::1]:port') → (host, port); the host defaults to loopback."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--listen: {listen!r} is not host:port, e.g. 127.0.0.1:8080")
    return host.strip("[]") or "127.0.0.1", int(port)


class RulesReloader:
    """The rule set of a directory, reloaded when its files change (checked at most every
    RULES_POLL_S); an invalid edit keeps the last good set, as the worker does."""

    def __init__(self, directory: Path, rules: Any) -> None:
        self.directory = Path(directory)
        self.rules = rules
        self._stamp = self._files()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        if time.monotonic() - self._checked >= RULES_POLL_S and self._lock.acquire(blocking=False):
            try:
                self._checked = time.monotonic()
                stamp = self._files()
                if stamp != self._stamp:
                    self._stamp = stamp
                    self._reload()
            finally:
                self._lock.release()
        return self.rules

    def _reload(self) -> None:
        from billing_rules import BillingRulesError, load_rules

        try:
            self.rules = load_rules(self.directory)
            log.warning("rule files changed: reloaded")
        except BillingRulesError as exc:
            log.error("rule files changed but are invalid, still answering with the last good set: %s", exc)

    def _files(self) -> tuple:
        try:
            return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in self.directory.glob("*.toml")))
        except OSError:
            return ()


class ApiServer:
    """uvicorn on a socket bound at construction, before the database is opened (a taken port
    fails at once, costing nothing); `attach` gives it the app."""

    def __init__(self, listen: str) -> None:
        import socket

        from gpubill.errors import GpubillError

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
            raise GpubillError(f"cannot listen on {host}:{port}: {reason} (set --listen or GPUBILL_HTTP_PORT)") from None
        self.host, self.port = host, self.socket.getsockname()[1]
        self.server: Any = None
        self._thread: threading.Thread | None = None

    def attach(self, app: Any) -> "ApiServer":
        import uvicorn

        # h11, whose header limit below holds (uvicorn's httptools protocol has none, and measured
        # no faster here); the plain asyncio loop, never uvloop, which would change the event loop
        # policy of the whole process (`gpubill up` runs the worker's loop beside this one)
        config = uvicorn.Config(app, loop="asyncio", http="h11", log_config=None, access_log=False,
                                proxy_headers=False, server_header=False,
                                timeout_keep_alive=5, backlog=512, h11_max_incomplete_event_size=16 * 1024,
                                lifespan="on", timeout_graceful_shutdown=10)
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
                from gpubill.errors import GpubillError

                raise GpubillError(f"the API did not start on {self.url} (its log lines say why)")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop serving: requests in flight finish, the access records are flushed (lifespan)."""
        if self.server is not None:
            self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.socket.close()
