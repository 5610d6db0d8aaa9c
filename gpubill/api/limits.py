"""The API's limits, in memory of the one serving process (per key and per client address).

    RateLimiter    requests per key: a token bucket (`rate_per_s` sustained, `burst` at once);
                   over it: 429 with Retry-After, the seconds until a token is back
    DownloadSlots  downloads of one key in flight at once; over the cap: 429
    AuthThrottle   failed authentications per client address within a window; past the
                   allowance every request from the address is 429 until the oldest failure
                   leaves the window (with a valid key too: guessing must not pay off)

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


class AuthThrottle:
    def __init__(self, allowed: int, window_s: float, *, clock: Callable[[], float] = time.monotonic,
                 max_tracked: int = 100_000) -> None:
        self.allowed, self.window_s, self.clock, self.max_tracked = allowed, window_s, clock, max_tracked
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def failed(self, client: str) -> None:
        """Count one failed authentication from `client`."""
        now = self.clock()
        with self._lock:
            times = self._failures.pop(client, None) or deque()
            self._forget(times, now)
            times.append(now)
            while len(times) > self.allowed:  # only the newest `allowed` decide when it is lifted
                times.popleft()
            self._failures[client] = times
            while len(self._failures) > self.max_tracked:
                self._failures.popitem(last=False)

    def blocked_for(self, client: str) -> int:
        """0 when `client` may try, else whole seconds until its oldest counted failure expires."""
        now = self.clock()
        with self._lock:
            times = self._failures.get(client)
            if not times:
                return 0
            self._forget(times, now)
            if not times:
                del self._failures[client]
                return 0
            if len(times) < self.allowed:
                return 0
            return max(1, math.ceil(times[0] + self.window_s - now))

    def _forget(self, times: deque[float], now: float) -> None:
        while times and times[0] <= now - self.window_s:
            times.popleft()
