"""The API's limits, in memory of the one serving process (per key and per client address).

    RateLimiter    requests per key: a token bucket (`rate_per_s` sustained, `burst` at once);
                   over it: 429 with Retry-After, the seconds until a token is back
    DownloadSlots  downloads of one key in flight at once; over the cap: 429
    AuthThrottle   failed authentications within a window, per (client address, key id), per
                   key id and in all; past them 429 (see the class: guessing must not pay
                   off, and a guesser must not lock anybody else out)

All three forget what they no longer need and keep at most `max_tracked` entries, so a
flood of addresses or keys cannot grow them without bound. Several serving processes each
keep their own counts (docs/api.md says so).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["AuthThrottle", "DownloadSlots", "RateLimiter"]


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 max_tracked: int = 100_000) -> None:
        self.rate_per_s, self.burst, self.clock, self.max_tracked = rate_per_s, burst, clock, max_tracked
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key → (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str) -> int:
        """0 when `key` may make a request now (a token is taken), else whole seconds to wait (≥ 1)."""
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate_per_s)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                wait = 0
            else:
                self._buckets[key] = (tokens, now)
                wait = max(1, math.ceil((1.0 - tokens) / self.rate_per_s))
            while len(self._buckets) > self.max_tracked:
                self._buckets.popitem(last=False)
            return wait


class DownloadSlots:
    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._in_flight: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str):
        """A context manager holding one of `key`'s slots, or None when all are taken."""
        with self._lock:
            taken = self._in_flight.get(key, 0)
            if taken >= self.per_key:
                return None
            self._in_flight[key] = taken + 1
        return self._held(key)

    def in_flight(self, key: str) -> int:
        with self._lock:
            return self._in_flight.get(key, 0)

    @contextmanager
    def _held(self, key: str) -> Iterator[None]:
        try:
            yield
        finally:
            with self._lock:
                left = self._in_flight[key] - 1
                if left:
                    self._in_flight[key] = left
                else:
                    del self._in_flight[key]


class _Failures:
    """Times of the newest failures per name within a window (at most `allowed` kept per name)."""

    def __init__(self, allowed: int, window_s: float, max_tracked: int) -> None:
        self.allowed, self.window_s, self.max_tracked = allowed, window_s, max_tracked
        self.times: OrderedDict[object, deque[float]] = OrderedDict()

    def add(self, name: object, now: float) -> None:
        times = self.times.pop(name, None) or deque()
        self._forget(times, now)
        times.append(now)
        while len(times) > self.allowed:  # only the newest `allowed` decide when it is lifted
            times.popleft()
        self.times[name] = times
        while len(self.times) > self.max_tracked:
            self.times.popitem(last=False)

    def wait_s(self, name: object, now: float) -> int:
        """0 when `name` is under its allowance, else whole seconds until its oldest counted failure expires."""
        times = self.times.get(name)
        if not times:
            return 0
        self._forget(times, now)
        if not times:
            del self.times[name]
            return 0
        if len(times) < self.allowed:
            return 0
        return max(1, math.ceil(times[0] + self.window_s - now))

    def _forget(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self.window_s:
            times.popleft()


class AuthThrottle:
    """Failed authentications within `window_s`, counted three ways so that guessing does not pay
    off and a guesser locks nobody else out:

        per (address, key id)  `allowed`: past it, that key id from that address is 429 before
                               any check, a right secret too; the address's other keys still work
        per key id             `per_key`: past it (guessing one key from many addresses), that key
                               id is 429 before any check from every address that has not opened
                               it in the last `holders_s`; where its holders use it, it still works
        all together           `ceiling`: past it, a failed attempt is answered 429, not 401, from
                               everywhere; a key that verifies still works

    The key id is the one the token names ('' for a missing or malformed token)."""

    def __init__(self, allowed: int, window_s: float, *, per_key: int = 50, ceiling: int = 1000,
                 holders_s: float = 86400.0, clock: Callable[[], float] = time.monotonic,
                 max_tracked: int = 100_000) -> None:
        self.allowed, self.window_s, self.clock, self.max_tracked = allowed, window_s, clock, max_tracked
        self.per_key, self.ceiling, self.holders_s = per_key, ceiling, holders_s
        self._pairs = _Failures(allowed, window_s, max_tracked)
        self._keys = _Failures(per_key, window_s, max_tracked)
        self._all = _Failures(ceiling, window_s, 1)
        self._holders: OrderedDict[tuple[str, str], float] = OrderedDict()  # (key id, address) → last opened
        self._lock = threading.Lock()

    def failed(self, client: str, key_id: str = "") -> None:
        """Count one failed authentication from `client` naming `key_id`."""
        now = self.clock()
        with self._lock:
            self._pairs.add((client, key_id), now)
            if key_id:
                self._keys.add(key_id, now)
            self._all.add("", now)

    def succeeded(self, client: str, key_id: str) -> None:
        """`client` opened `key_id`: it stays able to while the key id is guessed elsewhere."""
        now = self.clock()
        with self._lock:
            self._holders.pop((key_id, client), None)
            self._holders[(key_id, client)] = now
            while len(self._holders) > self.max_tracked:
                self._holders.popitem(last=False)

    def blocked_for(self, client: str, key_id: str = "") -> int:
        """0 when `client` may try `key_id`, else whole seconds to wait (checked before any key check)."""
        now = self.clock()
        with self._lock:
            wait_s = self._pairs.wait_s((client, key_id), now)
            if wait_s or not key_id:
                return wait_s
            wait_s = self._keys.wait_s(key_id, now)
            if wait_s and now - self._holders.get((key_id, client), -float("inf")) <= self.holders_s:
                return 0  # a holder of the key, from where it used it
            return wait_s

    def over_ceiling(self) -> int:
        """0 while failures everywhere are under the ceiling, else seconds until they are."""
        now = self.clock()
        with self._lock:
            return self._all.wait_s("", now)
