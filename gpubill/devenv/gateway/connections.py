"""The gateway's connections: a cap that nobody without a finished request can hold, deadlines
on every phase of a request, a budget for request bodies, and statements stopped when their
client goes away.

    accepted ─► head ─► body ─► running ─► idle ─► head …          (one Connection each)
               ≤ head_timeout_s   ≤ grace + bytes / min rate   until the statement ends   ≤ idle_timeout_s

- The cap (`max_connections`) counts open connections. When it is reached, a new connection
  takes the place of the oldest one that has not finished a request head (then of the
  oldest idle kept-alive one); only when every connection is reading a body or running a
  statement is the newcomer refused with 503. A client that drips a header byte now and
  then (slowloris) therefore holds nothing: it is the first to go, and in any case goes at
  its head deadline, which a byte does not restart.
- A body must keep coming: its deadline is `body_grace_s` plus one second per
  `body_min_rate` bytes received, so a client that stalls is cut off, one that sends is not.
- `BodyBudget` bounds the bytes of request bodies held at once across all connections;
  past it a request is refused with 503 (retry later) before its body is read.
- While a statement runs, the sweeper watches its socket: a client that closed it has its
  statement cancelled (`on_gone`), so an abandoned query does not run to its time limit.

One sweeper thread does the timing (every `SWEEP_S`), so no read restarts a clock.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("gpubill.gateway")

SWEEP_S = 0.25
HEAD, BODY, RUNNING, IDLE = "head", "body", "running", "idle"


@dataclass(eq=False)
class Connection:
    """One accepted connection and where its current request stands."""

    sock: socket.socket
    accepted_s: float
    phase: str = HEAD
    since_s: float = 0.0
    deadline_s: float = float("inf")
    body_bytes: int = 0
    on_gone: Callable[[], None] | None = field(default=None, repr=False)
    gone: bool = False  # its client left while a statement ran
    closed: bool = False


class Connections:
    """The open connections of one gateway, with their deadlines (thread-safe)."""

    def __init__(self, max_connections: int, *, head_timeout_s: float = 10.0, idle_timeout_s: float = 120.0,
                 body_grace_s: float = 10.0, body_min_rate: int = 1 << 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_connections = max_connections
        self.head_timeout_s, self.idle_timeout_s = head_timeout_s, idle_timeout_s
        self.body_grace_s, self.body_min_rate = body_grace_s, body_min_rate
        self.clock = clock
        self._open: dict[int, Connection] = {}  # id(connection) → connection, oldest first
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.evicted = 0
        self.timed_out = 0
        self.cancelled = 0

    # ------------------------------------------------------------------ the handler's side

    def admit(self, sock: socket.socket) -> Connection | None:
        """A Connection for a newly accepted socket, in the place of the oldest waiting one
        when the cap is reached; None when every connection is busy (the caller answers 503)."""
        now = self.clock()
        victim = None
        with self._lock:
            if len(self._open) >= self.max_connections:
                victim = self._waiting_oldest()
                if victim is None:
                    return None
                self._drop(victim)
                self.evicted += 1
            connection = Connection(sock, now, HEAD, now, now + self.head_timeout_s)
            self._open[id(connection)] = connection
        if victim is not None:
            _shut(victim.sock)
        return connection

    def reading_body(self, connection: Connection) -> None:
        now = self.clock()
        with self._lock:
            connection.phase, connection.since_s, connection.body_bytes = BODY, now, 0
            connection.deadline_s = now + self.body_grace_s

    def body_progress(self, connection: Connection, received_bytes: int) -> None:
        """`received_bytes` of the body are in: the deadline moves by what they earn."""
        with self._lock:
            connection.body_bytes = received_bytes
            connection.deadline_s = connection.since_s + self.body_grace_s + received_bytes / self.body_min_rate

    def running(self, connection: Connection, on_gone: Callable[[], None]) -> None:
        with self._lock:
            connection.phase, connection.since_s, connection.deadline_s = RUNNING, self.clock(), float("inf")
            connection.on_gone, connection.gone = on_gone, False

    def idle(self, connection: Connection) -> None:
        """The request is answered: the connection waits for the next one (kept alive)."""
        now = self.clock()
        with self._lock:
            connection.phase, connection.since_s, connection.on_gone = IDLE, now, None
            connection.deadline_s = now + self.idle_timeout_s

    def release(self, connection: Connection) -> None:
        with self._lock:
            self._drop(connection)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    # ------------------------------------------------------------------ the sweeper

    def start(self) -> None:
        self._thread = threading.Thread(target=self._sweep_forever, name="gateway-sweeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def sweep(self) -> None:
        """Close what is past its deadline; cancel the statements of clients that left."""
        now = self.clock()
        late, running = [], []
        with self._lock:
            for connection in list(self._open.values()):
                if connection.phase == RUNNING:
                    running.append(connection)
                elif now >= connection.deadline_s:
                    late.append(connection)
                    self._drop(connection)
        for connection in late:
            self.timed_out += 1
            _shut(connection.sock)
        for connection in running:
            if connection.on_gone is not None and _client_left(connection.sock):
                if not connection.gone:  # counted and logged once; cancelled at every sweep until it
                    connection.gone = True  # ends (a statement still being parsed has nothing to kill yet)
                    self.cancelled += 1
                    log.info("client of a running statement went away: cancelling it")
                connection.on_gone()

    def _sweep_forever(self) -> None:
        while not self._stop.wait(SWEEP_S):
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the sweeper must outlive any one connection's fault
                log.exception("gateway sweeper failure")

    def _waiting_oldest(self) -> Connection | None:
        for phase in (HEAD, IDLE):  # never finished a request first, then kept-alive idle ones
            waiting = [c for c in self._open.values() if c.phase == phase]
            if waiting:
                return min(waiting, key=lambda c: c.since_s)
        return None

    def _drop(self, connection: Connection) -> None:
        connection.closed = True
        self._open.pop(id(connection), None)


class BodyBudget:
    """Bytes of request bodies that may be held at once, across all connections."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._lock = threading.Lock()

    def reserve(self, n_bytes: int) -> bool:
        with self._lock:
            if self.held + n_bytes > self.max_bytes:
                return False
            self.held += n_bytes
            return True

    def release(self, n_bytes: int) -> None:
        with self._lock:
            self.held = max(0, self.held - n_bytes)


def _shut(sock: socket.socket) -> None:
    """Wake the thread reading `sock` (it sees the end of the stream) and close the connection."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _client_left(sock: socket.socket) -> bool:
    """Whether the peer closed (or reset) the connection; data it sent ahead is not leaving."""
    try:
        poller = select.poll()  # not select(): descriptors past 1024 are fine
        poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(0):
            return False
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except (OSError, ValueError):  # reset, or closed already
        return True
