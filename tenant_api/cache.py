"""A small in-memory cache of built answers, with one build per key at a time.

Fifty clients asking for the same month at once cost one report build, not fifty: the
first builds, the others wait for its result (`get_or_build`). A result is then reused for
`ttl_s` seconds; a failed build is not kept (each waiter gets the error, the next asker
builds again). Entries past `max_entries`, or past `max_bytes` as `size_of` weighs them,
are dropped oldest first (a value larger than `max_bytes` is served, not kept).

With `refresh_ahead`, a value past half its life is still served, and one build in the
background replaces it: under steady asking nobody waits for a rebuild (fifty clients of
the month to date would otherwise all wait for it every `ttl_s`), and no answer is ever
older than `ttl_s` plus that build. A failed background build is logged and the value
kept until its `ttl_s`; then the next asker builds, and waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["TtlCache"]

log = logging.getLogger("gpubill.api")


class TtlCache:
    def __init__(self, ttl_s: float, *, clock: Callable[[], float] = time.monotonic, max_entries: int = 512,
                 max_bytes: int | None = None, size_of: Callable[[Any], int] = lambda value: 0,
                 refresh_ahead: bool = False) -> None:
        self.ttl_s = ttl_s
        self._refresher = ThreadPoolExecutor(2, thread_name_prefix="gpubill-cache") if refresh_ahead else None
        self.clock = clock
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size_of = size_of
        self.bytes = 0
        self._entries: OrderedDict[Hashable, tuple[float, Any, int]] = OrderedDict()
        self._building: dict[Hashable, Future] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        """The value kept for `key` if it is younger than ttl_s, else None."""
        with self._lock:
            return self._fresh(key)

    def put(self, key: Hashable, value: Any) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            self._keep(key, value)

    def drop(self, key: Hashable) -> None:
        with self._lock:
            self._remove(key)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The kept value, or the one a build in flight for `key` produces, or `build()`'s."""
        with self._lock:
            value = self._fresh(key)
            if value is not None:
                if self._refresher is not None and key not in self._building and self._ageing(key):
                    self._building[key] = Future()
                    self._refresher.submit(self._refresh, key, build)
                return value
            pending = self._building.get(key)
            if pending is None:
                pending = self._building[key] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            return pending.result()
        try:
            value = build()
        except BaseException as exc:
            with self._lock:
                del self._building[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._building[key]
            if self.ttl_s > 0 and value is not None:
                self._keep(key, value)
        pending.set_result(value)
        return value

    def _refresh(self, key: Hashable, build: Callable[[], Any]) -> None:
        """The background build of refresh_ahead: replaces the value; waiters of a build that
        started meanwhile get its result."""
        try:
            value = build()
        except Exception as exc:  # noqa: BLE001 - the served value stays until its ttl; logged
            log.warning("refreshing a cached answer failed (the kept one is served until it expires): %s", exc)
            with self._lock:
                pending = self._building.pop(key)
            pending.set_exception(exc)
            return
        with self._lock:
            pending = self._building.pop(key)
            if value is not None:
                self._keep(key, value)
        pending.set_result(value)

    def _ageing(self, key: Hashable) -> bool:
        return self.clock() - self._entries[key][0] >= self.ttl_s / 2

    def _fresh(self, key: Hashable) -> Any | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        born, value, _ = entry
        if self.clock() - born >= self.ttl_s:
            self._remove(key)
            return None
        return value

    def _keep(self, key: Hashable, value: Any) -> None:
        size = self.size_of(value)
        if self.max_bytes is not None and size > self.max_bytes:
            return
        self._remove(key)
        self._entries[key] = (self.clock(), value, size)
        self.bytes += size
        while len(self._entries) > self.max_entries or (self.max_bytes is not None and self.bytes > self.max_bytes):
            self._remove(next(iter(self._entries)))

    def _remove(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry[2]
