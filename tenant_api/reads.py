"""How request threads reach the database.

The embedded engine (chDB) is one per process and clickhouse-connect's chDB backend
serializes the calls on its one client under its own lock, so every request thread — and,
inside `gpubill up`, the pipeline's threads — shares that client: statements run one at a
time, whole reports interleave statement by statement. A ClickHouse server is reached
through a small pool of clients (one statement at a time per client, as clickhouse-connect's
HTTP session requires), `GPUBILL_API_DB_CONNECTIONS` of them.

Answers built from the same reads are shared between requests (tenant_api/cache.py), which
is what keeps fifty clients of one month from queueing fifty builds behind one engine.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tenant_api.problems import Problem

__all__ = ["Reads"]

T = TypeVar("T")
WAIT_S = 30.0  # how long a request waits for a pooled client before 503


class Reads:
    def __init__(self, databases: Sequence[Any], *, close: bool = False) -> None:
        """Share `databases[0]` (one embedded database, or one server client) or pool several.
        With `close`, `close()` closes them (the API opened them)."""
        if not databases:
            raise ValueError("Reads needs at least one database")
        self.databases = list(databases)
        self._close = close
        self._pool: queue.Queue | None = None
        if len(self.databases) > 1:
            self._pool = queue.Queue()
            for database in self.databases:
                self._pool.put(database)

    @property
    def embedded(self) -> bool:
        return bool(getattr(self.databases[0], "embedded", False))

    def run(self, read: Callable[[Any], T], *, timeout_s: float = WAIT_S) -> T:
        """`read(database)` on a client of this process; 503 when none is free within `timeout_s`."""
        if self._pool is None:
            return read(self.databases[0])
        try:
            database = self._pool.get(timeout=timeout_s)
        except queue.Empty:
            raise Problem(503, f"the database is busy: no connection was free within {timeout_s:.0f} s; try again",
                          headers={"Retry-After": "5"}, reason="db-busy") from None
        try:
            return read(database)
        finally:
            self._pool.put(database)

    def close(self) -> None:
        if self._close:
            for database in self.databases:
                database.close()
